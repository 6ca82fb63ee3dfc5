package gossip_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os/signal"
	"syscall"

	"github.com/hashicorp/memberlist"

	"github.com/ghostwatch/ghostwatch/gossip"
)

// A member of a cluster of pods: named after its pod UID, configured for
// recycled addresses, serving its member list to ghostwatch, and leaving
// on SIGTERM.
func Example() {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM)
	defer stop()

	// $POD_NAME-$POD_UID from the downward API; never the pod IP.
	name, err := gossip.NodeName()
	if err != nil {
		log.Fatal(err)
	}
	cfg := gossip.DefaultPodConfig(name, "shop/cache")
	// In a pod: BindAddr "0.0.0.0" and one fixed port on every member.
	cfg.BindAddr, cfg.BindPort = "127.0.0.1", 0
	cfg.LogOutput = io.Discard
	view := gossip.Watch(cfg) // after setting cfg.Events, if any
	ml, err := memberlist.Create(cfg)
	if err != nil {
		log.Fatal(err)
	}
	left := make(chan error, 1)
	go func() { left <- gossip.LeaveOnDone(ctx, ml, gossip.DefaultLeaveTimeout) }()
	// Then ml.Join(peers), e.g. a headless Service's name.

	// The member list, where ghostwatch reads it: the pod is annotated
	// ghostwatch.io/gossip: memberlist and ghostwatch.io/gossip-port with
	// this server's port.
	mux := http.NewServeMux()
	mux.Handle(gossip.Path, view.Handler(ml))
	srv := httptest.NewServer(mux)
	defer srv.Close()
	resp, err := http.Get(srv.URL + gossip.Path)
	if err != nil {
		log.Fatal(err)
	}
	var l gossip.MemberList
	if err := json.NewDecoder(resp.Body).Decode(&l); err != nil {
		log.Fatal(err)
	}
	resp.Body.Close()
	fmt.Println(l.Kind, l.Label)
	for _, m := range l.Members {
		fmt.Println(m.Name == name, m.State)
	}

	stop() // as SIGTERM does
	fmt.Println("left:", <-left)
	// Output:
	// ghostwatch.io/memberlist-members shop/cache
	// true alive
	// left: <nil>
}
