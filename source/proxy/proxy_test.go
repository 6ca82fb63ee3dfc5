package proxy

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source"
)

// serve answers body at path, and 404 elsewhere; it returns its host:port.
func serve(t *testing.T, path, body string) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != path {
			http.NotFound(w, r)
			return
		}
		w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// closed is an address nothing listens on.
func closed(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// proc is a /proc whose net.ipv4.vs.conntrack is v ("" for none).
func proc(t *testing.T, v string) string {
	t.Helper()
	dir := t.TempDir()
	if v != "" {
		p := filepath.Join(dir, "sys/net/ipv4/vs/conntrack")
		os.MkdirAll(filepath.Dir(p), 0o755)
		if err := os.WriteFile(p, []byte(v+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func TestSource(t *testing.T) {
	for _, tc := range []struct {
		name      string
		kubeProxy string // the mode kube-proxy says; "" when none answers
		cilium    bool
		vs        string
		// want is Describe's text, or the unsupported reason's start.
		want        string
		unsupported bool
	}{
		{name: "kube-proxy, iptables", kubeProxy: "iptables", want: "mode iptables: Service NAT in conntrack"},
		{name: "kube-proxy, nftables", kubeProxy: "nftables\n", want: "mode nftables: Service NAT in conntrack"},
		{name: "kube-proxy, IPVS with vs/conntrack", kubeProxy: "ipvs", vs: "1", want: "mode ipvs: Service NAT in conntrack"},
		{name: "kube-proxy, IPVS without vs/conntrack", kubeProxy: "ipvs", vs: "0", unsupported: true,
			want: "runs in IPVS mode with net.ipv4.vs.conntrack=0: IPVS translates Services without conntrack entries"},
		{name: "Cilium, no kube-proxy", cilium: true, unsupported: true,
			want: "and a Cilium agent answers at"},
		{name: "nothing answers", want: "Service NAT assumed in conntrack; if an eBPF load balancer serves Services here"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := &Source{KubeProxy: closed(t), Cilium: closed(t), Proc: proc(t, tc.vs)}
			if tc.kubeProxy != "" {
				src.KubeProxy = serve(t, "/proxyMode", tc.kubeProxy)
			}
			if tc.cilium {
				src.Cilium = serve(t, "/healthz", "ok")
			}
			s := &snapshot.Snapshot{}
			err := src.Collect(context.Background(), s)
			switch {
			case tc.unsupported:
				if !errors.Is(err, source.ErrUnsupported) || !strings.Contains(err.Error(), tc.want) || s.ServiceProxy != nil {
					t.Errorf("Collect: %v, %+v; want unsupported: %s", err, s.ServiceProxy, tc.want)
				}
			case err != nil:
				t.Errorf("Collect: %v", err)
			case !strings.Contains(src.Describe(s), tc.want):
				t.Errorf("Describe: %q, want %q", src.Describe(s), tc.want)
			}
		})
	}
}

// An answer stands for Every: an audit a second does not ask kube-proxy a
// question a second.
func TestSourceAsksOncePerEvery(t *testing.T) {
	asked := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { asked++; w.Write([]byte("iptables")) }))
	t.Cleanup(srv.Close)
	now := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	src := &Source{KubeProxy: strings.TrimPrefix(srv.URL, "http://"), Every: time.Minute, Now: func() time.Time { return now }}
	for range 3 {
		if err := src.Collect(context.Background(), &snapshot.Snapshot{}); err != nil {
			t.Fatal(err)
		}
		now = now.Add(10 * time.Second)
	}
	now = now.Add(time.Minute)
	if err := src.Collect(context.Background(), &snapshot.Snapshot{}); err != nil {
		t.Fatal(err)
	}
	if asked != 2 {
		t.Errorf("kube-proxy asked %d times, want 2", asked)
	}
}
