//go:build linux

package conntrack

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/ghostwatch/ghostwatch/internal/poll"
	"github.com/ghostwatch/ghostwatch/internal/testenv"
	"github.com/ghostwatch/ghostwatch/lab/netbed"
	"github.com/ghostwatch/ghostwatch/snapshot"
)

// Kernel tests. Each runs on its own locked OS thread inside a network
// namespace it creates (so the host's table is never read or written), and
// deletes the namespace when it ends.

// inNewNetns locks the calling goroutine to its thread, moves the thread
// into a new named network namespace and returns the namespace's name (for
// `ip netns exec`). Every socket the test opens afterwards on this goroutine
// belongs to that namespace.
func inNewNetns(tb testing.TB) string {
	tb.Helper()
	testenv.RequireRoot(tb, "needs root (creates network namespaces and writes their conntrack tables)")
	var rnd [6]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		tb.Fatal(err)
	}
	name := fmt.Sprintf("gwt-ct-%x", rnd)
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		tb.Fatalf("current network namespace: %v", err)
	}
	ns, err := netns.NewNamed(name)
	if err != nil {
		orig.Close()
		runtime.UnlockOSThread()
		tb.Fatalf("new network namespace: %v", err)
	}
	tb.Cleanup(func() {
		restored := netns.Set(orig)
		orig.Close()
		ns.Close()
		if err := netbed.DeleteNamespace(name); err != nil {
			tb.Errorf("deleting network namespace %s: %v", name, err)
		}
		if restored == nil {
			runtime.UnlockOSThread()
		} // else the thread ends with the goroutine, still locked
	})
	return name
}

func open(tb testing.TB) *Conn {
	tb.Helper()
	c, err := Open()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { c.Close() })
	return c
}

func tuple(src, dst string, sport, dport uint16) snapshot.Tuple {
	return snapshot.Tuple{Src: netip.MustParseAddr(src), Dst: netip.MustParseAddr(dst), SrcPort: sport, DstPort: dport}
}

const assuredReplied = snapshot.StatusAssured | snapshot.StatusSeenReply

// labFlows covers IPv4 and IPv6, TCP, UDP and SCTP, DNATed and not, marks
// and zones.
func labFlows() []snapshot.Flow {
	return []snapshot.Flow{
		{Proto: snapshot.ProtoTCP, State: "ESTABLISHED", Status: assuredReplied, Timeout: 300, Mark: 0x42,
			Orig: tuple("10.244.1.50", "10.96.100.50", 45678, 5432), Reply: tuple("10.244.2.7", "10.244.1.50", 5432, 45678)},
		{Proto: snapshot.ProtoTCP, State: "SYN_SENT", Timeout: 120,
			Orig: tuple("10.244.1.51", "10.96.0.10", 40000, 53), Reply: tuple("10.244.3.3", "10.244.1.51", 8053, 40000)},
		{Proto: snapshot.ProtoUDP, Status: snapshot.StatusSeenReply, Timeout: 330,
			Orig: tuple("10.244.1.52", "10.96.0.10", 41000, 53), Reply: tuple("10.244.3.4", "10.244.1.52", 53, 41000)},
		{Proto: snapshot.ProtoUDP, Timeout: 360, Zone: 7,
			Orig: tuple("192.168.5.1", "192.168.5.2", 123, 123), Reply: tuple("192.168.5.2", "192.168.5.1", 123, 123)},
		{Proto: snapshot.ProtoTCP, State: "ESTABLISHED", Status: assuredReplied, Timeout: 400,
			Orig: tuple("fd00:10::5", "fd00:96::1", 50000, 443), Reply: tuple("fd00:244::8", "fd00:10::5", 8443, 50000)},
		{Proto: snapshot.ProtoUDP, Status: snapshot.StatusSeenReply, Timeout: 390,
			Orig: tuple("fd00:10::6", "fd00:96::a", 50001, 53), Reply: tuple("fd00:244::9", "fd00:10::6", 53, 50001)},
		{Proto: snapshot.ProtoSCTP, State: "ESTABLISHED", Status: assuredReplied, Timeout: 210,
			Orig: tuple("10.244.1.53", "10.96.7.7", 3868, 3868), Reply: tuple("10.244.4.4", "10.244.1.53", 3868, 3868)},
		{Proto: snapshot.ProtoSCTP, State: "COOKIE_WAIT", Timeout: 1200, // longer than any test runs, however loaded the machine
			Orig: tuple("fd00:10::7", "fd00:20::7", 2905, 2905), Reply: tuple("fd00:20::7", "fd00:10::7", 2905, 2905)},
		{Proto: snapshot.ProtoTCP, State: "TIME_WAIT", Status: assuredReplied, Timeout: 100, Mark: 7, Zone: 3,
			Orig: tuple("10.0.0.1", "10.0.0.2", 1, 65535), Reply: tuple("10.0.0.2", "10.0.0.1", 65535, 1)},
	}
}

func create(tb testing.TB, c *Conn, flows []snapshot.Flow) {
	tb.Helper()
	for i := range flows {
		if err := c.Create(&flows[i]); err != nil {
			tb.Fatal(err)
		}
	}
}

// key identifies an entry: its original tuple, protocol and zone.
type key struct {
	proto snapshot.Proto
	orig  snapshot.Tuple
	zone  uint16
}

func keyOf(f *snapshot.Flow) key { return key{f.Proto, f.Orig, f.Zone} }

func dumpAll(tb testing.TB, c *Conn) map[key]snapshot.Flow {
	tb.Helper()
	got := map[key]snapshot.Flow{}
	n, err := c.Dump(context.Background(), func(f *snapshot.Flow) error {
		if _, dup := got[keyOf(f)]; dup {
			return fmt.Errorf("entry %v seen twice", f)
		}
		got[keyOf(f)] = *f
		return nil
	})
	if err != nil {
		tb.Fatal(err)
	}
	if n != len(got) {
		tb.Fatalf("Dump counted %d entries, passed %d", n, len(got))
	}
	return got
}

