package source

import (
	"context"
	"maps"
	"net/netip"
	"time"

	"github.com/ghostwatch/ghostwatch/snapshot"
)

// Live is a Source that keeps watching its ledger, so that a long-running
// program (the node agent, the cluster controller) collects it again and
// again at little cost, and knows when to: the cluster's objects through
// informers, the conntrack table through its events. The program starts
// it, asks before each pass whether it is ready, takes what changed, and
// collects.
type Live interface {
	Source
	// Start starts watching and returns once started, not once synced;
	// watching ends when ctx does. It is called before Collect. A
	// program that watches only at times (the controller, while it
	// leads) calls it again once the ctx of the last call has ended: the
	// source then starts afresh, its caches empty. One that cannot watch
	// twice says so with an error.
	Start(ctx context.Context) error
	// Ready returns nil when what Collect reads is complete and current,
	// and otherwise why not, naming what is missing ("pods: not listed
	// yet: Forbidden (403) ..."): a pass on it would claim what it cannot
	// know.
	Ready(now time.Time) error
	// Changes returns what changed in the ledger since the last call, and
	// forgets it. A program takes the changes before it collects: a change
	// that lands in between is then in the collection and in the next
	// changes, never in neither.
	Changes() Changes
	// OnChange sets fn, which the source calls after each change, from
	// any goroutine; fn must not block.
	OnChange(fn func())
}

// Settler is a Live source that can say it has an answer: it is ready, or
// it fails, or its ledger was found not to exist here; not while it waits
// for its first (a list the API server has not answered yet). A program
// waits for its sources to settle before its first pass, so that no rule
// is reported skipped while the caches fill.
type Settler interface {
	Settled() bool
}

// Unsure is a Live source that may, for a while, change without saying so
// (its watch could not be set up): while Unsure says so, a program reads
// it afresh rather than take its silence for no change. It may be called
// from any goroutine.
type Unsure interface {
	Unsure() bool
}

// Progresser is a Source that can say, while it collects, what it is
// waiting on ("looking up the pods at 20000 addresses in one list of
// every pod: 12000 pods read in 8s"), so that a status read during a long
// pass says what is slow now rather than what the last pass said; "" when
// it waits on nothing. It may be called from any goroutine.
type Progresser interface {
	Progress() string
}

// Lender is a Live source whose Collect lends the program its own records
// rather than copies of them (every pod of a large cluster, kept current
// per event): they stay unchanged, and the source's events wait, until
// the program calls Return, once the rules are done with them and before
// it collects again. Return must be called after every Collect.
type Lender interface {
	Return()
}

// Changes is what changed in a ledger, or in several.
type Changes struct {
	// Addrs are the addresses the changes mention: of pods and endpoints
	// that came, went or changed, of backends with new flows.
	Addrs map[netip.Addr]struct{}
	// All is true when a change may concern every address: a Service or
	// a Node changed (any flow may now address another frontend), or a
	// ledger lost track of itself.
	All bool
	// Why says what changed, in a word for logs and metrics ("cluster",
	// "new-flow", "events-lost", "holders"); the first cause when there
	// were several.
	Why string
}

// Add records that a changed, because of why.
func (c *Changes) Add(a netip.Addr, why string) {
	if c.Addrs == nil {
		c.Addrs = map[netip.Addr]struct{}{}
	}
	c.Addrs[a.Unmap()] = struct{}{}
	if c.Why == "" {
		c.Why = why
	}
}

// Merge adds o to c.
func (c *Changes) Merge(o Changes) {
	if len(o.Addrs) > 0 {
		if c.Addrs == nil {
			c.Addrs = make(map[netip.Addr]struct{}, len(o.Addrs))
		}
		maps.Copy(c.Addrs, o.Addrs)
	}
	c.All = c.All || o.All
	if c.Why == "" {
		c.Why = o.Why
	}
}

// Empty reports whether nothing changed.
func (c Changes) Empty() bool { return len(c.Addrs) == 0 && !c.All }

// Focuser is a Source that, between full collections, can collect only
// what concerns some changes: the conntrack table's flows to the backends
// that changed, from its index, rather than the whole table.
type Focuser interface {
	// Focus says what the next Collect must read: what concerns c, or,
	// when full, the whole ledger read afresh.
	Focus(c Changes, full bool)
}

// Fresher is a Source that reads afresh, from its source of truth (quorum
// reads of the API server, a gossip cluster's own agent; never a cache),
// what of its ledger a remedy's last re-check names, into s: a copy of the
// snapshot the findings came from, whose part of this source it replaces.
// When q names nothing of its ledger it leaves s as it is.
type Fresher interface {
	Fresh(ctx context.Context, q snapshot.Query, s *snapshot.Snapshot) error
}
