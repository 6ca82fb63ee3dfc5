package conntrack

import (
	"errors"

	"github.com/ghostwatch/ghostwatch/snapshot"
)

// Name is the source name recorded in snapshots.
const Name = "conntrack"

// Keep decides which flows a collector keeps in the snapshot. It is called
// with a Flow that is reused for the next entry: it must not retain the
// pointer.
type Keep func(f *snapshot.Flow) bool

// KeepDNAT keeps the flows whose destination was rewritten: the only ones a
// Service frontend can have produced. It is the default.
func KeepDNAT(f *snapshot.Flow) bool { return f.DNAT() }

// ErrPermission is returned (wrapped) when the kernel refuses to show the
// table: reading conntrack needs CAP_NET_ADMIN.
var ErrPermission = errors.New("reading the conntrack table needs CAP_NET_ADMIN")

// StateNumber is snapshot.StateNumber.
//
// Deprecated: use snapshot.StateNumber.
func StateNumber(p snapshot.Proto, name string) (n uint8, ok bool) {
	return snapshot.StateNumber(p, name)
}

// StateName is snapshot.StateName.
//
// Deprecated: use snapshot.StateName.
func StateName(p snapshot.Proto, n uint8) string { return snapshot.StateName(p, n) }