// countedDown is how many seconds an entry's timeout may have counted
// down since at: the whole seconds since, and the one under way.
func countedDown(at time.Time) uint32 { return uint32(time.Since(at)/time.Second) + 1 }

// checkCreated compares a dumped entry with the one created at or after
// created: its timeout may have counted down by the seconds since then.
func checkCreated(t *testing.T, got, want *snapshot.Flow, created time.Time) {
	t.Helper()
	elapsed := countedDown(created)
	wantStatus, _ := createStatus(want.Status, true)
	wantStatus |= snapshot.StatusConfirmed
	wantState := want.State
	if want.Proto == snapshot.ProtoTCP && wantState == "" {
		wantState = "NONE"
	}
	switch {
	case got.Proto != want.Proto, got.Orig != want.Orig, got.Reply != want.Reply:
		t.Errorf("entry %v: tuples %+v %+v, want %+v %+v", want, got.Orig, got.Reply, want.Orig, want.Reply)
	case got.State != wantState:
		t.Errorf("entry %v: state %q, want %q", want, got.State, wantState)
	case got.Status != wantStatus:
		t.Errorf("entry %v: status %#x, want %#x", want, got.Status, wantStatus)
	case got.Timeout > want.Timeout || got.Timeout+elapsed < want.Timeout:
		t.Errorf("entry %v: timeout %d, created with %d", want, got.Timeout, want.Timeout)
	case got.Mark != want.Mark || got.Zone != want.Zone:
		t.Errorf("entry %v: mark %#x zone %d, want %#x %d", want, got.Mark, got.Zone, want.Mark, want.Zone)
	case got.ID == 0:
		t.Errorf("entry %v: no ID", want)
	case !got.Start.IsZero():
		t.Errorf("entry %v: start %v without nf_conntrack_timestamp", want, got.Start)
	case got.DNAT() != want.DNAT():
		t.Errorf("entry %v: DNAT %v", want, got.DNAT())
	}
}

func TestCreateDumpRoundTrip(t *testing.T) {
	t.Parallel()
	ns := inNewNetns(t)
	c := open(t)
	flows := labFlows()
	created := time.Now()
	create(t, c, flows)
	dumped := time.Now()
	got := dumpAll(t, c)
	if len(got) != len(flows) {
		t.Fatalf("dumped %d entries, created %d", len(got), len(flows))
	}
	dnat := 0
	for i := range flows {
		g, ok := got[keyOf(&flows[i])]
		if !ok {
			t.Errorf("entry %v missing from the dump", &flows[i])
			continue
		}
		checkCreated(t, &g, &flows[i], created)
		if g.DNAT() {
			dnat++
		}
	}
	if dnat != 6 {
		t.Errorf("%d DNAT entries, want 6", dnat)
	}
	compareWithConntrackL(t, ns, got, dumped)

	// A second entry with the same tuple in the same zone is refused.
	err := c.Create(&flows[0])
	if !errors.Is(err, syscall.EEXIST) {
		t.Errorf("creating a duplicate: %v, want EEXIST", err)
	}
}

// compareWithConntrackL checks that `conntrack -L` in the namespace lists
// exactly the entries Dump returned, field by field; its timeouts may have
// counted down by the seconds since the dump began at dumpedAt.
func compareWithConntrackL(t *testing.T, ns string, dumped map[key]snapshot.Flow, dumpedAt time.Time) {
	t.Helper()
	if _, err := exec.LookPath("conntrack"); err != nil {
		t.Log("conntrack(8) not installed: not comparing with conntrack -L")
		return
	}
	out, err := exec.Command("ip", "netns", "exec", ns, "conntrack", "-L", "-o", "extended,id").Output()
	if err != nil {
		t.Fatalf("conntrack -L: %v", err)
	}
	elapsed := int(countedDown(dumpedAt))
	var theirs []string
	timeouts := map[string]int{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if line == "" {
			continue
		}
		canon, timeout := canonConntrackL(t, line)
		theirs = append(theirs, canon)
		timeouts[canon] = timeout
	}
	var ours []string
	for _, f := range dumped {
		canon := canonFlow(&f)
		ours = append(ours, canon)
		if tt, ok := timeouts[canon]; ok && (tt > int(f.Timeout) || tt+elapsed < int(f.Timeout)) {
			t.Errorf("%s: conntrack -L timeout %d, Dump %d", canon, tt, f.Timeout)
		}
	}
	sort.Strings(ours)
	sort.Strings(theirs)
	if strings.Join(ours, "\n") != strings.Join(theirs, "\n") {
		t.Errorf("Dump and conntrack -L differ:\nDump:\n%s\nconntrack -L:\n%s\n(raw:\n%s)",
			strings.Join(ours, "\n"), strings.Join(theirs, "\n"), out)
	}
}

// canonFlow renders a flow the way canonConntrackL renders a line of
// `conntrack -L -o extended,id`.
func canonFlow(f *snapshot.Flow) string {
	fam := "ipv4"
	if f.Orig.Src.Is6() {
		fam = "ipv6"
	}
	s := fmt.Sprintf("%s %s %s src=%s dst=%s sport=%d dport=%d src=%s dst=%s sport=%d dport=%d",
		fam, f.Proto, f.State, f.Orig.Src, f.Orig.Dst, f.Orig.SrcPort, f.Orig.DstPort,
		f.Reply.Src, f.Reply.Dst, f.Reply.SrcPort, f.Reply.DstPort)
	if f.Status&snapshot.StatusAssured != 0 {
		s += " [ASSURED]"
	}
	if f.Status&snapshot.StatusSeenReply == 0 {
		s += " [UNREPLIED]"
	}
	s += fmt.Sprintf(" mark=%d", f.Mark)
	if f.Zone != 0 {
		s += fmt.Sprintf(" zone=%d", f.Zone)
	}
	return s + fmt.Sprintf(" id=%d", f.ID)
}

