package netbed

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net"
	"net/netip"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ghostwatch/ghostwatch/internal/poll"
	"github.com/ghostwatch/ghostwatch/internal/testenv"
	"github.com/ghostwatch/ghostwatch/snapshot"
)

func requireRoot(t *testing.T) {
	t.Helper()
	testenv.RequireRoot(t, "kernel test: needs root to create network namespaces (run the suite as root)")
}

// testPrefix is unique per test, so parallel packages never collide.
func testPrefix(t *testing.T) string {
	b := make([]byte, 3)
	rand.Read(b)
	return "gwt" + hex.EncodeToString(b)[:5]
}

func newBed(t *testing.T) *Bed {
	t.Helper()
	requireRoot(t)
	b, err := New(testPrefix(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := b.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return b
}

func pfx(s string) netip.Prefix {
	a := netip.MustParseAddr(s)
	return netip.PrefixFrom(a, a.BitLen())
}

func ap(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

// echo serves TCP and UDP on addr, answering every line or datagram with name.
func echo(t *testing.T, h *Host, addr, name string) {
	t.Helper()
	ln, err := h.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				r := bufio.NewReader(c)
				for {
					if _, err := r.ReadString('\n'); err != nil {
						c.Close()
						return
					}
					c.Write([]byte(name + "\n"))
				}
			}()
		}
	}()
	pc, err := h.ListenPacket("udp", addr)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		buf := make([]byte, 512)
		for {
			_, from, err := pc.ReadFrom(buf)
			if err != nil {
				return
			}
			pc.WriteTo([]byte(name+"\n"), from)
		}
	}()
}

// ask sends a line on c and returns the answer: one is to come, and is
// waited for until poll.Patience.
func ask(c net.Conn) (string, error) { return askWithin(c, poll.Patience) }

// askWithin is ask, giving up after d: where no answer is to come, d is
// how long its absence is watched for.
func askWithin(c net.Conn, d time.Duration) (string, error) {
	c.SetDeadline(time.Now().Add(d))
	if _, err := c.Write([]byte("hi\n")); err != nil {
		return "", err
	}
	buf := make([]byte, 64)
	n, err := c.Read(buf)
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(buf[:n])), nil
}

type bedFixture struct {
	bed              *Bed
	node             *Node
	client, pod1, p2 *Host
}

func build(t *testing.T) bedFixture {
	b := newBed(t)
	node, err := b.AddNode("node", NodeOptions{Addrs: []netip.Prefix{pfx("192.168.50.1"), pfx("fd00:50::1")}})
	if err != nil {
		t.Fatal(err)
	}
	client, err := b.AddHost("client", node, pfx("203.0.113.10"), pfx("2001:db8::10"))
	if err != nil {
		t.Fatal(err)
	}
	pod1, err := b.AddHost("pod1", node, pfx("10.244.1.100"), pfx("fd00:244::100"))
	if err != nil {
		t.Fatal(err)
	}
	pod2, err := b.AddHost("pod2", node, pfx("10.244.1.101"), pfx("fd00:244::101"))
	if err != nil {
		t.Fatal(err)
	}
	echo(t, pod1, ":8080", "pod1")
	echo(t, pod2, ":8080", "pod2")
	return bedFixture{b, node, client, pod1, pod2}
}

func services(proto snapshot.Proto, backends ...string) []Service {
	s := Service{Proto: proto, Frontends: []netip.AddrPort{
		ap("10.96.0.10:80"), ap("[fd00:96::10]:80"), ap("192.168.50.1:30080"), ap("[fd00:50::1]:30080")}}
	for _, b := range backends {
		s.Backends = append(s.Backends, ap(b))
	}
	return []Service{s}
}

func TestDNATThroughEveryFrontend(t *testing.T) {
	f := build(t)
	ctx := context.Background()
	for _, proto := range []snapshot.Proto{snapshot.ProtoTCP, snapshot.ProtoUDP} {
		if err := f.node.SetServices(services(proto, "10.244.1.100:8080", "[fd00:244::100]:8080")); err != nil {
			t.Fatal(err)
		}
		for _, fe := range []string{"10.96.0.10:80", "[fd00:96::10]:80", "192.168.50.1:30080", "[fd00:50::1]:30080"} {
			c, err := f.client.Dial(ctx, proto.String(), "", fe)
			if err != nil {
				t.Fatalf("%s %s: %v", proto, fe, err)
			}
			got, err := ask(c)
			c.Close()
			if err != nil || got != "pod1" {
				t.Errorf("%s via %s: answer %q, %v; want pod1", proto, fe, got, err)
			}
		}
	}
}

