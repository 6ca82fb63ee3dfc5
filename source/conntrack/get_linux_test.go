//go:build linux

package conntrack

import (
	"errors"
	"syscall"
	"testing"
	"time"

	"github.com/ghostwatch/ghostwatch/snapshot"
)

// sameEntry compares an entry from Get with the one a dump returned just
// before: every field but the timeout, which may have ticked down.
func sameEntry(t *testing.T, got, dumped *snapshot.Flow, dumpedAt time.Time) {
	t.Helper()
	elapsed := countedDown(dumpedAt)
	if got.ID != dumped.ID || got.Proto != dumped.Proto || got.Orig != dumped.Orig || got.Reply != dumped.Reply ||
		got.State != dumped.State || got.Status != dumped.Status || got.Mark != dumped.Mark || got.Zone != dumped.Zone ||
		!got.Start.Equal(dumped.Start) || got.Timeout > dumped.Timeout || got.Timeout+elapsed < dumped.Timeout {
		t.Errorf("Get:\n %+v\ndumped:\n %+v", *got, *dumped)
	}
}

func TestGet(t *testing.T) {
	t.Parallel()
	inNewNetns(t)
	c := open(t)
	flows := labFlows() // IPv4 and IPv6; TCP, UDP and SCTP; zones 3 and 7
	create(t, c, flows)
	dumpedAt := time.Now()
	dumped := dumpAll(t, c)
	for i := range flows {
		want := dumped[keyOf(&flows[i])]
		got, err := c.Get(&flows[i])
		if err != nil {
			t.Errorf("%v: %v", &flows[i], err)
			continue
		}
		sameEntry(t, &got, &want, dumpedAt)
		// The key is all Get reads.
		key := snapshot.Flow{Proto: want.Proto, Orig: want.Orig, Zone: want.Zone}
		if got, err := c.Get(&key); err != nil || got.ID != want.ID {
			t.Errorf("%v by its key alone: ID %d, %v; want %d", &flows[i], got.ID, err, want.ID)
		}
	}

	missing := func(what string, f snapshot.Flow) {
		t.Helper()
		got, err := c.Get(&f)
		if !errors.Is(err, syscall.ENOENT) {
			t.Errorf("%s: %+v, %v; want ENOENT", what, got, err)
		}
	}
	tcp4, v6, zoned := flows[0], flows[4], flows[3]
	if !tcp4.Orig.Src.Is4() || !v6.Orig.Src.Is6() || zoned.Zone == 0 {
		t.Fatal("labFlows changed: pick other flows")
	}
	other := tcp4
	other.Orig.SrcPort++
	missing("another source port", other)
	otherV6 := v6
	otherV6.Orig.Dst = otherV6.Orig.Src
	missing("another IPv6 destination", otherV6)
	otherProto := tcp4
	otherProto.Proto = snapshot.ProtoUDP
	missing("another protocol", otherProto)
	otherZone := zoned
	otherZone.Zone = 0
	missing("the default zone instead of zone 7", otherZone)
	otherZone.Zone = 8
	missing("zone 8 instead of zone 7", otherZone)
	// The kernel finds an entry by its reply tuple too; that is not the
	// entry asked for.
	byReply := tcp4
	byReply.Orig = tcp4.Reply
	missing("the reply tuple of an entry", byReply)

	// Deleted, then replaced by an entry with the same original tuple and
	// another reply (another backend): Get shows the new one.
	for _, f := range []snapshot.Flow{tcp4, v6, zoned} {
		old := dumped[keyOf(&f)]
		if err := c.Delete(&old); err != nil {
			t.Fatal(err)
		}
		missing("deleted "+f.String(), f)
		f.Reply.Src = f.Reply.Src.Next()
		if err := c.Create(&f); err != nil {
			t.Fatal(err)
		}
		got, err := c.Get(&f)
		if err != nil {
			t.Fatal(err)
		}
		if got.Orig != old.Orig || got.Reply != f.Reply || got.ID == 0 {
			t.Errorf("recreated %v: ID %d, tuples %+v %+v", &f, got.ID, got.Orig, got.Reply)
		}
		// The kernel derives the ID from the entry's memory address and
		// its original tuple, not the reply: an entry created again at
		// once with the same original tuple may get the same ID (on Linux
		// 6.18 it does), and then only the reply tells the two apart.
		t.Logf("%v: ID %d before, %d after it was replaced with another reply", &f, old.ID, got.ID)
	}

	// A Get in the middle of an abandoned dump gets its own answer.
	fill(t, c, 2000)
	stop := errors.New("stop")
	if _, err := c.Dump(t.Context(), func(*snapshot.Flow) error { return stop }); !errors.Is(err, stop) {
		t.Fatal(err)
	}
	if got, err := c.Get(&v6); err != nil || got.Orig != v6.Orig {
		t.Errorf("Get after an abandoned dump: %+v, %v", got, err)
	}

	bad := snapshot.Flow{Proto: snapshot.ProtoTCP, Orig: tuple("10.0.0.1", "fd00::1", 1, 2)}
	if _, err := c.Get(&bad); err == nil || errors.Is(err, syscall.ENOENT) {
		t.Errorf("Get with a mixed-family tuple: %v", err)
	}
}