// canonConntrackL parses one line such as
//
//	ipv4     2 tcp      6 299 ESTABLISHED src=… dst=… sport=… dport=… src=… dst=… sport=… dport=… [ASSURED] mark=66 use=1 id=…
func canonConntrackL(t *testing.T, line string) (string, int) {
	t.Helper()
	fs := strings.Fields(line)
	if len(fs) < 6 {
		t.Fatalf("conntrack -L line %q", line)
	}
	timeout, err := strconv.Atoi(fs[4])
	if err != nil {
		t.Fatalf("conntrack -L line %q: timeout: %v", line, err)
	}
	state := ""
	rest := fs[5:]
	if !strings.Contains(rest[0], "=") && !strings.HasPrefix(rest[0], "[") {
		state, rest = rest[0], rest[1:]
	}
	parts := []string{fs[0], fs[2], state}
	var flags []string
	var tail []string
	for _, tok := range rest {
		k, _, _ := strings.Cut(tok, "=")
		switch {
		case tok == "[ASSURED]" || tok == "[UNREPLIED]":
			flags = append(flags, tok)
		case k == "src" || k == "dst" || k == "sport" || k == "dport":
			parts = append(parts, tok)
		case k == "mark" || k == "zone" || k == "id":
			tail = append(tail, tok)
		}
	}
	sort.Strings(flags) // ASSURED before UNREPLIED, as canonFlow
	return strings.Join(append(append(parts, flags...), tail...), " "), timeout
}

// TestCreateStatus pins down how creation takes the status: ASSURED and
// SEEN_REPLY are set as asked, a status of 0 leaves the entry UNREPLIED, and
// the bits the kernel manages are not passed on (they would be refused).
func TestCreateStatus(t *testing.T) {
	t.Parallel()
	ns := inNewNetns(t)
	c := open(t)
	base := snapshot.Flow{Proto: snapshot.ProtoTCP, State: "ESTABLISHED", Timeout: 100,
		Orig: tuple("10.1.0.1", "10.96.0.1", 0, 80), Reply: tuple("10.2.0.9", "10.1.0.1", 8080, 0)}
	statuses := []uint32{
		0,
		snapshot.StatusSeenReply,
		snapshot.StatusAssured,
		assuredReplied,
		assuredReplied | snapshot.StatusConfirmed,
		assuredReplied | snapshot.StatusExpected | statusDying,
	}
	var flows []snapshot.Flow
	created := time.Now()
	for i, st := range statuses {
		f := base
		f.Status = st
		f.Orig.SrcPort, f.Reply.DstPort = uint16(1000+i), uint16(1000+i)
		if err := c.Create(&f); err != nil {
			t.Errorf("status %#x: %v", st, err)
			continue
		}
		flows = append(flows, f)
	}
	dumped := time.Now()
	got := dumpAll(t, c)
	for i := range flows {
		g := got[keyOf(&flows[i])]
		checkCreated(t, &g, &flows[i], created)
	}
	compareWithConntrackL(t, ns, got, dumped)

	// What the kernel says to a CTA_STATUS without IPS_CONFIRMED (the
	// encoding a library that sends the caller's bits as they are uses).
	f := base
	f.Orig.SrcPort, f.Reply.DstPort = 2000, 2000
	seq := c.nextSeq()
	b := appendMsgHeader(nil, ctMsgTypeNew, nlmFRequest|nlmFAck|nlmFCreate|nlmFExcl, seq)
	b = appendNfgen(b, afInet)
	b = appendTuple(b, ctaTupleOrig, &f.Orig, f.Proto)
	b = appendTuple(b, ctaTupleReply, &f.Reply, f.Proto)
	b = appendBE32(b, ctaStatus, assuredReplied)
	b = appendBE32(b, ctaTimeout, 100)
	b = finishMsg(b, 0)
	t.Logf("this kernel answers CTA_STATUS=ASSURED|SEEN_REPLY (no CONFIRMED) with: %v", c.request(b, seq))
}

// TestStates creates an entry in every TCP and SCTP state and checks the
// names against conntrack -L.
func TestStates(t *testing.T) {
	t.Parallel()
	ns := inNewNetns(t)
	c := open(t)
	n := 0
	for i, st := range snapshot.States(snapshot.ProtoTCP) {
		f := snapshot.Flow{Proto: snapshot.ProtoTCP, State: st, Status: assuredReplied, Timeout: 1000,
			Orig: tuple("10.3.0.1", "10.3.0.2", uint16(100+i), 80), Reply: tuple("10.3.0.2", "10.3.0.1", 80, uint16(100+i))}
		if err := c.Create(&f); err != nil {
			t.Fatalf("TCP %s: %v", st, err)
		}
		n++
	}
	for i, st := range snapshot.States(snapshot.ProtoSCTP) {
		f := snapshot.Flow{Proto: snapshot.ProtoSCTP, State: st, Timeout: 1000,
			Orig: tuple("fd03::1", "fd03::2", uint16(100+i), 80), Reply: tuple("fd03::2", "fd03::1", 80, uint16(100+i))}
		if err := c.Create(&f); err != nil {
			// Kernels since 6.3 know no HEARTBEAT_ACKED.
			if st == "HEARTBEAT_ACKED" && (errors.Is(err, syscall.ERANGE) || errors.Is(err, syscall.EINVAL)) {
				t.Logf("SCTP %s: %v", st, err)
				continue
			}
			t.Fatalf("SCTP %s: %v", st, err)
		}
		n++
	}
	dumped := time.Now()
	got := dumpAll(t, c)
	if len(got) != n {
		t.Fatalf("%d entries, created %d", len(got), n)
	}
	seen := map[string]bool{}
	for _, f := range got {
		seen[f.Proto.String()+" "+f.State] = true
	}
	for _, st := range snapshot.States(snapshot.ProtoTCP) {
		if !seen["tcp "+st] {
			t.Errorf("no TCP entry in state %s", st)
		}
	}
	compareWithConntrackL(t, ns, got, dumped)
}

