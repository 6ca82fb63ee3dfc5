package cni

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/ghostwatch/ghostwatch/internal/poll"
	"github.com/ghostwatch/ghostwatch/internal/testenv"
	"golang.org/x/sys/unix"
)

// hostLocal returns the real host-local plugin, or stops the test when it
// is not built.
func hostLocal(t *testing.T) string {
	t.Helper()
	bin, err := FindHostLocal()
	if errors.Is(err, ErrNoBinary) {
		testenv.Unavailable(t, err.Error())
	}
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// testNet is a host-local network in a directory the test owns.
type testNet struct {
	t      *testing.T
	h      HostLocal
	plugin Plugin
	netns  string // a path that does not exist: host-local never opens it
}

func newNet(t *testing.T, ranges ...[]Range) *testNet {
	t.Helper()
	h := HostLocal{Name: "gwnet", DataDir: t.TempDir(), Ranges: ranges}
	conf, err := h.Config()
	if err != nil {
		t.Fatal(err)
	}
	return &testNet{t: t, h: h, plugin: Plugin{Bin: hostLocal(t), Config: conf}, netns: filepath.Join(t.TempDir(), "netns")}
}

// subnet is a range set of one range over prefix with host-local's defaults.
func subnet(prefix string) []Range {
	return []Range{{Subnet: netip.MustParsePrefix(prefix)}}
}

func (n *testNet) container(id string) Container {
	return Container{ID: id, Netns: n.netns, IfName: "eth0", Args: PodArgs("default", id)}
}

func (n *testNet) ctx() context.Context {
	ctx, cancel := context.WithTimeout(n.t.Context(), time.Minute)
	n.t.Cleanup(cancel)
	return ctx
}

// add runs ADD for c and returns its addresses, joined by ",".
func (n *testNet) add(c Container) (string, error) {
	r, err := n.plugin.Add(n.ctx(), c)
	if err != nil {
		return "", err
	}
	var addrs []string
	for _, ip := range r.IPs {
		addrs = append(addrs, ip.Address.String())
	}
	return strings.Join(addrs, ","), nil
}

func (n *testNet) mustAdd(id, want string) {
	n.t.Helper()
	got, err := n.add(n.container(id))
	if err != nil {
		n.t.Fatalf("ADD %s: %v", id, err)
	}
	if got != want {
		n.t.Fatalf("ADD %s: %s, want %s", id, got, want)
	}
}

func (n *testNet) mustDel(id string) {
	n.t.Helper()
	if err := n.plugin.Del(n.ctx(), n.container(id)); err != nil {
		n.t.Fatalf("DEL %s: %v", id, err)
	}
}

// files returns the store's files and their contents.
func (n *testNet) files() map[string]string {
	n.t.Helper()
	dir := n.h.Store().Dir
	entries, err := os.ReadDir(dir)
	if err != nil {
		n.t.Fatal(err)
	}
	files := map[string]string{}
	for _, e := range entries {
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err != nil {
			n.t.Fatal(err)
		}
		files[e.Name()] = string(b)
	}
	return files
}

func (n *testNet) wantFiles(want map[string]string) {
	n.t.Helper()
	got := n.files()
	names := func(m map[string]string) []string {
		var s []string
		for k := range m {
			s = append(s, k)
		}
		slices.Sort(s)
		return s
	}
	if !slices.Equal(names(got), names(want)) {
		n.t.Fatalf("store holds %q, want %q", names(got), names(want))
	}
	for name, content := range want {
		if got[name] != content {
			n.t.Errorf("%s holds %q, want %q", name, got[name], content)
		}
	}
}

// wantCNIError fails unless err is the plugin's CNI error with this code
// and message.
func wantCNIError(t *testing.T, err error, code uint, msg string) *Error {
	t.Helper()
	var e *Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v, want CNI error %d %q", err, code, msg)
	}
	if e.Code != code || e.Msg != msg {
		t.Fatalf("CNI error %d %q, want %d %q", e.Code, e.Msg, code, msg)
	}
	return e
}

