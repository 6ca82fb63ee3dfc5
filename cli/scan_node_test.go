package cli

import (
	"context"
	"errors"
	"net/netip"
	"runtime"
	"strings"
	"testing"

	"github.com/vishvananda/netns"

	"github.com/ghostwatch/ghostwatch/internal/testenv"
	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source/conntrack"
)

// A table read live that holds no entry is refused as an empty saved
// listing is: no node's table is empty while it runs pods. The table of a
// network namespace of its own (a pod's without hostNetwork) is one.
func TestEmptyLiveTableIsRefused(t *testing.T) {
	testenv.RequireRoot(t, "kernel test: needs root for a network namespace and its conntrack table")
	type opened struct {
		c   *conntrack.Conn
		err error
	}
	open := func() (*conntrack.Conn, error) {
		ch := make(chan opened)
		go func() {
			runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
			var o opened
			defer func() { ch <- o }()
			ns, err := netns.New()
			if err != nil {
				o.err = err
				return
			}
			ns.Close()
			o.c, o.err = conntrack.Open()
		}()
		o := <-ch
		return o.c, o.err
	}
	s := &snapshot.Snapshot{}
	err := liveTable{&conntrack.KernelSource{Open: open}}.Collect(context.Background(), s)
	if !errors.Is(err, conntrack.ErrEmptyListing) || !strings.Contains(err.Error(), "this host's conntrack table holds no entries") || s.Conntrack != nil {
		t.Errorf("%v; table %+v", err, s.Conntrack)
	}
}

// A host that is no node of the cluster is said to be none, with the
// cluster's nodes, and the node whose address it holds when one does.
func TestNotClusterNode(t *testing.T) {
	k := &snapshot.Kube{Nodes: []snapshot.Node{
		{Name: "worker-1", Addresses: []netip.Addr{netip.MustParseAddr("192.168.60.1")}},
		{Name: "worker-2", Addresses: []netip.Addr{netip.MustParseAddr("192.168.60.2")}},
	}}
	s := &snapshot.Snapshot{Kube: k}
	local := []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("192.168.60.2")}
	if why := notClusterNode(s, "worker-1", "--node-name", local); why != "" {
		t.Errorf("a node of the cluster: %s", why)
	}
	why := notClusterNode(s, "vm", "the hostname", local)
	for _, want := range []string{`"vm" (the hostname) is not among the cluster's nodes (its nodes: worker-1, worker-2)`, "run the scan on the node", "this host's addresses are node worker-2's: pass --node-name worker-2"} {
		if !strings.Contains(why, want) {
			t.Errorf("%q lacks %q", why, want)
		}
	}
	if why := notClusterNode(&snapshot.Snapshot{}, "vm", "the hostname", nil); why != "" {
		t.Errorf("without the cluster's objects: %s", why)
	}
	if why := notClusterNode(&snapshot.Snapshot{Kube: &snapshot.Kube{Missing: []string{"Node"}}}, "vm", "the hostname", nil); why != "" {
		t.Errorf("saved objects without Nodes: %s", why)
	}
	if why := notClusterNode(&snapshot.Snapshot{Kube: &snapshot.Kube{}}, "vm", "the hostname", nil); !strings.Contains(why, "it lists no Node") {
		t.Errorf("a cluster without nodes: %s", why)
	}
}