func TestDelete(t *testing.T) {
	t.Parallel()
	inNewNetns(t)
	c := open(t)
	a := snapshot.Flow{Proto: snapshot.ProtoTCP, State: "ESTABLISHED", Status: assuredReplied, Timeout: 500,
		Orig: tuple("10.4.0.1", "10.96.4.4", 33000, 80), Reply: tuple("10.4.9.9", "10.4.0.1", 8080, 33000)}
	aZone := a // the same tuple in another zone: another entry
	aZone.Zone = 5
	b := a // another client of the same service
	b.Orig.SrcPort, b.Reply.DstPort = 33001, 33001
	v6 := snapshot.Flow{Proto: snapshot.ProtoUDP, Timeout: 500,
		Orig: tuple("fd04::1", "fd04::96", 5353, 53), Reply: tuple("fd04::9", "fd04::1", 53, 5353)}
	create(t, c, []snapshot.Flow{a, aZone, b, v6})
	before := dumpAll(t, c)
	if len(before) != 4 {
		t.Fatalf("%d entries", len(before))
	}

	// The ID guards against deleting an entry that was replaced.
	stale := before[keyOf(&a)]
	stale.ID++
	if err := c.Delete(&stale); !errors.Is(err, syscall.ENOENT) {
		t.Fatalf("delete with a stale ID: %v, want ENOENT", err)
	}
	if len(dumpAll(t, c)) != 4 {
		t.Fatal("delete with a stale ID removed an entry")
	}

	target := before[keyOf(&a)]
	if err := c.Delete(&target); err != nil {
		t.Fatal(err)
	}
	after := dumpAll(t, c)
	if _, ok := after[keyOf(&a)]; ok || len(after) != 3 {
		t.Fatalf("after deleting %v: %d entries, it still there: %v", &a, len(after), ok)
	}
	for _, k := range []key{keyOf(&aZone), keyOf(&b), keyOf(&v6)} {
		if g, ok := after[k]; !ok || g.ID != before[k].ID {
			t.Errorf("entry %+v gone or replaced", k)
		}
	}
	if err := c.Delete(&target); !errors.Is(err, syscall.ENOENT) {
		t.Errorf("deleting again: %v, want ENOENT", err)
	}

	// Without an ID: by tuple (and zone) alone, IPv6 too.
	byTuple := v6
	if err := c.Delete(&byTuple); err != nil {
		t.Fatal(err)
	}
	byZone := aZone
	if err := c.Delete(&byZone); err != nil {
		t.Fatal(err)
	}
	last := dumpAll(t, c)
	if _, ok := last[keyOf(&b)]; !ok || len(last) != 1 {
		t.Errorf("left %d entries, want only %v", len(last), &b)
	}
}

// DeleteJudged names the entry by its reply tuple, its zone and its ID:
// it removes the entry that was judged and no other. A client that
// reconnects from the same port to the same Service makes an entry with
// the same original tuple, translated to a live backend: its reply tuple
// is another, so it is not found, even with the ID of the entry judged
// (the kernel may give a replacement the same ID when it reuses the old
// entry's memory: the ID hashes the entry's address and original tuple).
// Delete, which names the original tuple, removes the reconnect then.
func TestDeleteJudgedSparesAReconnect(t *testing.T) {
	t.Parallel()
	inNewNetns(t)
	c := open(t)
	judged := snapshot.Flow{Proto: snapshot.ProtoTCP, State: "ESTABLISHED", Status: assuredReplied, Timeout: 500,
		Orig: tuple("10.4.0.1", "10.96.4.4", 33000, 80), Reply: tuple("10.4.9.9", "10.4.0.1", 8080, 33000)}
	otherZone := judged // the same tuples in another zone: another entry
	otherZone.Zone = 5
	v6 := snapshot.Flow{Proto: snapshot.ProtoUDP, Timeout: 500,
		Orig: tuple("fd04::1", "fd04::96", 5353, 53), Reply: tuple("fd04::9", "fd04::1", 53, 5353)}
	create(t, c, []snapshot.Flow{judged, otherZone, v6})
	before := dumpAll(t, c)
	read := before[keyOf(&judged)]

	// The client reconnects from the same port: the judged entry goes,
	// and the new one is translated to a live backend.
	if err := c.Delete(&read); err != nil {
		t.Fatal(err)
	}
	reconnect := judged
	reconnect.Reply.Src = netip.MustParseAddr("10.4.9.10")
	create(t, c, []snapshot.Flow{reconnect})
	now := dumpAll(t, c)[keyOf(&judged)]
	if now.Reply != reconnect.Reply {
		t.Fatalf("the reconnect reads %v", now.Reply)
	}
	for _, id := range []uint32{read.ID, now.ID} {
		gone := read
		gone.ID = id
		if err := c.DeleteJudged(&gone); !errors.Is(err, syscall.ENOENT) {
			t.Fatalf("deleting the judged entry, replaced, with ID %d (the reconnect's: %d): %v, want ENOENT", id, now.ID, err)
		}
		if got, ok := dumpAll(t, c)[keyOf(&judged)]; !ok || got.ID != now.ID {
			t.Fatalf("the reconnect is gone or replaced after deleting the judged entry with ID %d", id)
		}
	}
	// What DeleteJudged spares, Delete removes when the IDs collide.
	collide := read
	collide.ID = now.ID
	if err := c.Delete(&collide); err != nil {
		t.Fatalf("delete by the original tuple with the reconnect's ID: %v", err)
	}
	if _, ok := dumpAll(t, c)[keyOf(&judged)]; ok {
		t.Fatal("delete by the original tuple with the reconnect's ID left it")
	}

	// The entry judged, as read, is deleted: in its zone only (the same
	// tuples in zone 0 stay until named), IPv6 too.
	create(t, c, []snapshot.Flow{judged})
	zone0 := dumpAll(t, c)[keyOf(&judged)]
	for _, f := range []snapshot.Flow{before[keyOf(&otherZone)], zone0, before[keyOf(&v6)]} {
		if err := c.DeleteJudged(&f); err != nil {
			t.Fatalf("deleting %v (zone %d) as judged: %v", &f, f.Zone, err)
		}
		if _, ok := dumpAll(t, c)[keyOf(&f)]; ok {
			t.Fatalf("%v (zone %d) is still there", &f, f.Zone)
		}
		if f.Zone == 5 {
			if got, ok := dumpAll(t, c)[keyOf(&zone0)]; !ok || got.ID != zone0.ID {
				t.Fatal("deleting the entry of zone 5 removed its twin of zone 0")
			}
		}
		if err := c.DeleteJudged(&f); !errors.Is(err, syscall.ENOENT) {
			t.Errorf("deleting %v again: %v, want ENOENT", &f, err)
		}
	}
	if left := dumpAll(t, c); len(left) != 0 {
		t.Errorf("%d entries left, want none", len(left))
	}

	// In a batch, each entry answers for itself: the one gone, the one
	// replaced by a reconnect, the one there as judged.
	create(t, c, []snapshot.Flow{judged, otherZone})
	batch := dumpAll(t, c)
	replaced := batch[keyOf(&judged)]
	if err := c.Delete(&replaced); err != nil {
		t.Fatal(err)
	}
	create(t, c, []snapshot.Flow{reconnect})
	var outcomes []error
	err := c.DeleteJudgedEach([]snapshot.Flow{before[keyOf(&v6)], batch[keyOf(&otherZone)], replaced}, func(_ int, err error) {
		outcomes = append(outcomes, err)
	})
	if err != nil || len(outcomes) != 3 || !errors.Is(outcomes[0], syscall.ENOENT) || outcomes[1] != nil || !errors.Is(outcomes[2], syscall.ENOENT) {
		t.Errorf("a batch of one gone, one there, one replaced: %v, %v", outcomes, err)
	}
	if left := dumpAll(t, c); len(left) != 1 || left[keyOf(&reconnect)].Reply != reconnect.Reply {
		t.Errorf("left %v, want only the reconnect", left)
	}
	noID := read
	noID.ID = 0
	if err := c.DeleteJudged(&noID); err == nil || errors.Is(err, syscall.ENOENT) {
		t.Errorf("deleting without an ID: %v, want a refusal", err)
	}
}

