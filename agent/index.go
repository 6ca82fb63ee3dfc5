package agent

import (
	"net/netip"
	"sync"
	"time"

	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source/conntrack"
)

// flowIndex holds this node's DNATed conntrack entries by backend address
// (and its untranslated UDP entries by destination, which may be a Service
// frontend the kernel never translated),
// so that when a backend dies the agent judges the flows to that backend
// and no others, without reading the table again. A full audit seeds it;
// conntrack new and destroy events keep it current in between.
//
// Records (snapshot.FlowKey and snapshot.FlowDetails) hold no pointers, so
// the garbage collector does not scan a table of a million flows.
//
// Each record of a flow without a kernel start time also keeps when the
// agent first saw it (snapshot.Flow.Seen): the flow started no later. It
// is carried from one seed to the next only while no event was lost, so
// that it always belongs to the very entry it was stamped on: a destroy
// and a new entry of the same tuple replace the record.
type flowIndex struct {
	// now is the clock that stamps what the agent sees.
	now       func() time.Time
	mu        sync.Mutex
	byBackend map[[16]byte]backendFlows
	n         int
	// valid is false until a seed completes and after events were lost:
	// then only a full audit may judge the table.
	valid bool
	// seeding buffers the events that arrive while a dump runs; they are
	// replayed on the seeded index, so none is lost between the two.
	seeding bool
	// carry is true while a seed may take the Seen times of the index it
	// replaces: that index was valid when the seed began.
	carry   bool
	pending []conntrack.Event
	next    map[[16]byte]backendFlows
	nextN   int
	// dirty holds backends of flows created since the last audit: a new
	// flow to a dead backend is judged at the next audit.
	dirty map[[16]byte]struct{}
}

// backendFlows holds the indexed flows of one backend: each flow's key
// and, under it, the rest of its packed record but the reply source (the
// backend itself) and the timeout and mark (stale as soon as they are
// read): 40 bytes of key and 40 of details a flow.
type backendFlows map[snapshot.FlowKey]snapshot.FlowDetails

// indexed reports whether the index keeps f: a DNATed flow, or a UDP flow,
// whose reply source is its destination.
func indexed(f *snapshot.Flow) bool {
	return f.DNAT() || f.Proto == snapshot.ProtoUDP
}

func newFlowIndex(now func() time.Time) *flowIndex {
	if now == nil {
		now = time.Now
	}
	return &flowIndex{now: now, byBackend: map[[16]byte]backendFlows{}, dirty: map[[16]byte]struct{}{}}
}

// stamp sets f.Seen to now when the kernel gave the flow no start time.
func stamp(f *snapshot.Flow, now time.Time) {
	if f.Start.IsZero() {
		f.Seen = now
	}
}

// recordOf splits f into what the index keeps: its backend, its key and
// its details.
func recordOf(f *snapshot.Flow) (backend [16]byte, k snapshot.FlowKey, d snapshot.FlowDetails) {
	var p snapshot.PackedFlow
	p.Pack(f)
	return p.ReplySrc, p.FlowKey, p.FlowDetails
}

func flowOf(backend [16]byte, k snapshot.FlowKey, d snapshot.FlowDetails) snapshot.Flow {
	p := snapshot.PackedFlow{FlowKey: k, ReplySrc: backend, FlowDetails: d}
	return p.Unpack()
}

func put(m map[[16]byte]backendFlows, f *snapshot.Flow) (added bool) {
	b, k, d := recordOf(f)
	flows := m[b]
	if flows == nil {
		flows = backendFlows{}
		m[b] = flows
	}
	_, had := flows[k]
	flows[k] = d
	return !had
}

func remove(m map[[16]byte]backendFlows, f *snapshot.Flow) (removed bool) {
	b := f.Reply.Src.As16()
	flows := m[b]
	k := f.Key()
	if _, ok := flows[k]; !ok {
		return false
	}
	delete(flows, k)
	if len(flows) == 0 {
		delete(m, b)
	}
	return true
}

