package history

import (
	"net/netip"
	"slices"
	"sync"
	"time"
	"unique"

	"github.com/ghostwatch/ghostwatch/snapshot"
)

// How a tenure ended, as Tenure.Ended says it.
const (
	// EndedDeleted: the pod was deleted.
	EndedDeleted = "deleted"
	// EndedDeletedUnseen: the pod was deleted while the watch was away
	// (a relist no longer found it); when is when the relist said so.
	EndedDeletedUnseen = "deleted-unseen"
	// EndedSucceeded and EndedFailed: the pod finished (its sandbox, and
	// its address, are released); a failed pod's reason says more
	// (Evicted).
	EndedSucceeded = "succeeded"
	EndedFailed    = "failed"
	// EndedReaddressed: the pod reported another address.
	EndedReaddressed = "readdressed"
)

// Tenure is one pod's hold on one address.
type Tenure struct {
	IP        netip.Addr `json:"ip"`
	Namespace string     `json:"namespace"`
	Pod       string     `json:"pod"`
	UID       string     `json:"uid"`
	Node      string     `json:"node,omitempty"`
	// From is the pod's start time (status.startTime, else its creation):
	// the earliest it could have held the address.
	From time.Time `json:"from"`
	// Until is when the watch saw the tenure end; zero while it holds.
	Until time.Time `json:"until,omitzero"`
	// Ended says how (EndedDeleted, ...); "" while the pod holds the
	// address. Reason is a failed pod's status.reason.
	Ended  string `json:"ended,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// Holding reports whether the pod still holds the address.
func (t Tenure) Holding() bool { return t.Ended == "" }

// Defaults of Limits.
const (
	// DefaultPerAddress keeps the last 8 tenures of an address: a
	// rolling deploy that reuses addresses shows several generations.
	DefaultPerAddress = 8
	// DefaultEnded bounds the ended tenures of the whole book: at about
	// 130 bytes each, 64 MiB at most however fast pods come and go.
	DefaultEnded = 500_000
)

// Limits bound a Book's memory. A pod that holds its address is never
// forgotten; ended tenures go oldest first.
type Limits struct {
	// PerAddress is the most tenures kept of one address (default
	// DefaultPerAddress).
	PerAddress int
	// Ended is the most ended tenures kept in all (default DefaultEnded).
	Ended int
}

// Book is the record of tenures, by address. Its methods are safe for
// concurrent use.
type Book struct {
	limits Limits

	mu     sync.Mutex
	byIP   map[netip.Addr][]tenure
	seq    uint64
	ended  []endedRef // oldest first; entries may be stale
	nEnded int
	since  time.Time
}

// tenure is a Tenure as the book keeps it: strings that repeat interned,
// times as Unix nanoseconds.
type tenure struct {
	namespace, node, reason unique.Handle[string]
	pod, uid                string
	from, until             int64
	seq                     uint64
	ended                   unique.Handle[string]
}

type endedRef struct {
	ip  netip.Addr
	seq uint64
}

var none = unique.Make("")

// NewBook returns an empty book, started at since.
func NewBook(limits Limits, since time.Time) *Book {
	if limits.PerAddress <= 0 {
		limits.PerAddress = DefaultPerAddress
	}
	if limits.Ended <= 0 {
		limits.Ended = DefaultEnded
	}
	return &Book{limits: limits, byIP: map[netip.Addr][]tenure{}, since: since}
}

// Since is when the book started: nothing before it was seen, and a pod
// gone before it is not in it.
func (b *Book) Since() time.Time { return b.since }

// Set records a pod as the API server reports it at now: a tenure begins
// at each of its addresses it did not hold yet, and ends when it has
// finished. old is what the pod was before (nil for a pod added): an
// address it no longer reports ends there. A hostNetwork pod reports its
// node's address, which it does not hold: it is not recorded.
func (b *Book) Set(old, p *snapshot.Pod, reason string, now time.Time) {
	if p.HostNetwork {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if old != nil {
		for _, ip := range old.IPs {
			if !p.HasIP(ip) {
				b.end(ip, p.UID, EndedReaddressed, "", now)
			}
		}
	}
	for _, ip := range p.IPs {
		if !b.holds(ip, p.UID) {
			b.begin(ip, p)
		}
		switch p.Phase {
		case snapshot.PodSucceeded:
			b.end(ip, p.UID, EndedSucceeded, "", now)
		case snapshot.PodFailed:
			b.end(ip, p.UID, EndedFailed, reason, now)
		}
	}
}

// Delete records a pod deleted at now; unseen says the watch did not see
// it go (a relist found it gone).
func (b *Book) Delete(p *snapshot.Pod, unseen bool, now time.Time) {
	how := EndedDeleted
	if unseen {
		how = EndedDeletedUnseen
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, ip := range p.IPs {
		b.end(ip, p.UID, how, "", now)
	}
}

// holds reports whether uid has a tenure of ip, held or ended.
func (b *Book) holds(ip netip.Addr, uid string) bool {
	return slices.ContainsFunc(b.byIP[ip], func(t tenure) bool { return t.uid == uid })
}

func (b *Book) begin(ip netip.Addr, p *snapshot.Pod) {
	b.seq++
	ts := append(b.byIP[ip], tenure{
		namespace: unique.Make(p.Namespace), node: unique.Make(p.Node), reason: none, ended: none,
		pod: p.Name, uid: p.UID, from: p.Since().UnixNano(), seq: b.seq,
	})
	slices.SortStableFunc(ts, func(x, y tenure) int {
		if x.from != y.from {
			return cmpInt(x.from, y.from)
		}
		return cmpInt(int64(x.seq), int64(y.seq))
	})
	// Over the address's limit: its oldest ended tenure goes.
	if len(ts) > b.limits.PerAddress {
		if i := slices.IndexFunc(ts, func(t tenure) bool { return t.ended != none }); i >= 0 {
			ts = slices.Delete(ts, i, i+1)
			b.nEnded--
		}
	}
	b.byIP[ip] = ts
}

// end ends uid's tenure of ip, unless it has ended already.
func (b *Book) end(ip netip.Addr, uid, how, reason string, now time.Time) {
	ts := b.byIP[ip]
	i := slices.IndexFunc(ts, func(t tenure) bool { return t.uid == uid })
	if i < 0 || ts[i].ended != none {
		return
	}
	ts[i].ended, ts[i].reason, ts[i].until = unique.Make(how), unique.Make(reason), now.UnixNano()
	b.ended = append(b.ended, endedRef{ip, ts[i].seq})
	b.nEnded++
	for b.nEnded > b.limits.Ended {
		b.evictOldest()
	}
	// The queue holds stale entries of tenures an address's limit
	// dropped: rebuild it when they outnumber the live ones.
	if len(b.ended) > 2*b.limits.Ended {
		b.compact()
	}
}

// evictOldest forgets the ended tenure that ended first.
func (b *Book) evictOldest() {
	for len(b.ended) > 0 {
		r := b.ended[0]
		b.ended = b.ended[1:]
		ts := b.byIP[r.ip]
		i := slices.IndexFunc(ts, func(t tenure) bool { return t.seq == r.seq })
		if i < 0 {
			continue // gone already
		}
		ts = slices.Delete(ts, i, i+1)
		if len(ts) == 0 {
			delete(b.byIP, r.ip)
		} else {
			b.byIP[r.ip] = ts
		}
		b.nEnded--
		return
	}
	b.nEnded = 0
}

func (b *Book) compact() {
	live := b.ended[:0:0]
	for _, r := range b.ended {
		if slices.ContainsFunc(b.byIP[r.ip], func(t tenure) bool { return t.seq == r.seq }) {
			live = append(live, r)
		}
	}
	b.ended = live
}

// Of returns the tenures of ip, oldest first.
func (b *Book) Of(ip netip.Addr) []Tenure {
	b.mu.Lock()
	defer b.mu.Unlock()
	ts := b.byIP[ip]
	out := make([]Tenure, 0, len(ts))
	for _, t := range ts {
		out = append(out, t.public(ip))
	}
	return out
}

// public is t as Of returns it.
func (t tenure) public(ip netip.Addr) Tenure {
	o := Tenure{IP: ip, Namespace: t.namespace.Value(), Pod: t.pod, UID: t.uid, Node: t.node.Value(),
		From: time.Unix(0, t.from).UTC(), Ended: t.ended.Value(), Reason: t.reason.Value()}
	if t.until != 0 {
		o.Until = time.Unix(0, t.until).UTC()
	}
	return o
}

// Each calls fn with every tenure the book keeps, address by address,
// oldest first within each, holding the book meanwhile: fn must not call
// the book.
func (b *Book) Each(fn func(Tenure)) {
	b.mu.Lock()
	defer b.mu.Unlock()
	ips := make([]netip.Addr, 0, len(b.byIP))
	for ip := range b.byIP {
		ips = append(ips, ip)
	}
	slices.SortFunc(ips, netip.Addr.Compare)
	for _, ip := range ips {
		for _, t := range b.byIP[ip] {
			fn(t.public(ip))
		}
	}
}

// Len returns how many addresses the book knows and how many tenures it
// keeps, of which ended.
func (b *Book) Len() (addresses, tenures, ended int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, ts := range b.byIP {
		tenures += len(ts)
	}
	return len(b.byIP), tenures, b.nEnded
}

func cmpInt(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Merge merges what several books told of the same pods: one tenure per
// address and pod UID, with the earliest start any book saw, ended when
// any book saw it end; by address, then oldest first.
func Merge(told ...[]Tenure) []Tenure {
	type key struct {
		ip  netip.Addr
		uid string
	}
	at := map[key]int{}
	out := []Tenure{}
	for _, ts := range told {
		for _, t := range ts {
			k := key{t.IP, t.UID}
			i, ok := at[k]
			if !ok {
				at[k] = len(out)
				out = append(out, t)
				continue
			}
			old := &out[i]
			if t.From.Before(old.From) {
				old.From = t.From
			}
			if old.Holding() && !t.Holding() {
				old.Until, old.Ended, old.Reason = t.Until, t.Ended, t.Reason
			}
		}
	}
	slices.SortStableFunc(out, func(a, b Tenure) int {
		if c := a.IP.Compare(b.IP); c != 0 {
			return c
		}
		return a.From.Compare(b.From)
	})
	return out
}