// The incident itself: a new backend takes new connections while an
// established one keeps its translation; when its pod goes, it breaks.
func TestEstablishedFlowOutlivesItsBackend(t *testing.T) {
	f := build(t)
	ctx := context.Background()
	if err := f.node.SetServices(services(snapshot.ProtoTCP, "10.244.1.100:8080")); err != nil {
		t.Fatal(err)
	}
	old, err := f.client.Dial(ctx, "tcp", "", "192.168.50.1:30080")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := ask(old); got != "pod1" {
		t.Fatalf("before: %q, %v", got, err)
	}
	if err := f.node.SetServices(services(snapshot.ProtoTCP, "10.244.1.101:8080")); err != nil {
		t.Fatal(err)
	}
	fresh, err := f.client.Dial(ctx, "tcp", "", "192.168.50.1:30080")
	if err != nil {
		t.Fatal(err)
	}
	if got, err := ask(fresh); got != "pod2" {
		t.Errorf("new connection after the switch: %q, %v; want pod2", got, err)
	}
	if got, err := ask(old); got != "pod1" {
		t.Errorf("established connection after the switch: %q, %v; want pod1 (conntrack keeps it)", got, err)
	}
	if err := f.bed.RemoveHost(f.pod1); err != nil {
		t.Fatal(err)
	}
	if got, err := askWithin(old, time.Second); err == nil {
		t.Errorf("established connection after its pod was removed answered %q; want a failure", got)
	}
	if got, err := ask(fresh); got != "pod2" {
		t.Errorf("the other connection: %q, %v", got, err)
	}
}

func TestNoBackendsDropsNewConnections(t *testing.T) {
	f := build(t)
	if err := f.node.SetServices(services(snapshot.ProtoTCP)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if c, err := f.client.Dial(ctx, "tcp", "", "10.96.0.10:80"); err == nil {
		c.Close()
		t.Fatal("connected to a service without backends")
	}
}

// While a bed runs, a second one on its prefix is refused as another lab
// running; Close removes every namespace and gives the prefix up.
func TestCloseRemovesEverythingAndNewRefusesWhileRunning(t *testing.T) {
	requireRoot(t)
	prefix := testPrefix(t)
	b, err := New(prefix)
	if err != nil {
		t.Fatal(err)
	}
	node, err := b.AddNode("node", NodeOptions{})
	if err != nil {
		b.Close()
		t.Fatal(err)
	}
	if _, err := b.AddHost("h", node, pfx("10.0.0.2")); err != nil {
		b.Close()
		t.Fatal(err)
	}
	var busy *BusyError
	if _, err := New(prefix); !errors.As(err, &busy) || busy.PID != os.Getpid() {
		t.Errorf("New while a bed runs: %v, want another lab (pid %d) running", err, os.Getpid())
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	entries, _ := os.ReadDir(netnsDir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), prefix+"-") {
			t.Errorf("namespace %s left behind", e.Name())
		}
	}
	if err := b.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	again, err := New(prefix)
	if err != nil {
		t.Fatalf("New after Close: %v", err)
	}
	again.Close()
}

// The namespaces of a lab whose process is gone (its lock dropped, its
// namespaces still bound) are leftovers: New lists them, Cleanup unmounts
// and removes every one.
func TestCleanupRemovesADeadLabsNamespaces(t *testing.T) {
	requireRoot(t)
	prefix := testPrefix(t)
	b, err := New(prefix)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	node, err := b.AddNode("node", NodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.AddHost("h", node, pfx("10.0.0.2")); err != nil {
		t.Fatal(err)
	}
	// The process dies: the kernel drops its lock, the bind mounts stay.
	b.claim.Release()
	var left *LeftoversError
	want := []string{prefix + "-h", prefix + "-node"}
	if _, err := New(prefix); !errors.As(err, &left) || !slices.Equal(left.Names, want) {
		t.Errorf("New over a dead lab's namespaces: %v, want leftovers %v", err, want)
	}
	removed, err := Cleanup(prefix)
	if err != nil || !slices.Equal(removed, want) {
		t.Errorf("Cleanup removed %v, %v; want %v", removed, err, want)
	}
	entries, _ := os.ReadDir(netnsDir)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), prefix+"-") {
			t.Errorf("namespace %s left behind", e.Name())
		}
	}
}

