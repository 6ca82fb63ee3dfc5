// Command example is a memberlist member built with the gossip package:
// named after its pod UID, configured for recycled pod addresses, serving
// its member list to ghostwatch, leaving the cluster on SIGTERM.
//
// On one machine, three members on three loopback addresses:
//
//	go run ./gossip/example -bind 127.0.0.2 -http 127.0.0.2:8080 &
//	go run ./gossip/example -bind 127.0.0.3 -http 127.0.0.3:8080 -join 127.0.0.2 &
//	go run ./gossip/example -bind 127.0.0.4 -http 127.0.0.4:8080 -join 127.0.0.2 &
//	curl -s 127.0.0.2:8080/ghostwatch/members
//
// In a pod, see docs/gossip.md for the downward API and the annotations.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	stdlog "log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/ghostwatch/ghostwatch/gossip"
)

func main() {
	bind := flag.String("bind", "0.0.0.0", "address to gossip on")
	port := flag.Int("port", 7946, "port to gossip on, UDP and TCP: the same on every member")
	advertise := flag.String("advertise", os.Getenv("POD_IP"), "address the other members reach this one at (default $POD_IP, else the bind address)")
	join := flag.String("join", "", "members to join, comma-separated host[:port]; a headless Service's name resolves to every ready pod")
	label := flag.String("label", "example/cache", "cluster label: the same on every member, on no other cluster")
	listen := flag.String("http", ":8080", "where to serve the member list ("+gossip.Path+")")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	if err := run(log, *bind, *port, *advertise, *join, *label, *listen); err != nil {
		log.Error("stopped", "err", err)
		os.Exit(1)
	}
}

func run(log *slog.Logger, bind string, port int, advertise, join, label, listen string) error {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()

	id, err := gossip.Identity{}.MemberName()
	if err != nil {
		return err
	}
	log.Info("member name", "name", id.Name, "from", id.From)
	cfg := gossip.DefaultPodConfig(id.Name, label)
	cfg.BindAddr, cfg.BindPort = bind, port
	cfg.AdvertiseAddr, cfg.AdvertisePort = advertise, port
	cfg.Logger = stdlog.New(levelWriter{log}, "", 0)
	view := gossip.Watch(cfg)
	ml, err := memberlist.Create(cfg)
	if err != nil {
		return fmt.Errorf("starting memberlist on %s:%d: %w", bind, port, err)
	}

	mux := http.NewServeMux()
	mux.Handle(gossip.Path, view.Handler(ml))
	srv := &http.Server{Addr: listen, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		_ = ml.Shutdown()
		return fmt.Errorf("serving the member list: %w", err)
	}
	go func() { _ = srv.Serve(ln) }()
	log.Info("serving the member list", "url", "http://"+ln.Addr().String()+gossip.Path)

	if join != "" {
		go joinUntilDone(ctx, log, ml, strings.Split(join, ","))
	}

	err = gossip.LeaveOnDone(ctx, ml, gossip.DefaultLeaveTimeout)
	shutdown, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = srv.Shutdown(shutdown)
	switch {
	case errors.Is(err, gossip.ErrLeaveTimeout):
		// Also when every member stops at once: memberlist does not
		// gossip to members that left, so the last ones have nobody to
		// tell, and wait out the timeout.
		log.Warn("shut down without telling the cluster", "err", err)
	case err != nil:
		return err
	default:
		log.Info("left the cluster")
	}
	return nil
}

// joinUntilDone joins the members at addrs, retrying while none answers:
// the pods of a cluster start together.
func joinUntilDone(ctx context.Context, log *slog.Logger, ml *memberlist.Memberlist, addrs []string) {
	for {
		n, err := ml.Join(addrs)
		if err == nil || n > 0 {
			log.Info("joined", "contacted", n)
			return
		}
		log.Info("no member to join yet", "addrs", addrs, "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(2 * time.Second):
		}
	}
}

// levelWriter logs memberlist's lines ("[LEVEL] memberlist: ...") at
// their level: its DEBUG lines, one per stream (every read of the member
// list makes one), stay below the default level.
type levelWriter struct{ log *slog.Logger }

func (w levelWriter) Write(p []byte) (int, error) {
	line := strings.TrimSpace(string(p))
	level := slog.LevelInfo
	for prefix, l := range map[string]slog.Level{"[DEBUG] ": slog.LevelDebug, "[WARN] ": slog.LevelWarn, "[ERR] ": slog.LevelError, "[ERROR] ": slog.LevelError} {
		if rest, ok := strings.CutPrefix(line, prefix); ok {
			line, level = rest, l
		}
	}
	line = strings.TrimPrefix(line, "[INFO] ")
	w.log.Log(context.Background(), level, line)
	return len(p), nil
}
