package lab

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/ghostwatch/ghostwatch/lab/controlplane"
	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source/proxy"
)

// On a node of each mode this kernel runs, the agent's proxy source, asked
// from inside the node's network namespace as the agent runs, finds the
// real kube-proxy's mode and calls its Service NAT visible in conntrack;
// with kube-proxy gone, nothing answers and it says what it assumes.
func TestRealProxySourceFindsKubeProxysMode(t *testing.T) {
	for _, mode := range []controlplane.ProxyMode{controlplane.ProxyIPTables, controlplane.ProxyNFTables} {
		t.Run(string(mode), func(t *testing.T) {
			e := newRealEnv(t, mode)
			// The agent runs in the node's network namespace: the client
			// dials from there (a transport dials on a goroutine of its
			// own, which Do puts in the namespace).
			client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DialContext: func(ctx context.Context, network, addr string) (net.Conn, error) {
				var c net.Conn
				var err error
				if derr := e.node.Net.Do(func() error { c, err = (&net.Dialer{}).DialContext(ctx, network, addr); return nil }); derr != nil {
					return nil, derr
				}
				return c, err
			}}}
			var s snapshot.Snapshot
			var err error
			src := &proxy.Source{Client: client}
			if derr := e.node.Net.Do(func() error { err = src.Collect(context.Background(), &s); return nil }); derr != nil {
				t.Fatal(derr)
			}
			if err != nil || s.ServiceProxy == nil || s.ServiceProxy.Mode != string(mode) || !strings.Contains(src.Describe(&s), "Service NAT in conntrack") {
				t.Fatalf("proxy source: %v, %+v", err, s.ServiceProxy)
			}
			e.node.Stop()
			s = snapshot.Snapshot{}
			src = &proxy.Source{Client: client}
			if derr := e.node.Net.Do(func() error { err = src.Collect(context.Background(), &s); return nil }); derr != nil {
				t.Fatal(derr)
			}
			if err != nil || s.ServiceProxy == nil || s.ServiceProxy.Mode != "" || !strings.Contains(s.ServiceProxy.Note, "no kube-proxy answers at 127.0.0.1:10249") {
				t.Errorf("kube-proxy stopped: %v, %+v", err, s.ServiceProxy)
			}
		})
	}
}