func TestKernelSource(t *testing.T) {
	t.Parallel()
	inNewNetns(t)
	c := open(t)
	flows := labFlows()
	create(t, c, flows)
	if (&KernelSource{}).Name() != Name {
		t.Errorf("Name() = %q", (&KernelSource{}).Name())
	}

	check := func(src *KernelSource, want func(*snapshot.Flow) bool) {
		t.Helper()
		s := &snapshot.Snapshot{}
		if err := src.Collect(context.Background(), s); err != nil {
			t.Fatal(err)
		}
		if s.Conntrack == nil || s.Conntrack.Seen != len(flows) {
			t.Fatalf("Conntrack = %+v, want Seen %d", s.Conntrack, len(flows))
		}
		wantKeys := map[key]bool{}
		for i := range flows {
			if want(&flows[i]) {
				wantKeys[keyOf(&flows[i])] = true
			}
		}
		if len(wantKeys) == 0 || len(wantKeys) == len(flows) {
			t.Fatalf("filter keeps %d of %d: not a test of it", len(wantKeys), len(flows))
		}
		got := map[key]bool{}
		for f := range s.Conntrack.All() {
			if !wantKeys[keyOf(f)] || got[keyOf(f)] {
				t.Errorf("kept %v", f)
			}
			got[keyOf(f)] = true
		}
		if len(got) != len(wantKeys) {
			t.Errorf("kept %d flows, want %d", len(got), len(wantKeys))
		}
	}
	dnat := &KernelSource{}
	dnat.Narrow([]any{readerOf((*snapshot.Flow).DNAT)})
	check(dnat, (*snapshot.Flow).DNAT)
	udp := func(f *snapshot.Flow) bool { return f.Proto == snapshot.ProtoUDP }
	observed := 0
	src := &KernelSource{Observe: func(*snapshot.Flow) { observed++ }}
	src.Narrow([]any{readerOf(udp)})
	check(src, udp)
	if observed != len(flows) {
		t.Errorf("Observe saw %d flows of %d", observed, len(flows))
	}

	// On error the snapshot is left alone.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	s := &snapshot.Snapshot{NodeName: "n1"}
	if err := (&KernelSource{}).Collect(ctx, s); !errors.Is(err, context.Canceled) {
		t.Errorf("Collect with a cancelled context: %v", err)
	}
	if s.Conntrack != nil || s.NodeName != "n1" || len(s.Sources) != 0 {
		t.Errorf("snapshot changed on error: %+v", s)
	}
}