// beginSeed starts a new generation: events are buffered from now on, and
// flows passed to seed go to the new generation.
func (ix *flowIndex) beginSeed() {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ix.seeding, ix.pending = true, nil
	ix.next, ix.nextN = map[[16]byte]backendFlows{}, 0
	ix.carry = ix.valid
}

// seed adds one flow of the dump; it is called from the dump's callback,
// on the goroutine running the audit, before the rules see the flow. It
// sets the flow's Seen: when the index it replaces, valid since, holds the
// same entry (its key and kernel ID), the time that index first saw it;
// else now, when the dump read it.
func (ix *flowIndex) seed(f *snapshot.Flow) {
	if !indexed(f) {
		return
	}
	now := ix.now()
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if ix.next == nil {
		return
	}
	if f.Start.IsZero() {
		f.Seen = now
		if ix.carry && f.ID != 0 {
			if d, ok := ix.byBackend[f.Reply.Src.As16()][f.Key()]; ok && d.ID() == f.ID {
				if seen := d.Seen(); !seen.IsZero() && seen.Before(now) {
					f.Seen = seen
				}
			}
		}
	}
	if put(ix.next, f) {
		ix.nextN++
	}
}

// endSeed installs the new generation when the dump was complete, replays
// the events that came during it, and makes the index valid. An incomplete
// dump leaves the index invalid.
func (ix *flowIndex) endSeed(complete bool) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if complete {
		ix.byBackend, ix.n = ix.next, ix.nextN
		ix.valid = true
		for i := range ix.pending {
			ix.applyLocked(&ix.pending[i])
		}
	} else {
		ix.valid = false
	}
	ix.seeding, ix.pending, ix.next, ix.nextN, ix.carry = false, nil, nil, 0, false
}

// apply records one event. A new entry is stamped as seen now.
func (ix *flowIndex) apply(e conntrack.Event) {
	if !indexed(&e.Flow) {
		return
	}
	if e.Type == conntrack.EventNew {
		stamp(&e.Flow, ix.now())
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if ix.seeding {
		ix.pending = append(ix.pending, e)
		return
	}
	ix.applyLocked(&e)
}

func (ix *flowIndex) applyLocked(e *conntrack.Event) {
	switch e.Type {
	case conntrack.EventNew:
		if put(ix.byBackend, &e.Flow) {
			ix.n++
		}
		ix.dirty[e.Flow.Reply.Src.As16()] = struct{}{}
	case conntrack.EventDestroy:
		if remove(ix.byBackend, &e.Flow) {
			ix.n--
		}
	}
}

// forget drops a flow the agent deleted.
func (ix *flowIndex) forget(f *snapshot.Flow) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if remove(ix.byBackend, f) {
		ix.n--
	}
}

// invalidate marks the index as missing events: until the next seed, only
// a full audit may judge the table.
func (ix *flowIndex) invalidate() {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ix.valid, ix.carry = false, false
}

func (ix *flowIndex) isValid() bool {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	return ix.valid
}

func (ix *flowIndex) len() int {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	return ix.n
}

// takeDirty returns and clears the backends of flows created since the
// last call.
func (ix *flowIndex) takeDirty() []netip.Addr {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	out := make([]netip.Addr, 0, len(ix.dirty))
	for b := range ix.dirty {
		out = append(out, netip.AddrFrom16(b).Unmap())
		delete(ix.dirty, b)
	}
	return out
}

// flowsTo returns the indexed flows whose backend is one of backends.
func (ix *flowIndex) flowsTo(backends []netip.Addr) []snapshot.Flow {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	var out []snapshot.Flow
	seen := map[[16]byte]bool{}
	for _, a := range backends {
		b := a.As16()
		if seen[b] {
			continue
		}
		seen[b] = true
		for k, v := range ix.byBackend[b] {
			out = append(out, flowOf(b, k, v))
		}
	}
	return out
}

// all returns every indexed flow.
func (ix *flowIndex) all() []snapshot.Flow {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	out := make([]snapshot.Flow, 0, ix.n)
	for b, flows := range ix.byBackend {
		for k, v := range flows {
			out = append(out, flowOf(b, k, v))
		}
	}
	return out
}
