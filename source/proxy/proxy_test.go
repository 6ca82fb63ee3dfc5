package proxy

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
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

// proc is a /proc whose net.ipv4.vs.conntrack is v ("" for none), and
// whose socket tables are this process's.
func proc(t *testing.T, v string) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.Symlink("/proc/self/net", filepath.Join(dir, "net")); err != nil {
		t.Fatal(err)
	}
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
			if tc.unsupported && os.Geteuid() != 0 {
				// The listeners are this test's: only root's word leaves
				// the flow rules out (TestOnlyRootsListenerIsTakenAsCilium).
				t.Skip("needs root: the answering listener must be root's to be believed")
			}
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

// The kernel's socket tables, as /proc/net/tcp and tcp6 print them on this
// host: listeners only, addresses in each word's host order, the uid and
// the inode of each; and which listeners take a connection to an address.
func TestParseListeners(t *testing.T) {
	const tcp = `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:2697 00000000:0000 0A 00000000:00000000 00:00000000 00000000 65534        0 4242 1 0000000000000000 100 0 0 10 0
   1: 00000000:2829 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 17 1 0000000000000000 100 0 0 10 0
   2: 0100007F:2697 0100007F:C350 01 00000000:00000000 00:00000000 00000000     0        0 99 1 0000000000000000 20 4 30 10 -1
`
	const tcp6 = `  sl  local_address                         remote_address                        st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000000000000000000001000000:2697 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 7 1 0000000000000000 100 0 0 10 0
   1: 00000000000000000000000000000000:1F90 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 8 1 0000000000000000 100 0 0 10 0
`
	if binary.NativeEndian.Uint16([]byte{1, 0}) != 1 {
		t.Skip("the fixtures are a little-endian host's")
	}
	var got []string
	for _, table := range []string{tcp, tcp6} {
		ls, err := parseListeners(strings.NewReader(table))
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range ls {
			got = append(got, fmt.Sprintf("%s uid %d inode %d", l.Addr, l.UID, l.Inode))
		}
	}
	want := []string{"127.0.0.1:9879 uid 65534 inode 4242", "0.0.0.0:10281 uid 0 inode 17", "[::1]:9879 uid 0 inode 7", "[::]:8080 uid 1000 inode 8"}
	if !slices.Equal(got, want) {
		t.Errorf("listeners:\n got %v\nwant %v", got, want)
	}
	for _, c := range []struct {
		listener, to string
		want         bool
	}{
		{"127.0.0.1:9879", "127.0.0.1:9879", true},
		{"127.0.0.1:9879", "127.0.0.1:9878", false},
		{"0.0.0.0:9879", "127.0.0.1:9879", true},
		{"0.0.0.0:9879", "[::1]:9879", false},
		{"[::]:9879", "127.0.0.1:9879", true},
		{"[::ffff:127.0.0.1]:9879", "127.0.0.1:9879", true},
		{"10.0.0.1:9879", "127.0.0.1:9879", false},
	} {
		if got := accepts(netip.MustParseAddrPort(c.listener), netip.MustParseAddrPort(c.to)); got != c.want {
			t.Errorf("a listener at %s takes %s: %v, want %v", c.listener, c.to, got, c.want)
		}
	}
	if _, err := parseListeners(strings.NewReader("header\n 0: 0100007F:2697 00000000:0000 0A\n")); err == nil {
		t.Error("a truncated line was accepted")
	}
}