func TestTimestamp(t *testing.T) {
	t.Parallel()
	inNewNetns(t)
	c := open(t)
	early := snapshot.Flow{Proto: snapshot.ProtoUDP, Timeout: 100,
		Orig: tuple("10.5.0.1", "10.96.5.5", 1000, 53), Reply: tuple("10.5.9.9", "10.5.0.1", 53, 1000)}
	create(t, c, []snapshot.Flow{early})

	// Per network namespace: this writes the test namespace's sysctl.
	const sysctl = "/proc/sys/net/netfilter/nf_conntrack_timestamp"
	if err := os.WriteFile(sysctl, []byte("1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	late := early
	late.Orig.SrcPort, late.Reply.DstPort = 1001, 1001
	before := time.Now()
	create(t, c, []snapshot.Flow{late})
	after := time.Now()

	got := dumpAll(t, c)
	if s := got[keyOf(&early)].Start; !s.IsZero() {
		t.Errorf("entry created before the sysctl has start %v", s)
	}
	s := got[keyOf(&late)].Start
	const slack = 50 * time.Millisecond
	if s.Before(before.Add(-slack)) || s.After(after.Add(slack)) {
		t.Errorf("start %v, created between %v and %v", s, before, after)
	}
}

// TestPermission drops CAP_NET_ADMIN on a thread of its own and reads the
// table from there.
func TestPermission(t *testing.T) {
	t.Parallel()
	name := inNewNetns(t)
	c := open(t)
	create(t, c, labFlows()[:1])
	ns, err := netns.GetFromName(name)
	if err != nil {
		t.Fatal(err)
	}
	defer ns.Close()

	type result struct {
		dump, collect, get error
		snap               *snapshot.Snapshot
	}
	done := make(chan result)
	go func() {
		// This thread keeps its reduced capabilities: it is never unlocked,
		// so it ends with the goroutine.
		runtime.LockOSThread()
		var r result
		defer func() { done <- r }()
		if err := netns.Set(ns); err != nil {
			r.dump = err
			return
		}
		hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
		var data [2]unix.CapUserData
		if err := unix.Capget(&hdr, &data[0]); err != nil {
			r.dump = err
			return
		}
		data[0].Effective &^= 1 << unix.CAP_NET_ADMIN
		if err := unix.Capset(&hdr, &data[0]); err != nil {
			r.dump = err
			return
		}
		c, err := Open()
		if err != nil {
			r.dump = err
			return
		}
		defer c.Close()
		_, r.dump = c.Dump(context.Background(), func(*snapshot.Flow) error { return nil })
		_, r.get = c.Get(&labFlows()[0])
		r.snap = &snapshot.Snapshot{}
		r.collect = (&KernelSource{}).Collect(context.Background(), r.snap)
	}()
	r := <-done
	if !errors.Is(r.dump, ErrPermission) || !strings.Contains(r.dump.Error(), "CAP_NET_ADMIN") {
		t.Errorf("Dump without CAP_NET_ADMIN: %v, want ErrPermission", r.dump)
	}
	if !errors.Is(r.get, ErrPermission) || !errors.Is(r.get, syscall.EPERM) {
		t.Errorf("Get without CAP_NET_ADMIN: %v, want ErrPermission", r.get)
	}
	if !errors.Is(r.collect, ErrPermission) || r.snap.Conntrack != nil {
		t.Errorf("Collect without CAP_NET_ADMIN: %v, snapshot %+v", r.collect, r.snap)
	}
}

// fill creates n UDP entries, n/2 of them DNATed.
func fill(tb testing.TB, c *Conn, n int) {
	tb.Helper()
	for i := 0; i < n; i++ {
		f := snapshot.Flow{Proto: snapshot.ProtoUDP, Timeout: 600,
			Orig:  tuple("10.6.0.1", "10.96.6.6", uint16(1024+i), 53),
			Reply: tuple("10.96.6.6", "10.6.0.1", 53, uint16(1024+i))}
		if i%2 == 0 {
			f.Reply.Src = netip.MustParseAddr("10.6.9.9")
		}
		if err := c.Create(&f); err != nil {
			tb.Fatal(err)
		}
	}
}

// TestDumpAbandoned ends dumps early (cancelled context, failing callback)
// and checks that the connection still works afterwards: the rest of the
// abandoned dump must not leak into the next answer.
func TestDumpAbandoned(t *testing.T) {
	t.Parallel()
	inNewNetns(t)
	c := open(t)
	const n = 3000 // many datagrams
	fill(t, c, n)

	ctx, cancel := context.WithCancel(context.Background())
	seen, err := c.Dump(ctx, func(*snapshot.Flow) error {
		cancel()
		return nil
	})
	if !errors.Is(err, context.Canceled) || seen == 0 || seen >= n {
		t.Fatalf("cancelled dump: seen %d, %v", seen, err)
	}
	if got := len(dumpAll(t, c)); got != n {
		t.Fatalf("dump after a cancelled one: %d entries, want %d", got, n)
	}

	stop := errors.New("stop")
	seen, err = c.Dump(context.Background(), func(*snapshot.Flow) error { return stop })
	if !errors.Is(err, stop) || seen != 1 {
		t.Fatalf("failing callback: seen %d, %v", seen, err)
	}
	// A request after an abandoned dump gets its own answer.
	fill2 := snapshot.Flow{Proto: snapshot.ProtoTCP, State: "ESTABLISHED", Timeout: 60,
		Orig: tuple("10.7.0.1", "10.7.0.2", 1, 2), Reply: tuple("10.7.0.2", "10.7.0.1", 2, 1)}
	if err := c.Create(&fill2); err != nil {
		t.Fatal(err)
	}
	if got := len(dumpAll(t, c)); got != n+1 {
		t.Fatalf("%d entries, want %d", got, n+1)
	}

	if _, err := c.Dump(ctx, func(*snapshot.Flow) error { return nil }); !errors.Is(err, context.Canceled) {
		t.Errorf("dump with a cancelled context: %v", err)
	}
}

// A dump abandoned after its last datagram was received ahead, but before
// it was decoded, leaves nothing to drain: the next request neither hangs
// waiting for the end of a dump already read nor mistakes it for its
// answer.
func TestDumpAbandonedAfterItsEndWasRead(t *testing.T) {
	t.Parallel()
	inNewNetns(t)
	c := open(t)
	for _, n := range []int{1, 10, 300} { // one datagram, and a few
		fill := snapshot.Flow{Proto: snapshot.ProtoTCP, State: "ESTABLISHED", Timeout: 60,
			Orig: tuple("10.8.0.1", "10.8.0.2", uint16(n), 2), Reply: tuple("10.8.0.2", "10.8.0.1", 2, uint16(n))}
		if err := c.Create(&fill); err != nil {
			t.Fatal(err)
		}
		stop := errors.New("stop")
		for range 20 {
			if _, err := c.Dump(context.Background(), func(*snapshot.Flow) error { return stop }); !errors.Is(err, stop) {
				t.Fatalf("failing callback: %v", err)
			}
			done := make(chan error, 1)
			go func() { _, err := c.Get(&fill); done <- err }()
			select {
			case err := <-done:
				if err != nil {
					t.Fatalf("get after an abandoned dump: %v", err)
				}
			case <-time.After(poll.Patience):
				t.Fatalf("get after an abandoned dump still waits after %v", poll.Patience)
			}
		}
	}
}

// TestDumpTruncatedDatagram reads with a buffer too small for the kernel's
// datagrams: the dump must fail, not return part of the table.
func TestDumpTruncatedDatagram(t *testing.T) {
	t.Parallel()
	inNewNetns(t)
	c := open(t)
	fill(t, c, 50)
	c.buf = make([]byte, 512)
	seen, err := c.Dump(context.Background(), func(*snapshot.Flow) error { return nil })
	if !errors.Is(err, errMalformed) {
		t.Fatalf("seen %d, err %v; want a truncation error", seen, err)
	}
}

func TestDumpCountOnly(t *testing.T) {
	t.Parallel()
	inNewNetns(t)
	c := open(t)
	fill(t, c, 20)
	if n, err := c.Dump(context.Background(), nil); err != nil || n != 20 {
		t.Fatalf("Dump(nil): %d, %v; want 20", n, err)
	}
}

func TestDumpEmptyTable(t *testing.T) {
	t.Parallel()
	inNewNetns(t)
	c := open(t)
	n, err := c.Dump(context.Background(), func(f *snapshot.Flow) error {
		return fmt.Errorf("unexpected entry %v", f)
	})
	if err != nil || n != 0 {
		t.Fatalf("empty table: %d, %v", n, err)
	}
}

// The benchmark: the same table read by Dump (as KernelSource does) and by
// `conntrack -L`, in one process, in a namespace filled once.

const (
	benchFlowsEnv = "GHOSTWATCH_BENCH_FLOWS"
	helperEnv     = "GHOSTWATCH_COLLECT_HELPER"
)

func benchFlows(b *testing.B) int {
	s := os.Getenv(benchFlowsEnv)
	if s == "" {
		return 100000
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 10 || n > 1<<24 {
		b.Fatalf("%s=%q: want a number of flows from 10 to %d", benchFlowsEnv, s, 1<<24)
	}
	return n
}

// benchFlow is the i-th flow of the benchmark table: four in five DNATed
// from one of 1000 service addresses to one of 5000 pods, the rest not; 70%
// established TCP, 30% UDP. Every original tuple is distinct.
func benchFlow(i int, f *snapshot.Flow) {
	client := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
	svc := i % 1000
	vip := netip.AddrFrom4([4]byte{172, 30, byte(svc >> 8), byte(svc)})
	*f = snapshot.Flow{Timeout: 3600,
		Orig:  snapshot.Tuple{Src: client, Dst: vip, SrcPort: uint16(30000 + i%30000), DstPort: 443},
		Reply: snapshot.Tuple{Src: vip, Dst: client, SrcPort: 443, DstPort: uint16(30000 + i%30000)},
	}
	if i%10 < 7 {
		f.Proto, f.State, f.Status = snapshot.ProtoTCP, "ESTABLISHED", assuredReplied
	} else {
		f.Proto, f.Status = snapshot.ProtoUDP, snapshot.StatusSeenReply
	}
	if i%5 != 0 {
		pod := i % 5000
		f.Reply.Src = netip.AddrFrom4([4]byte{10, 244, byte(pod >> 8), byte(pod)})
		f.Reply.SrcPort = 8443
	}
}

// raiseSysctl makes a global sysctl at least min for the rest of the
// benchmark.
func raiseSysctl(b *testing.B, path string, min int) {
	raw, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	cur, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil {
		b.Fatalf("%s: %v", path, err)
	}
	if cur >= min {
		return
	}
	if err := os.WriteFile(path, []byte(strconv.Itoa(min)), 0o644); err != nil {
		b.Fatalf("raising %s to %d: %v", path, min, err)
	}
	b.Logf("raised %s from %d to %d for the benchmark", path, cur, min)
	b.Cleanup(func() {
		if err := os.WriteFile(path, raw, 0o644); err != nil {
			b.Errorf("restoring %s: %v", path, err)
		}
	})
}

// benchTable creates a named namespace (without entering it) and fills its
// table with n flows from two workers, each on its own thread and socket in
// the namespace.
func benchTable(b *testing.B, n int) (string, netns.NsHandle) {
	testenv.RequireRoot(b, "needs root (creates a network namespace and fills its conntrack table)")
	// Both limits are global and only writable from the host namespace.
	raiseSysctl(b, "/proc/sys/net/netfilter/nf_conntrack_max", n+n/10+1000)
	buckets := 1
	for buckets < n/2 {
		buckets <<= 1
	}
	raiseSysctl(b, "/proc/sys/net/netfilter/nf_conntrack_buckets", buckets)

	var rnd [6]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		b.Fatal(err)
	}
	name := fmt.Sprintf("gwt-ct-bench-%x", rnd)
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		b.Fatal(err)
	}
	ns, err := netns.NewNamed(name)
	if err != nil {
		b.Fatal(err)
	}
	if err := netns.Set(orig); err != nil {
		b.Fatalf("leaving the new namespace: %v", err) // the thread stays locked and ends with the goroutine
	}
	runtime.UnlockOSThread()
	orig.Close()
	b.Cleanup(func() {
		ns.Close()
		if err := netbed.DeleteNamespace(name); err != nil {
			b.Errorf("deleting network namespace %s: %v", name, err)
		}
	})

	start := time.Now()
	const workers = 2
	errs := make(chan error, workers)
	for w := 0; w < workers; w++ {
		go func() {
			errs <- inNetns(ns, func() error {
				c, err := Open()
				if err != nil {
					return err
				}
				defer c.Close()
				var f snapshot.Flow
				for i := w; i < n; i += workers {
					benchFlow(i, &f)
					if err := c.Create(&f); err != nil {
						return err
					}
				}
				return nil
			})
		}()
	}
	for w := 0; w < workers; w++ {
		if err := <-errs; err != nil {
			b.Fatal(err)
		}
	}
	b.Logf("filled %s with %d flows in %v", name, n, time.Since(start).Round(time.Millisecond))
	return name, ns
}

// inNetns runs fn on a locked thread inside ns and moves the thread back.
func inNetns(ns netns.NsHandle, fn func() error) error {
	runtime.LockOSThread()
	orig, err := netns.Get()
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer orig.Close()
	if err := netns.Set(ns); err != nil {
		runtime.UnlockOSThread()
		return err
	}
	err = fn()
	if netns.Set(orig) == nil {
		runtime.UnlockOSThread()
	} // else the thread ends with the goroutine
	return err
}

// gnuTime measures the peak RSS of a command. It must fork the command
// itself: a process started by this (large) test process inherits its
// high-water mark.
const gnuTime = "/usr/bin/time"

// peakRSSKiB runs args in the namespace under GNU time and returns the
// command's peak resident set size and its standard output; -1 when GNU
// time is not installed.
func peakRSSKiB(b *testing.B, ns string, env []string, args ...string) (int64, string) {
	if _, err := os.Stat(gnuTime); err != nil {
		return -1, ""
	}
	report := b.TempDir() + "/rss"
	cmd := exec.Command("ip", append([]string{"netns", "exec", ns, gnuTime, "-f", "%M", "-o", report}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		b.Fatalf("%v: %v\n%s%s", args, err, stdout.String(), stderr.String())
	}
	raw, err := os.ReadFile(report)
	if err != nil {
		b.Fatal(err)
	}
	kib, err := strconv.ParseInt(strings.TrimSpace(string(raw)), 10, 64)
	if err != nil {
		b.Fatalf("%s report %q: %v", gnuTime, raw, err)
	}
	return kib, stdout.String()
}

// BenchmarkDumpTable reads a table of GHOSTWATCH_BENCH_FLOWS flows
// (default 100,000; 80% DNATed) three ways,
//
//   - ghostwatch: KernelSource.Collect narrowed to the DNATed flows, i.e.
//     Open, Dump, copy the DNATed flows;
//   - conntrack-L: `ip netns exec NS conntrack -L > /dev/null`;
//   - exec-baseline: `ip netns exec NS true`, the cost of starting a
//     process in the namespace, to subtract from conntrack-L;
//
// and, as dump-only, Dump on one Conn keeping nothing: the kernel's share
// and the parsing.
//
// After timing, ghostwatch, conntrack-L and exec-baseline report
// maxrss-KiB, the peak RSS of one run in a process of its own measured by
// GNU time (when installed): for ghostwatch, the test binary running only
// KernelSource.Collect (and, as idle-maxrss-KiB, the test binary doing
// nothing); for the others, the command.
func BenchmarkDumpTable(b *testing.B) {
	n := benchFlows(b)
	name, ns := benchTable(b, n)
	wantKept := n - (n+4)/5

	b.Run("ghostwatch", func(b *testing.B) {
		b.ReportAllocs()
		err := inNetns(ns, func() error {
			for b.Loop() {
				s := &snapshot.Snapshot{}
				if err := dnatOnly().Collect(context.Background(), s); err != nil {
					return err
				}
				if s.Conntrack.Seen != n || s.Conntrack.Len() != wantKept {
					return fmt.Errorf("seen %d kept %d, want %d and %d", s.Conntrack.Seen, s.Conntrack.Len(), n, wantKept)
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(n), "flows")
		exe, err := os.Executable()
		if err != nil {
			b.Fatal(err)
		}
		helper := []string{exe, "-test.run=^TestCollectHelperProcess$", "-test.count=1"}
		rss, out := peakRSSKiB(b, name, []string{helperEnv + "=collect"}, helper...)
		if rss < 0 {
			return
		}
		if want := fmt.Sprintf("seen=%d kept=%d", n, wantKept); !strings.Contains(out, want) {
			b.Fatalf("helper process: %q, want %q", out, want)
		}
		idle, _ := peakRSSKiB(b, name, []string{helperEnv + "=idle"}, helper...)
		b.ReportMetric(float64(rss), "maxrss-KiB")
		b.ReportMetric(float64(idle), "idle-maxrss-KiB")
	})

	// The floor under ghostwatch: the kernel's dump and the parsing, with
	// nothing kept.
	b.Run("dump-only", func(b *testing.B) {
		b.ReportAllocs()
		err := inNetns(ns, func() error {
			c, err := Open()
			if err != nil {
				return err
			}
			defer c.Close()
			for b.Loop() {
				seen, err := c.Dump(context.Background(), func(*snapshot.Flow) error { return nil })
				if err != nil {
					return err
				}
				if seen != n {
					return fmt.Errorf("seen %d, want %d", seen, n)
				}
			}
			return nil
		})
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(n), "flows")
	})

	run := func(b *testing.B, args ...string) {
		if _, err := exec.LookPath(args[0]); err != nil {
			testenv.Unavailable(b, args[0]+" not installed")
		}
		for b.Loop() {
			cmd := exec.Command("ip", append([]string{"netns", "exec", name}, args...)...)
			var stderr strings.Builder
			cmd.Stderr = &stderr // stdout: /dev/null
			if err := cmd.Run(); err != nil {
				b.Fatalf("%v: %v: %s", args, err, stderr.String())
			}
			if args[0] == "conntrack" {
				if want := fmt.Sprintf(" %d flow entries", n); !strings.Contains(stderr.String(), want) {
					b.Fatalf("conntrack -L: %q, want %q", stderr.String(), want)
				}
			}
		}
		b.ReportMetric(float64(n), "flows")
		if rss, _ := peakRSSKiB(b, name, nil, args...); rss >= 0 {
			b.ReportMetric(float64(rss), "maxrss-KiB")
		}
	}
	b.Run("conntrack-L", func(b *testing.B) { run(b, "conntrack", "-L") })
	b.Run("exec-baseline", func(b *testing.B) { run(b, "true") })
}

// TestCollectHelperProcess is not a test: BenchmarkDumpTable runs the test
// binary with it, inside the benchmark's namespace, to measure the peak RSS
// of one collection in a process of its own.
func TestCollectHelperProcess(t *testing.T) {
	switch os.Getenv(helperEnv) {
	case "":
		t.Skip("helper process of BenchmarkDumpTable")
	case "idle":
		return
	}
	s := &snapshot.Snapshot{}
	if err := dnatOnly().Collect(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	fmt.Printf("seen=%d kept=%d\n", s.Conntrack.Seen, s.Conntrack.Len())
}

// dnatOnly is a source whose one reader keeps the DNATed flows, as the
// benchmarks have measured since before rules said what they keep.
func dnatOnly() *KernelSource {
	k := &KernelSource{}
	k.Narrow([]any{readerOf((*snapshot.Flow).DNAT)})
	return k
}
