package snapshot

import (
	"fmt"
	"maps"
	"net/netip"
	"strings"
	"time"
)

// Status is the outcome of one source's collection.
type Status string

const (
	// StatusOK means the source was read completely and its data is fresh.
	StatusOK Status = "ok"
	// StatusUnsupported means the ledger does not exist here (no conntrack
	// in this kernel, no Calico in this cluster). It is a normal result.
	StatusUnsupported Status = "unsupported"
	// StatusNotGiven means the ledger was not asked for: a scan of saved
	// evidence given no file of it. Like unsupported, nothing of it is
	// judged, and that is no failure.
	StatusNotGiven Status = "not given"
	// StatusError means the source failed; its data must not be used.
	StatusError Status = "error"
)

// SourceStatus reports how one source fared while the snapshot was taken.
type SourceStatus struct {
	Name     string        `json:"name"`
	Status   Status        `json:"status"`
	Detail   string        `json:"detail,omitempty"`
	Duration time.Duration `json:"-"`
}

// Snapshot is everything the rules see. A nil ledger means its source did not
// run or did not succeed; Sources says which and why.
type Snapshot struct {
	// Taken is when collection started.
	Taken time.Time
	// CapturedAt, when set, is when saved evidence was captured (a
	// conntrack listing's --captured-at, or its file's modification
	// time): the report's capture time.
	CapturedAt time.Time
	// NodeName is the Kubernetes Node this snapshot was taken on (the node
	// whose conntrack table was read); empty for cluster-wide snapshots.
	NodeName string

	Kube      *Kube
	Conntrack *Conntrack
	HostLocal *HostLocal
	// CalicoNode is where Calico's CNI plugin on this node takes its node
	// name (source "calico-node").
	CalicoNode *CalicoNode
	// ServiceProxy is what translates Service addresses on this node.
	ServiceProxy *ServiceProxy
	// Calico is Calico's IPAM ledger, cluster-wide (source "calico").
	Calico *Calico
	// Gossip is what gossip clusters say of their members (source
	// "gossip").
	Gossip *Gossip
	// LocalAddresses are the addresses of the host whose conntrack table
	// is read, read live from it (source "host"); nil offline.
	LocalAddresses []netip.Addr

	Sources []SourceStatus

	// ledgers are the ledgers without a field of their own, by the name
	// of the source that collected each (Attach, LedgerOf).
	ledgers map[string]any

	scratch *scratch
}

// Attach records v as the ledger the named source collected into s: a
// ledger without a field of its own, which its rules read back with
// LedgerOf. Adding a ledger so changes nothing in this package but the
// file of its type. A copy of s made before keeps what it had.
func Attach[T any](s *Snapshot, source string, v *T) {
	m := make(map[string]any, len(s.ledgers)+1)
	maps.Copy(m, s.ledgers)
	m[source] = v
	s.ledgers = m
}

// LedgerOf returns the ledger the named source attached to s, nil when it
// attached none (it did not run, or failed) or one of another type.
func LedgerOf[T any](s *Snapshot, source string) *T {
	v, _ := s.ledgers[source].(*T)
	return v
}

// Source returns the status recorded for the named source.
func (s *Snapshot) Source(name string) (SourceStatus, bool) {
	for _, st := range s.Sources {
		if st.Name == name {
			return st, true
		}
	}
	return SourceStatus{}, false
}

// Ready returns nil when every named source was collected with StatusOK, and
// otherwise an error that names each source that was not.
func (s *Snapshot) Ready(names ...string) error {
	if bad := s.NotReady(names...); len(bad) > 0 {
		return fmt.Errorf("sources not ready (%s)", strings.Join(bad, "; "))
	}
	return nil
}

// Absent reports whether the status says the ledger is not here to read
// (unsupported, not given), which is no failure.
func (st Status) Absent() bool { return st == StatusUnsupported || st == StatusNotGiven }

// NotReady returns, for each of the named sources that is not ready, why:
// "name: status: detail".
func (s *Snapshot) NotReady(names ...string) []string {
	var bad []string
	for _, n := range names {
		st, ok := s.Source(n)
		switch {
		case !ok:
			bad = append(bad, n+": not collected")
		case st.Status != StatusOK:
			d := string(st.Status)
			if st.Detail != "" {
				d += ": " + st.Detail
			}
			bad = append(bad, n+": "+d)
		}
	}
	return bad
}

// ServiceProxy is what translates Service addresses on a node, when its
// translation shows in conntrack.
type ServiceProxy struct {
	// Mode is kube-proxy's mode (iptables, nftables, ipvs); By who said
	// it. Both empty when nothing answered.
	Mode, By string
	// Note says what is assumed, when something is.
	Note string
}
