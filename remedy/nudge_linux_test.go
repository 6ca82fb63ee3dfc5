package remedy_test

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"github.com/ghostwatch/ghostwatch/finding"
	"github.com/ghostwatch/ghostwatch/internal/testenv"
	"github.com/ghostwatch/ghostwatch/lab/netbed"
	"github.com/ghostwatch/ghostwatch/remedy"
	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source/conntrack"
)

// A client whose backend vanished without a word retransmits into the
// void. Once its flow is deleted, the nudge resets its connection: here no
// backend is left, so new flows to the NodePort are dropped and its own
// retransmissions could never bring a reset; the one it gets is the
// nudge's.
func TestSYNNudgeResetsTheClientOfADeletedFlow(t *testing.T) {
	testenv.RequireRoot(t, "kernel test: needs root to create network namespaces (run the suite as root)")
	b := make([]byte, 3)
	rand.Read(b)
	bed, err := netbed.New("gwy" + hex.EncodeToString(b)[:5])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bed.Close() })
	nodeIP := netip.MustParsePrefix("10.96.200.1/32")
	node, err := bed.AddNode("n", netbed.NodeOptions{Addrs: []netip.Prefix{nodeIP}})
	if err != nil {
		t.Fatal(err)
	}
	client, err := bed.AddHost("c", node, netip.MustParsePrefix("10.244.0.10/32"))
	if err != nil {
		t.Fatal(err)
	}
	server, err := bed.AddHost("s", node, netip.MustParsePrefix("10.244.0.11/32"))
	if err != nil {
		t.Fatal(err)
	}
	nodePort := netip.AddrPortFrom(nodeIP.Addr(), 30080)
	backend := netip.MustParseAddrPort("10.244.0.11:8080")
	ln, err := server.Listen("tcp", backend.String())
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		r := bufio.NewReader(c)
		for {
			if _, err := r.ReadString('\n'); err != nil {
				return
			}
			c.Write([]byte("ok\n"))
		}
	}()
	svc := netbed.Service{Proto: snapshot.ProtoTCP, Frontends: []netip.AddrPort{nodePort}, Backends: []netip.AddrPort{backend}}
	if err := node.SetServices([]netbed.Service{svc}); err != nil {
		t.Fatal(err)
	}
	conn, err := client.Dial(context.Background(), "tcp", "", nodePort.String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	// A bound on a hang, not on how fast: the reset comes within a round
	// trip of the nudge.
	conn.SetDeadline(time.Now().Add(time.Minute))
	r := bufio.NewReader(conn)
	if _, err := conn.Write([]byte("hi\n")); err != nil {
		t.Fatal(err)
	}
	if line, err := r.ReadString('\n'); err != nil || line != "ok\n" {
		t.Fatalf("answer %q, %v", line, err)
	}

	// The pod dies without a word and its Service has no backend left.
	if err := server.Unplug(); err != nil {
		t.Fatal(err)
	}
	svc.Backends = nil
	if err := node.SetServices([]netbed.Service{svc}); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write([]byte("hi\n")); err != nil {
		t.Fatal(err)
	}

	var table *conntrack.Conn
	if err := node.Do(func() (err error) { table, err = conntrack.Open(); return err }); err != nil {
		t.Fatal(err)
	}
	defer table.Close()
	var ghost snapshot.Flow
	if _, err := table.Dump(context.Background(), func(f *snapshot.Flow) error {
		if f.Backend() == backend {
			ghost = *f
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if ghost.ID == 0 || ghost.State != "ESTABLISHED" {
		t.Fatalf("the client's flow to %s: %+v", backend, ghost)
	}
	// The remedy deletes the flow, then nudges its client. A ClusterIP
	// (not the node's address) and a state other than ESTABLISHED are
	// not nudged.
	clusterIP := ghost
	clusterIP.Orig.Dst = netip.MustParseAddr("10.96.0.10")
	closing := ghost
	closing.State = "FIN_WAIT"
	var nudged []error
	nudge := nudgeLog{errs: &nudged, node: node, n: &remedy.SYNNudge{}}
	fl := &remedy.Flows{Table: table, Nudge: nudge}
	// The agent's index knows the state a flow began in: the remedy
	// reads it back before the delete.
	judged := ghost
	judged.State = "SYN_SENT"
	tg := finding.NewFlowTarget("ghost", judged)
	tl := fl.ActEach(context.Background(), tg, false)
	if tl.Done != 1 || tl.Nudged != 1 {
		t.Fatalf("tally %+v (nudges %v), want the flow deleted and its client nudged", tl, nudged)
	}
	for _, f := range []snapshot.Flow{clusterIP, closing} {
		var err error
		node.Do(func() error { err = nudge.n.Nudge(&f); return nil })
		if !errors.Is(err, remedy.ErrNotNudged) {
			t.Errorf("nudge %s in state %s: %v, want %v", f.Frontend(), f.State, err, remedy.ErrNotNudged)
		}
	}
	if line, err := r.ReadString('\n'); !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("the client read %q, %v; want its connection reset", line, err)
	}
}

// nudgeLog nudges from inside the node and keeps each outcome.
type nudgeLog struct {
	errs *[]error
	node *netbed.Node
	n    *remedy.SYNNudge
}

func (l nudgeLog) Wants(f *snapshot.Flow) bool {
	var ok bool
	l.node.Do(func() error { ok = l.n.Wants(f); return nil })
	return ok
}

func (l nudgeLog) Nudge(f *snapshot.Flow) error {
	var err error
	l.node.Do(func() error { err = l.n.Nudge(f); return nil })
	*l.errs = append(*l.errs, err)
	return err
}