// TestHostLocalStore pins the store host-local keeps: a file per address
// holding containerID "\r\n" ifname, the last address reserved, the lock;
// and what ADD, CHECK and DEL do with it.
func TestHostLocalStore(t *testing.T) {
	n := newNet(t, subnet("10.244.2.0/24"))
	r, err := n.plugin.Add(n.ctx(), n.container("c1"))
	if err != nil {
		t.Fatal(err)
	}
	want := IP{netip.MustParsePrefix("10.244.2.2/24"), netip.MustParseAddr("10.244.2.1")}
	if r.CNIVersion != CNIVersion || len(r.IPs) != 1 || r.IPs[0] != want {
		t.Fatalf("ADD c1: %+v, want %s version %s", r, want.Address, CNIVersion)
	}
	n.mustAdd("c2", "10.244.2.3/24")
	n.mustAdd("c3", "10.244.2.4/24")
	n.wantFiles(map[string]string{
		"10.244.2.2":         "c1\r\neth0",
		"10.244.2.3":         "c2\r\neth0",
		"10.244.2.4":         "c3\r\neth0",
		"last_reserved_ip.0": "10.244.2.4",
		"lock":               "",
	})
	umask := readUmask(t)
	for name, perm := range map[string]fs.FileMode{
		"10.244.2.2":         0o600,
		"last_reserved_ip.0": 0o600,
		"lock":               0o750 &^ umask,
	} {
		fi, err := os.Stat(filepath.Join(n.h.Store().Dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if !fi.Mode().IsRegular() || fi.Mode().Perm() != perm {
			t.Errorf("%s: mode %v, want a regular file with %v", name, fi.Mode(), perm)
		}
	}

	if err := n.plugin.Check(n.ctx(), n.container("c2")); err != nil {
		t.Errorf("CHECK c2: %v", err)
	}
	err = n.plugin.Check(n.ctx(), n.container("c9"))
	wantCNIError(t, err, 999, "host-local: Failed to find address added by container c9")

	// ADD is not idempotent: a second ADD of the same container and
	// interface fails and changes nothing.
	_, err = n.add(n.container("c2"))
	wantCNIError(t, err, 999, "failed to allocate for range 0: 10.244.2.3 has been allocated to c2, duplicate allocation is not allowed")
	// Another interface of the same container is another reservation.
	eth1 := n.container("c2")
	eth1.IfName = "eth1"
	if got, err := n.add(eth1); err != nil || got != "10.244.2.5/24" {
		t.Fatalf("ADD c2 eth1: %s, %v, want 10.244.2.5/24", got, err)
	}

	// DEL frees the interface's file only, and leaves last_reserved_ip.0;
	// DEL again, or of a container never added, succeeds.
	n.mustDel("c2")
	n.wantFiles(map[string]string{
		"10.244.2.2":         "c1\r\neth0",
		"10.244.2.4":         "c3\r\neth0",
		"10.244.2.5":         "c2\r\neth1",
		"last_reserved_ip.0": "10.244.2.5",
		"lock":               "",
	})
	n.mustDel("c2")
	n.mustDel("never-added")
	// The freed .3 is not reused: the walk starts after the last reserved.
	n.mustAdd("c4", "10.244.2.6/24")

	// A file holding the container ID alone, as older plugins wrote it,
	// counts as the container's for ADD, CHECK and DEL.
	legacy := filepath.Join(n.h.Store().Dir, "10.244.2.9")
	if err := os.WriteFile(legacy, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = n.add(n.container("old"))
	wantCNIError(t, err, 999, "failed to allocate for range 0: 10.244.2.9 has been allocated to old, duplicate allocation is not allowed")
	if err := n.plugin.Check(n.ctx(), n.container("old")); err != nil {
		t.Errorf("CHECK old: %v", err)
	}
	n.mustDel("old")
	if _, err := os.Stat(legacy); !errors.Is(err, fs.ErrNotExist) {
		t.Errorf("DEL old left its file: %v", err)
	}
}

// readUmask returns this process's umask, from /proc/self/status.
func readUmask(t *testing.T) fs.FileMode {
	t.Helper()
	f, err := os.Open("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "Umask:"); ok {
			m, err := strconv.ParseUint(strings.TrimSpace(v), 8, 32)
			if err != nil {
				t.Fatal(err)
			}
			return fs.FileMode(m)
		}
	}
	t.Fatal("/proc/self/status has no Umask")
	return 0
}

// TestHostLocalWipedStore rebuilds seed 003: the store is wiped while the
// pods keep their addresses. The next ADD hands out the first pod's
// address again, unless a reservation for each running pod is written
// back first.
func TestHostLocalWipedStore(t *testing.T) {
	hostLocal(t)
	pods := []struct{ id, ip string }{{"c1", "10.244.2.2"}, {"c2", "10.244.2.3"}, {"c3", "10.244.2.4"}}
	start := func(t *testing.T) *testNet {
		n := newNet(t, subnet("10.244.2.0/24"))
		for _, p := range pods {
			n.mustAdd(p.id, p.ip+"/24")
		}
		if err := os.RemoveAll(n.h.Store().Dir); err != nil {
			t.Fatal(err)
		}
		return n
	}

	t.Run("duplicate", func(t *testing.T) {
		n := start(t)
		n.mustAdd("c4", "10.244.2.2/24") // c1's address
		n.wantFiles(map[string]string{
			"10.244.2.2":         "c4\r\neth0",
			"last_reserved_ip.0": "10.244.2.2",
			"lock":               "",
		})
	})

	t.Run("written back", func(t *testing.T) {
		n := start(t)
		l, err := n.h.Store().Lock()
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pods {
			if err := l.Reserve(netip.MustParseAddr(p.ip), p.id, "eth0"); err != nil {
				t.Fatal(err)
			}
		}
		// A second writer finds the file there and leaves it alone.
		if err := l.Reserve(netip.MustParseAddr("10.244.2.2"), "other", "eth0"); !errors.Is(err, fs.ErrExist) {
			t.Errorf("reserving a booked address: %v, want fs.ErrExist", err)
		}
		if err := l.Unlock(); err != nil {
			t.Fatal(err)
		}
		if err := l.Reserve(netip.MustParseAddr("10.244.2.9"), "late", "eth0"); err == nil {
			t.Error("Reserve after Unlock succeeded")
		}
		n.mustAdd("c4", "10.244.2.5/24")
		n.wantFiles(map[string]string{
			"10.244.2.2":         "c1\r\neth0",
			"10.244.2.3":         "c2\r\neth0",
			"10.244.2.4":         "c3\r\neth0",
			"10.244.2.5":         "c4\r\neth0",
			"last_reserved_ip.0": "10.244.2.5",
			"lock":               "",
		})
		// The written-back reservations are the pods' own: DEL frees them.
		n.mustDel("c2")
		if _, ok := n.files()["10.244.2.3"]; ok {
			t.Error("DEL c2 left 10.244.2.3")
		}
	})
}

// TestHostLocalAllocationOrder runs each case of the package's allocation
// order against the real plugin: a sequence of steps on a fresh store.
func TestHostLocalAllocationOrder(t *testing.T) {
	hostLocal(t)
	type step struct {
		op   string // add, del, wipe (all files), wipe-reservations (keeps last_reserved_ip.*), reserve, last (writes last_reserved_ip.0), has (the file of ip holds id's reservation)
		id   string // the container (add, del, reserve)
		ip   string // add: the addresses wanted, joined by ","; reserve, last: the address
		req  string // add: the address asked for in CNI_ARGS IP=
		err  string // add: the CNI error's message wanted instead
		code uint   // add: its code, when err is set
	}
	add := func(id, ip string) step { return step{op: "add", id: id, ip: ip} }
	full := func(r string) step {
		return step{op: "add", id: "full", code: 999, err: "failed to allocate for range 0: no IP addresses available in range set: " + r}
	}
	a := netip.MustParseAddr
	for _, tc := range []struct {
		name   string
		ranges [][]Range
		steps  []step
	}{{
		name:   "defaults: the network address and the gateway .1 are skipped, then upward",
		ranges: [][]Range{subnet("10.244.2.0/24")},
		steps:  []step{add("a", "10.244.2.2/24"), add("b", "10.244.2.3/24"), add("c", "10.244.2.4/24")},
	}, {
		name:   "a freed address waits until the walk wraps",
		ranges: [][]Range{subnet("10.244.2.0/24")},
		steps:  []step{add("a", "10.244.2.2/24"), add("b", "10.244.2.3/24"), {op: "del", id: "a"}, add("c", "10.244.2.4/24")},
	}, {
		name:   "after rangeEnd the walk wraps to rangeStart",
		ranges: [][]Range{{{Subnet: netip.MustParsePrefix("10.244.2.0/24"), RangeStart: a("10.244.2.10"), RangeEnd: a("10.244.2.12")}}},
		steps: []step{add("a", "10.244.2.10/24"), add("b", "10.244.2.11/24"), add("c", "10.244.2.12/24"),
			full("10.244.2.10-10.244.2.12"), {op: "del", id: "b"}, add("d", "10.244.2.11/24")},
	}, {
		name:   "a gateway inside the range is skipped",
		ranges: [][]Range{{{Subnet: netip.MustParsePrefix("10.244.2.0/24"), RangeStart: a("10.244.2.10"), RangeEnd: a("10.244.2.12"), Gateway: a("10.244.2.11")}}},
		steps:  []step{add("a", "10.244.2.10/24"), add("b", "10.244.2.12/24"), full("10.244.2.10-10.244.2.12")},
	}, {
		name:   "another gateway makes .1 an address: IPv4 /29 gives .1 to .6 but the gateway and never .7, the broadcast",
		ranges: [][]Range{{{Subnet: netip.MustParsePrefix("10.244.2.0/29"), Gateway: a("10.244.2.5")}}},
		steps: []step{add("a", "10.244.2.1/29"), add("b", "10.244.2.2/29"), add("c", "10.244.2.3/29"),
			add("d", "10.244.2.4/29"), add("e", "10.244.2.6/29"), full("10.244.2.1-10.244.2.6")},
	}, {
		name:   "IPv4 /30: one address",
		ranges: [][]Range{subnet("10.244.2.0/30")},
		steps:  []step{add("a", "10.244.2.2/30"), full("10.244.2.1-10.244.2.2")},
	}, {
		name:   "rangeStart and rangeEnd set to the network and broadcast addresses hand them out",
		ranges: [][]Range{{{Subnet: netip.MustParsePrefix("10.244.2.0/30"), RangeStart: a("10.244.2.0"), RangeEnd: a("10.244.2.3")}}},
		steps:  []step{add("a", "10.244.2.0/30"), add("b", "10.244.2.2/30"), add("c", "10.244.2.3/30"), full("10.244.2.0-10.244.2.3")},
	}, {
		name:   "IPv6 /126: the network address and the gateway ::1 are skipped, the last address is not",
		ranges: [][]Range{subnet("fd00::/126")},
		steps:  []step{add("a", "fd00::2/126"), add("b", "fd00::3/126"), full("fd00::1-fd00::3")},
	}, {
		name:   "two ranges in a set: the walk goes on into the next range and wraps to the first",
		ranges: [][]Range{{{Subnet: netip.MustParsePrefix("10.244.2.0/30")}, {Subnet: netip.MustParsePrefix("10.244.3.0/30")}}},
		steps: []step{add("a", "10.244.2.2/30"), add("b", "10.244.3.2/30"), full("10.244.2.1-10.244.2.2,10.244.3.1-10.244.3.2"),
			{op: "del", id: "a"}, add("c", "10.244.2.2/30")},
	}, {
		name:   "two range sets: one address from each, each set with its own last_reserved_ip",
		ranges: [][]Range{subnet("10.244.2.0/24"), subnet("fd00::/120")},
		steps: []step{add("a", "10.244.2.2/24,fd00::2/120"), {op: "has", id: "a", ip: "fd00::2"},
			{op: "last", ip: "10.244.2.9"}, add("b", "10.244.2.10/24,fd00::3/120")},
	}, {
		name:   "a wipe of everything starts over at rangeStart",
		ranges: [][]Range{subnet("10.244.2.0/24")},
		steps:  []step{add("a", "10.244.2.2/24"), add("b", "10.244.2.3/24"), add("c", "10.244.2.4/24"), {op: "wipe"}, add("d", "10.244.2.2/24")},
	}, {
		name:   "a wipe that keeps last_reserved_ip.0 goes on after it",
		ranges: [][]Range{subnet("10.244.2.0/24")},
		steps: []step{add("a", "10.244.2.2/24"), add("b", "10.244.2.3/24"), add("c", "10.244.2.4/24"),
			{op: "wipe-reservations"}, add("d", "10.244.2.5/24")},
	}, {
		name:   "a last_reserved_ip outside the range set starts at rangeStart",
		ranges: [][]Range{subnet("10.244.2.0/24")},
		steps:  []step{{op: "last", ip: "10.244.3.7"}, add("a", "10.244.2.2/24")},
	}, {
		name:   "a last_reserved_ip at rangeEnd wraps",
		ranges: [][]Range{subnet("10.244.2.0/24")},
		steps:  []step{{op: "last", ip: "10.244.2.254"}, add("a", "10.244.2.2/24")},
	}, {
		name:   "a reservation file is skipped whatever it holds",
		ranges: [][]Range{subnet("10.244.2.0/24")},
		steps:  []step{{op: "reserve", id: "someone", ip: "10.244.2.2"}, {op: "reserve", id: "else", ip: "10.244.2.3"}, add("a", "10.244.2.4/24")},
	}, {
		name:   "an address asked for in CNI_ARGS is taken as is, and the walk goes on after it",
		ranges: [][]Range{subnet("10.244.2.0/24")},
		steps: []step{{op: "add", id: "a", req: "10.244.2.9", ip: "10.244.2.9/24"}, add("b", "10.244.2.10/24"),
			{op: "add", id: "c", req: "10.244.2.9", code: 999, err: "failed to allocate for range 0: requested IP address 10.244.2.9 is not available in range set 10.244.2.1-10.244.2.254"},
			{op: "add", id: "c", req: "10.244.2.1", code: 999, err: "failed to allocate for range 0: requested ip 10.244.2.1 is subnet's gateway"}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			n := newNet(t, tc.ranges...)
			dir := n.h.Store().Dir
			for i, s := range tc.steps {
				where := fmt.Sprintf("step %d (%s %s)", i, s.op, s.id)
				switch s.op {
				case "add":
					c := n.container(s.id)
					if s.req != "" {
						c.Args = append(c.Args, Arg{"IP", s.req})
					}
					got, err := n.add(c)
					if s.err != "" {
						wantCNIError(t, err, s.code, s.err)
						continue
					}
					if err != nil || got != s.ip {
						t.Fatalf("%s: %q, %v, want %s", where, got, err, s.ip)
					}
				case "del":
					n.mustDel(s.id)
				case "wipe":
					if err := os.RemoveAll(dir); err != nil {
						t.Fatal(err)
					}
				case "wipe-reservations":
					for name := range n.files() {
						if _, err := netip.ParseAddr(name); err == nil {
							if err := os.Remove(filepath.Join(dir, name)); err != nil {
								t.Fatal(err)
							}
						}
					}
				case "reserve":
					l, err := n.h.Store().Lock()
					if err != nil {
						t.Fatal(err)
					}
					err = l.Reserve(netip.MustParseAddr(s.ip), s.id, "eth0")
					if uerr := l.Unlock(); err == nil {
						err = uerr
					}
					if err != nil {
						t.Fatalf("%s: %v", where, err)
					}
				case "last":
					if err := os.MkdirAll(dir, 0o755); err != nil {
						t.Fatal(err)
					}
					if err := os.WriteFile(filepath.Join(dir, LastReservedPrefix+"0"), []byte(s.ip), 0o600); err != nil {
						t.Fatal(err)
					}
				case "has":
					if got := n.files()[s.ip]; got != s.id+"\r\neth0" {
						t.Fatalf("%s: %s holds %q", where, s.ip, got)
					}
				default:
					t.Fatalf("%s: unknown op", where)
				}
			}
		})
	}
}

// TestHostLocalLock shows that a reservation written under host-local's own
// lock cannot race an ADD: the ADD waits for the lock, then sees the
// reservation and skips it. DEL and CHECK wait for it too.
func TestHostLocalLock(t *testing.T) {
	n := newNet(t, subnet("10.244.2.0/24"))
	n.mustAdd("c1", "10.244.2.2/24")
	var ip string
	err := whileLocked(t, n.h.Store(), func() error {
		var err error
		ip, err = n.add(n.container("c2"))
		return err
	}, func(l *Locked) {
		// .3 would be the ADD's: book it for a pod first.
		if err := l.Reserve(netip.MustParseAddr("10.244.2.3"), "restored", "eth0"); err != nil {
			t.Error(err)
		}
	})
	if err != nil || ip != "10.244.2.4/24" {
		t.Fatalf("ADD after the lock: %q, %v, want 10.244.2.4/24", ip, err)
	}
	n.wantFiles(map[string]string{
		"10.244.2.2":         "c1\r\neth0",
		"10.244.2.3":         "restored\r\neth0",
		"10.244.2.4":         "c2\r\neth0",
		"last_reserved_ip.0": "10.244.2.4",
		"lock":               "",
	})

	err = whileLocked(t, n.h.Store(), func() error {
		return n.plugin.Check(n.ctx(), n.container("restored"))
	}, func(*Locked) {})
	if err != nil {
		t.Errorf("CHECK restored after the lock: %v", err)
	}
	err = whileLocked(t, n.h.Store(), func() error {
		return n.plugin.Del(n.ctx(), n.container("c1"))
	}, func(l *Locked) {
		if _, ok := n.files()["10.244.2.2"]; !ok {
			t.Error("DEL freed 10.244.2.2 while the lock was held")
		}
	})
	if err != nil {
		t.Fatalf("DEL c1 after the lock: %v", err)
	}
	if _, ok := n.files()["10.244.2.2"]; ok {
		t.Error("DEL c1 left 10.244.2.2")
	}
}

// whileLocked takes store's lock, starts call, and once /proc/locks lists
// a process blocked on the lock file runs held and releases the lock. It
// fails the test if call returns while the lock is held; until the waiter
// shows, call cannot have passed the lock either, since host-local takes
// it for every command. It returns call's error. The minutes are only
// bounds for a failure.
func whileLocked(t *testing.T, store Store, call func() error, held func(*Locked)) error {
	t.Helper()
	l, err := store.Lock()
	if err != nil {
		t.Fatal(err)
	}
	defer l.Unlock()
	done := make(chan error, 1)
	go func() { done <- call() }()
	lockFile := filepath.Join(store.Dir, LockFile)
	poll.Until(t, poll.Patience, "a process blocked on the lock", func() bool {
		select {
		case err := <-done:
			t.Fatalf("the call returned while the lock was held: %v", err)
		default:
		}
		return flockWaiter(t, lockFile)
	})
	held(l)
	select {
	case err := <-done:
		t.Fatalf("the call returned while the lock was held: %v", err)
	default:
	}
	if err := l.Unlock(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		return err
	case <-time.After(time.Minute):
		t.Fatal("the call did not return within a minute of the lock's release")
		return nil
	}
}

// flockWaiter reports whether /proc/locks lists a process blocked on a
// flock of file: a line "N: -> FLOCK ADVISORY WRITE pid maj:min:inode ...".
func flockWaiter(t *testing.T, file string) bool {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(file, &st); err != nil {
		t.Fatal(err)
	}
	id := fmt.Sprintf("%02x:%02x:%d", unix.Major(st.Dev), unix.Minor(st.Dev), st.Ino)
	b, err := os.ReadFile("/proc/locks")
	if err != nil {
		testenv.Unavailable(t, "reading /proc/locks: "+err.Error())
	}
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if len(f) >= 7 && f[1] == "->" && f[2] == "FLOCK" && f[6] == id {
			return true
		}
	}
	return false
}

// TestHostLocalRefusals pins what host-local refuses, and what it keeps
// when it fails after allocating.
func TestHostLocalRefusals(t *testing.T) {
	n := newNet(t, subnet("10.244.2.0/24"))

	// Without IgnoreUnknown=1, the pod's CNI_ARGS are refused.
	c := n.container("c1")
	c.Args = c.Args[1:]
	_, err := n.add(c)
	wantCNIError(t, err, 999, `ARGS: unknown args ["K8S_POD_NAMESPACE=default" "K8S_POD_NAME=c1"]`)

	// CNI_CONTAINERID, CNI_NETNS, CNI_IFNAME and CNI_PATH are required for ADD.
	_, err = n.plugin.Add(n.ctx(), Container{ID: "c1"})
	wantCNIError(t, err, 4, "required env variables [CNI_NETNS,CNI_IFNAME] missing")

	// host-local reads its settings under "ipam", nowhere else.
	flat := Plugin{Bin: n.plugin.Bin, Config: []byte(`{"cniVersion":"1.0.0","name":"gwnet","type":"host-local","ranges":[[{"subnet":"10.244.2.0/24"}]]}`)}
	_, err = flat.Add(n.ctx(), n.container("c1"))
	wantCNIError(t, err, 999, "IPAM config missing 'ipam' key")

	// A subnet needs two addresses besides the network address.
	small := HostLocal{Name: "gwsmall", DataDir: n.h.DataDir, Ranges: [][]Range{subnet("10.244.2.0/31")}}
	conf, err := small.Config()
	if err != nil {
		t.Fatal(err)
	}
	_, err = Plugin{Bin: n.plugin.Bin, Config: conf}.Add(n.ctx(), n.container("c1"))
	wantCNIError(t, err, 999, "invalid range set 0: Network 10.244.2.0/31 too small to allocate from")

	bad := Plugin{Bin: n.plugin.Bin, Config: []byte(`{"cniVersion":"1.0.0","name":"gw net","ipam":{}}`)}
	_, err = bad.Add(n.ctx(), n.container("c1"))
	e := wantCNIError(t, err, 7, "invalid characters found in network name")
	if e.Details != "gw net" || e.Error() != "host-local ADD of container c1: CNI error 7: invalid characters found in network name (gw net)" {
		t.Errorf("details %q, message %q", e.Details, e)
	}
	if entries, err := os.ReadDir(n.h.DataDir); err != nil || len(entries) != 0 {
		t.Errorf("refused calls made a store: %v, %v", entries, err)
	}

	// Nor does it read ipam.type.
	untyped := Plugin{Bin: n.plugin.Bin, Config: []byte(`{"cniVersion":"1.0.0","name":"gwuntyped","ipam":{"dataDir":` + strconv.Quote(n.h.DataDir) + `,"ranges":[[{"subnet":"10.244.2.0/24"}]]}}`)}
	if r, err := untyped.Add(n.ctx(), n.container("c1")); err != nil || len(r.IPs) != 1 || r.IPs[0].Address.String() != "10.244.2.2/24" {
		t.Errorf("ADD without ipam.type: %+v, %v, want 10.244.2.2/24", r, err)
	}

	// CNI_NETNS naming the plugin's own namespace fails the ADD only after
	// it allocated, printed its result and kept the reservation.
	own := n.container("c1")
	own.Netns = "/proc/self/ns/net"
	_, err = n.add(own)
	e = wantCNIError(t, err, 8, "plugin's netns and netns from CNI_NETNS should not be the same")
	if e.Result == nil || len(e.Result.IPs) != 1 || e.Result.IPs[0].Address != netip.MustParsePrefix("10.244.2.2/24") {
		t.Errorf("result before the error: %+v, want 10.244.2.2/24", e.Result)
	}
	if got := n.files()["10.244.2.2"]; got != "c1\r\neth0" {
		t.Errorf("10.244.2.2 holds %q after the failed ADD, want c1's reservation", got)
	}
	// DEL with that namespace frees the address, then fails the same way.
	err = n.plugin.Del(n.ctx(), own)
	wantCNIError(t, err, 8, "plugin's netns and netns from CNI_NETNS should not be the same")
	if _, ok := n.files()["10.244.2.2"]; ok {
		t.Error("DEL left 10.244.2.2")
	}
}

func TestHostLocalConfig(t *testing.T) {
	h := HostLocal{Name: "gw", DataDir: "/tmp/gwcni", Ranges: [][]Range{
		{{Subnet: netip.MustParsePrefix("10.244.2.0/24")}},
		{{Subnet: netip.MustParsePrefix("fd00::/120"), RangeStart: netip.MustParseAddr("fd00::10"), RangeEnd: netip.MustParseAddr("fd00::20"), Gateway: netip.MustParseAddr("fd00::1")}},
	}}
	got, err := h.Config()
	if err != nil {
		t.Fatal(err)
	}
	want := `{"cniVersion":"1.0.0","name":"gw","ipam":{"type":"host-local","dataDir":"/tmp/gwcni","ranges":[[{"subnet":"10.244.2.0/24"}],[{"subnet":"fd00::/120","rangeStart":"fd00::10","rangeEnd":"fd00::20","gateway":"fd00::1"}]]}}`
	if string(got) != want {
		t.Errorf("config\n%s\nwant\n%s", got, want)
	}
	if s := h.Store(); s.Dir != "/tmp/gwcni/gw" {
		t.Errorf("store %q", s.Dir)
	}
	if s := (HostLocal{Name: "gw"}).Store(); s.Dir != "/var/lib/cni/networks/gw" {
		t.Errorf("default store %q", s.Dir)
	}
}
