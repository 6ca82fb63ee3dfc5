package snapshot

import "testing"

// A ledger without a field of its own is attached by its source's name and
// read back by type; a copy of the snapshot made before keeps what it had.
func TestAttachAndLedgerOf(t *testing.T) {
	type neighbours struct{ n int }
	s := &Snapshot{}
	if LedgerOf[neighbours](s, "neigh") != nil {
		t.Fatal("a ledger before any was attached")
	}
	Attach(s, "neigh", &neighbours{n: 1})
	before := *s
	Attach(s, "neigh", &neighbours{n: 2})
	if got := LedgerOf[neighbours](s, "neigh"); got == nil || got.n != 2 {
		t.Errorf("LedgerOf = %+v", got)
	}
	if got := LedgerOf[neighbours](&before, "neigh"); got == nil || got.n != 1 {
		t.Errorf("the copy made before reads %+v", got)
	}
	if LedgerOf[string](s, "neigh") != nil || LedgerOf[neighbours](s, "other") != nil {
		t.Error("a ledger read as another type, or under another name")
	}
}