// Regression: a ruleset with no DNAT rule must keep conntrack running in the
// node, or established flows lose their translation and the node itself
// resets them.
func TestEstablishedFlowSurvivesLosingEveryBackend(t *testing.T) {
	for _, svcs := range [][]Service{nil, services(snapshot.ProtoTCP)} {
		f := build(t)
		if err := f.node.SetServices(services(snapshot.ProtoTCP, "10.244.1.100:8080")); err != nil {
			t.Fatal(err)
		}
		old, err := f.client.Dial(context.Background(), "tcp", "", "192.168.50.1:30080")
		if err != nil {
			t.Fatal(err)
		}
		if got, err := ask(old); got != "pod1" {
			t.Fatalf("before: %q, %v", got, err)
		}
		if err := f.node.SetServices(svcs); err != nil {
			t.Fatal(err)
		}
		if got, err := ask(old); got != "pod1" {
			t.Errorf("with %d services left: established connection got %q, %v; want pod1", len(svcs), got, err)
		}
	}
}

// Two nodes joined by an uplink: a host on one reaches a host on the other
// through the routes of each side, and the link outlives the hosts.
func TestConnectNodesRoutesBetweenPods(t *testing.T) {
	b := newBed(t)
	n1, err := b.AddNode("n1", NodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n2, err := b.AddNode("n2", NodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	link, err := b.ConnectNodes(
		n1, Uplink{Addr: netip.MustParsePrefix("172.30.0.1/30"), Routes: []netip.Prefix{netip.MustParsePrefix("10.244.2.0/24")}},
		n2, Uplink{Addr: netip.MustParsePrefix("172.30.0.2/30"), Routes: []netip.Prefix{netip.MustParsePrefix("10.244.1.0/24")}},
	)
	if err != nil {
		t.Fatal(err)
	}
	client, err := b.AddHost("c", n1, pfx("10.244.1.10"))
	if err != nil {
		t.Fatal(err)
	}
	server, err := b.AddHost("s", n2, pfx("10.244.2.10"))
	if err != nil {
		t.Fatal(err)
	}
	echo(t, server, "10.244.2.10:8080", "across")
	c, err := client.Dial(context.Background(), "tcp", "", "10.244.2.10:8080")
	if err != nil {
		t.Fatalf("dial across the uplink: %v", err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Write([]byte("hi\n")); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "across" {
		t.Fatalf("answer %q, %v; want across", line, err)
	}

	// Cut at n2's end, the link drops what n1 sends across without a
	// word: a dial is neither refused nor told the host is unreachable,
	// it goes unanswered.
	if err := link.Cut(n2); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if c, err := client.Dial(ctx, "tcp", "", "10.244.2.10:8080"); err == nil {
		c.Close()
		t.Error("dialed across a cut link")
	} else if !unanswered(err) {
		t.Errorf("dial across a cut link: %v, want it unanswered", err)
	}
	n3, err := b.AddNode("n3", NodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := link.Cut(n3); err == nil {
		t.Error("cut a link at a node that is not one of its ends")
	}
	if link.End(n2) == "" || link.End(n3) != "" {
		t.Errorf("ends: n2 %q, n3 %q", link.End(n2), link.End(n3))
	}
}

// unanswered reports whether a dial failed because its deadline passed
// with no answer. The dialer ends on whichever comes first, the context
// or the socket's deadline set from it, so the error is either
// context.DeadlineExceeded or an i/o timeout; a refusal or an
// unreachable host is neither.
func unanswered(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout() &&
		!errors.Is(err, syscall.ECONNREFUSED) && !errors.Is(err, syscall.EHOSTUNREACH) && !errors.Is(err, syscall.ENETUNREACH)
}

// The dial's own socket deadline can fire before the context's timer:
// the error is then an i/o timeout that is not context.DeadlineExceeded,
// and it is as unanswered as the other.
func TestUnansweredCountsEitherDeadline(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{&net.OpError{Op: "dial", Net: "tcp", Err: context.DeadlineExceeded}, true},
		{&net.OpError{Op: "dial", Net: "tcp", Err: os.ErrDeadlineExceeded}, true},
		{&net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}, false},
		{&net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.EHOSTUNREACH)}, false},
	} {
		if got := unanswered(tc.err); got != tc.want {
			t.Errorf("unanswered(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
