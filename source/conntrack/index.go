package conntrack

import (
	"net/netip"
	"sync"
	"time"

	"github.com/ghostwatch/ghostwatch/snapshot"
)

// flowIndex holds this node's DNATed conntrack entries by backend address
// (and its untranslated UDP entries by destination, which may be a Service
// frontend the kernel never translated), so that when a backend dies the
// flows to that backend are judged and no others, without reading the
// table again. A full dump seeds it; conntrack new and destroy events keep
// it current in between.
//
// A backend's flows are kept compactly: what they share (the frontend, the
// backend's port, where replies go) once per backend as a
// snapshot.FlowRoute, and of each flow its client, its port and the rest
// (indexRecord), in a packed store sorted by client: 24 bytes a flow for
// IPv4, 36 for IPv6, no pointers, so that the garbage collector does not
// scan a table of a million flows. A seed
// updates the records in place and then sweeps those the dump did not
// see: a full dump never holds two copies of the index at once.
//
// Each record of a flow without a kernel start time also keeps when the
// index first saw it (snapshot.Flow.Seen): the flow started no later. It
// is carried from one seed to the next only while no event was lost since,
// so that it always belongs to the very entry it was stamped on: a destroy
// and a new entry of the same tuple replace the record.
type flowIndex struct {
	// now is the clock that stamps what the index sees.
	now       func() time.Time
	mu        sync.Mutex
	byBackend map[[16]byte]*backendFlows
	n         int
	// valid is false until a seed completes and after events were lost:
	// then only a full dump may be judged.
	valid bool
	// seeding buffers the events that arrive while a dump runs; they are
	// replayed on the seeded index, so none is lost between the two.
	seeding bool
	// gen is the generation a seed marks the records it sees with; the
	// records of earlier ones are swept when it ends complete. Records keep
	// it modulo 256: unswept counts the seeds begun since the last sweep,
	// and the index is dropped before a generation could come round again.
	gen     uint32
	unswept int
	// carry is true while a seed may keep the Seen times of the records
	// it finds: the index was valid when the seed began.
	carry   bool
	pending []Event
	// pendingLost is true when more events came during a seed than
	// maxPending: the seed cannot be made current, and the index stays
	// invalid until the next.
	pendingLost bool
	// dirty holds backends of flows created since the last call of
	// takeDirty or takeFresh: a new flow to a dead backend is judged at the
	// next pass. fresh holds those flows themselves, up to maxFresh
	// (freshLost: more came).
	dirty     map[[16]byte]struct{}
	fresh     []snapshot.Flow
	freshLost bool
}

// backendFlows holds the indexed flows of one backend: IPv4 flows keyed by
// their client's 4 bytes, IPv6 ones by its 16, each family in a packed
// store, the IPv6 one made when the backend has an IPv6 flow (a backend's
// flows are of one family).
type backendFlows struct {
	routes snapshot.Routes
	v4     packed[key4]
	v6     *packed[key6]
	// lent is true once a pass's snapshot holds b (lend): b never changes
	// again, and the index changes a copy of it in its place (own).
	lent bool
}

// clone returns a copy of b that shares nothing with it and is not lent.
func (b *backendFlows) clone() *backendFlows {
	c := &backendFlows{routes: b.routes.Clone(), v4: b.v4.clone()}
	if b.v6 != nil {
		v6 := b.v6.clone()
		c.v6 = &v6
	}
	return c
}

// own returns backend's flows to change: b, or, when a pass's snapshot
// holds b, a copy of it that takes its place.
func (ix *flowIndex) own(backend [16]byte, b *backendFlows) *backendFlows {
	if !b.lent {
		return b
	}
	c := b.clone()
	ix.byBackend[backend] = c
	return c
}

// indexRecord is one flow's own part (snapshot.FlowRest without its
// timeout, stale as soon as read), and the generation of the seed that last
// saw it, modulo 256: 16 bytes. The start (or first sighting) is kept in
// whole seconds, rounded up: a flow reads as no older than it is, so that
// it is never proven older than a pod for want of a fraction of a second.
type indexRecord struct {
	start        uint32 // seconds since recordEpoch, rounded up; 0: none
	id           uint32
	replyDstPort uint16
	status       uint16
	state        uint8
	flags        uint8 // recordSeen, recordDead, recordKept
	gen          uint8
}

const (
	// recordSeen: start is when the index first saw the flow, which has
	// no kernel start time.
	recordSeen = 1 << iota
	// recordDead: removed, until its packed store is rebuilt.
	recordDead
	// recordKept: the last pass that judged the flow kept it for the
	// rules (lend).
	recordKept
)

func (r indexRecord) dead() bool { return r.flags&recordDead != 0 }

// recordEpoch is when indexRecord's seconds count from.
var recordEpoch = time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()

func recordOf(rest snapshot.FlowRest, gen uint32) indexRecord {
	p := rest.Parts()
	r := indexRecord{id: p.ID, gen: uint8(gen), replyDstPort: p.ReplyDstPort, status: p.Status, state: p.State}
	if p.Seen {
		r.flags |= recordSeen
	}
	if p.Start > recordEpoch {
		r.start = uint32((p.Start - recordEpoch + int64(time.Second) - 1) / int64(time.Second))
	}
	return r
}

func (r indexRecord) rest() snapshot.FlowRest {
	p := snapshot.RestParts{ID: r.id, ReplyDstPort: r.replyDstPort, Status: r.status, State: r.state, Seen: r.flags&recordSeen != 0}
	if r.start != 0 {
		p.Start = recordEpoch + int64(r.start)*int64(time.Second)
	}
	return p.Rest()
}

// seenAt is the record's first sighting, or zero.
func (r indexRecord) seenAt() time.Time {
	if r.flags&recordSeen == 0 || r.start == 0 {
		return time.Time{}
	}
	return time.Unix(0, recordEpoch+int64(r.start)*int64(time.Second)).UTC()
}

func (b *backendFlows) len() int { return b.v4.len() + b.v6.len() }

func (b *backendFlows) get(k snapshot.FrontendKey) (indexRecord, bool) {
	if isV4Key(k) {
		return b.v4.get(k4(k))
	}
	return b.v6.get(key6{k.Src, k.SrcPort, k.Route})
}

// put records r under k; during a seed, a key new to its store waits to
// be settled (packed.putSeed).
func (b *backendFlows) put(k snapshot.FrontendKey, is4 bool, r indexRecord, seeding bool) (added bool) {
	switch {
	case is4 && seeding:
		return b.v4.putSeed(k4(k), r)
	case is4:
		return b.v4.put(k4(k), r)
	}
	if b.v6 == nil {
		b.v6 = &packed[key6]{}
	}
	if seeding {
		return b.v6.putSeed(key6{k.Src, k.SrcPort, k.Route}, r)
	}
	return b.v6.put(key6{k.Src, k.SrcPort, k.Route}, r)
}

func (b *backendFlows) remove(k snapshot.FrontendKey, is4 bool) bool {
	if is4 {
		return b.v4.remove(k4(k))
	}
	return b.v6.remove(key6{k.Src, k.SrcPort, k.Route})
}

// isV4Key reports whether k's client is an IPv4 address (IPv4-mapped).
func isV4Key(k snapshot.FrontendKey) bool {
	return k.Src[10] == 0xff && k.Src[11] == 0xff && [10]byte(k.Src[:10]) == [10]byte{}
}

func k4(k snapshot.FrontendKey) key4 {
	return makeKey4([4]byte(k.Src[12:]), k.SrcPort, k.Route)
}

// sweep removes the records of other generations than gen, and returns
// how many it removed.
func (b *backendFlows) sweep(gen uint32) int {
	return b.v4.sweep(uint8(gen)) + b.v6.sweep(uint8(gen))
}

// each calls fn with each flow of b to backend, in one reused Flow.
func (b *backendFlows) each(backend [16]byte, f *snapshot.Flow, fn func(*snapshot.Flow)) {
	b.v4.each(func(k key4, r indexRecord) {
		b.join4(backend, k, r, f)
		fn(f)
	})
	b.v6.each(func(k key6, r indexRecord) {
		b.join6(backend, k, r, f)
		fn(f)
	})
}

// join4 and join6 set *f to the flow of b to backend keyed k.
func (b *backendFlows) join4(backend [16]byte, k key4, r indexRecord, f *snapshot.Flow) {
	addr, port, route := k.parts()
	var src [16]byte
	src[10], src[11] = 0xff, 0xff
	copy(src[12:], addr[:])
	snapshot.JoinFlow(backend, b.routes.At(route), src, port, r.rest(), f)
}

func (b *backendFlows) join6(backend [16]byte, k key6, r indexRecord, f *snapshot.Flow) {
	snapshot.JoinFlow(backend, b.routes.At(k.route), k.src, k.srcPort, r.rest(), f)
}

// indexed reports whether the index keeps f: a DNATed flow, or a UDP flow,
// whose reply source is its destination.
func indexed(f *snapshot.Flow) bool {
	return f.DNAT() || f.Proto == snapshot.ProtoUDP
}

func newFlowIndex(now func() time.Time) *flowIndex {
	if now == nil {
		now = time.Now
	}
	return &flowIndex{now: now, byBackend: map[[16]byte]*backendFlows{}, dirty: map[[16]byte]struct{}{}}
}

// locate returns where f's record lives: its backend's flows (made when
// create is true; the index's own, never a lent one), its key there, its
// own part, and its backend.
func (ix *flowIndex) locate(f *snapshot.Flow, create bool) (*backendFlows, snapshot.FrontendKey, snapshot.FlowRest, [16]byte) {
	backend, route, src, sport, rest := snapshot.SplitFlow(f)
	b := ix.byBackend[backend]
	if b == nil {
		if !create {
			return nil, snapshot.FrontendKey{}, rest, backend
		}
		b = &backendFlows{}
		ix.byBackend[backend] = b
	}
	// Every caller changes b, or may: Index adds a route it has not seen.
	b = ix.own(backend, b)
	return b, snapshot.FrontendKey{Src: src, SrcPort: sport, Route: b.routes.Index(route)}, rest, backend
}

// putLocked records f in generation gen, as a dump's flow when seeding,
// as kept for the rules when kept is true; it reports whether f is new.
func (ix *flowIndex) putLocked(f *snapshot.Flow, gen uint32, seeding, kept bool) bool {
	b, k, rest, _ := ix.locate(f, true)
	r := recordOf(rest, gen)
	if kept {
		r.flags |= recordKept
	}
	if b.put(k, f.Orig.Src.Is4(), r, seeding) {
		ix.n++
		return true
	}
	return false
}

func (ix *flowIndex) removeLocked(f *snapshot.Flow) {
	b, k, _, backend := ix.locate(f, false)
	if b == nil {
		return
	}
	if !b.remove(k, f.Orig.Src.Is4()) {
		return
	}
	ix.n--
	if b.len() == 0 {
		delete(ix.byBackend, backend)
	}
}

// beginSeed starts a new generation: events are buffered from now on, and
// flows passed to seed are marked with it.
func (ix *flowIndex) beginSeed() {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ix.seeding, ix.pending, ix.pendingLost = true, nil, false
	ix.gen++
	if ix.unswept++; ix.unswept >= maxUnswept {
		// Seeds keep failing: a record this old could alias the new
		// generation. The index is not valid anyway; the next complete
		// seed builds it again.
		ix.byBackend, ix.n, ix.valid, ix.unswept = map[[16]byte]*backendFlows{}, 0, false, 1
	}
	ix.carry = ix.valid
}

// maxUnswept is how many seeds may begin without one ending complete
// before the index is dropped: below 256, the generations records keep.
const maxUnswept = 200

// seed records one flow of the dump, before the rules see it, with
// whether keep keeps it for the rules (recordKept), and reports whether it
// did: not for a flow the index does not keep, nor outside a seed; the
// caller judges that one itself. It sets the flow's Seen, before keep
// judges it: when the index, valid when the seed began, holds the same
// entry (its key and kernel ID), the time it first saw it; else now.
func (ix *flowIndex) seed(f *snapshot.Flow, keep func(*snapshot.Flow) bool) bool {
	if !indexed(f) {
		return false
	}
	now := ix.now()
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if !ix.seeding {
		return false
	}
	if f.Start.IsZero() {
		f.Seen = now
		if ix.carry && f.ID != 0 {
			if b, k, _, _ := ix.locate(f, false); b != nil {
				if r, ok := b.get(k); ok && r.id == f.ID {
					if seen := r.seenAt(); !seen.IsZero() && seen.Before(now) {
						f.Seen = seen
					}
				}
			}
		}
	}
	ix.putLocked(f, ix.gen, true, keep != nil && keep(f))
	return true
}

// maxPending bounds the events a seed holds back while the dump runs: a
// mass deletion (a dead backend's million flows deleted) sends as many
// events, and they must not all wait in memory. Beyond it the seed is
// given up, as when events are lost.
const maxPending = 1 << 16

// endSeed sweeps the records the dump did not see when it was complete,
// replays the events that came during it, and makes the index valid; it
// returns whether it is. An incomplete dump leaves the index invalid (a mix
// of what the dump saw and what it did not reach), and so does a seed
// during which more than maxPending events came, until the next seed.
func (ix *flowIndex) endSeed(complete bool) bool {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	defer func() { ix.seeding, ix.pending, ix.carry, ix.pendingLost = false, nil, false, false }()
	for _, b := range ix.byBackend {
		ix.n -= b.v4.settle() + b.v6.settle()
	}
	if complete && !ix.pendingLost {
		ix.unswept = 0
		for backend, b := range ix.byBackend {
			if b.lent {
				// The dump saw none of its flows: a flow it saw would
				// have made the index change a copy in its place.
				ix.n -= b.len()
				delete(ix.byBackend, backend)
				continue
			}
			ix.n -= b.sweep(ix.gen)
			if b.len() == 0 {
				delete(ix.byBackend, backend)
			}
			b.v4.fit()
			b.v6.fit()
		}
		ix.valid = true
		for i := range ix.pending {
			ix.applyLocked(&ix.pending[i])
		}
	} else {
		ix.valid = false
	}
	return ix.valid
}

// apply records one event. A new entry is stamped as seen now.
func (ix *flowIndex) apply(e Event) {
	if !indexed(&e.Flow) {
		return
	}
	if e.Type == EventNew && e.Flow.Start.IsZero() {
		e.Flow.Seen = ix.now()
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if ix.seeding {
		switch {
		case ix.pendingLost:
		case len(ix.pending) < maxPending:
			ix.pending = append(ix.pending, e)
		default:
			ix.pending, ix.pendingLost = nil, true
		}
		return
	}
	ix.applyLocked(&e)
}

func (ix *flowIndex) applyLocked(e *Event) {
	switch e.Type {
	case EventNew:
		ix.putLocked(&e.Flow, ix.gen, false, false)
		ix.dirty[e.Flow.Reply.Src.As16()] = struct{}{}
		if len(ix.fresh) < maxFresh {
			ix.fresh = append(ix.fresh, e.Flow)
		} else {
			ix.freshLost = true
		}
	case EventDestroy:
		ix.removeLocked(&e.Flow)
	}
}

// forget drops a flow that was deleted.
func (ix *flowIndex) forget(f *snapshot.Flow) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ix.removeLocked(f)
}

// invalidate marks the index as missing events: until the next seed, only
// a full dump may be judged.
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

// maxFresh bounds the new flows the index holds for takeFresh: beyond it,
// only their backends are kept, and all of those backends' flows are
// judged.
const maxFresh = 4096

// takeFresh returns and clears the flows created since the last call
// (fresh), and their backends; complete is false when more came than
// maxFresh, and fresh holds only some of them.
func (ix *flowIndex) takeFresh(fresh []snapshot.Flow) (_ []snapshot.Flow, backends []netip.Addr, complete bool) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	fresh = append(fresh[:0], ix.fresh...)
	complete = !ix.freshLost
	ix.fresh, ix.freshLost = ix.fresh[:0], false
	return fresh, ix.takeDirtyLocked(), complete
}

// takeDirty returns and clears the backends of flows created since the
// last call.
func (ix *flowIndex) takeDirty() []netip.Addr {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ix.fresh, ix.freshLost = ix.fresh[:0], false
	return ix.takeDirtyLocked()
}

func (ix *flowIndex) takeDirtyLocked() []netip.Addr {
	out := make([]netip.Addr, 0, len(ix.dirty))
	for b := range ix.dirty {
		out = append(out, netip.AddrFrom16(b).Unmap())
		delete(ix.dirty, b)
	}
	return out
}

// each calls fn with every indexed flow whose backend is one of backends
// (every indexed flow when all is true), in one reused Flow, under the
// index's lock: fn must not call the index.
func (ix *flowIndex) each(backends []netip.Addr, all bool, fn func(*snapshot.Flow)) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	var f snapshot.Flow
	ix.visitLocked(backends, all, func(backend [16]byte, b *backendFlows) { b.each(backend, &f, fn) })
}

// visitLocked calls visit with the flows of each of backends the index
// holds, once each (of every backend when all is true), under the index's
// lock. visit may put another store in a backend's place (own).
func (ix *flowIndex) visitLocked(backends []netip.Addr, all bool, visit func([16]byte, *backendFlows)) {
	if all {
		for backend, b := range ix.byBackend {
			visit(backend, b)
		}
		return
	}
	seen := map[[16]byte]bool{}
	for _, a := range backends {
		backend := a.As16()
		if seen[backend] {
			continue
		}
		seen[backend] = true
		if b := ix.byBackend[backend]; b != nil {
			visit(backend, b)
		}
	}
}

// hasDirty reports whether flows were created since the last takeDirty.
func (ix *flowIndex) hasDirty() bool {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	return len(ix.dirty) > 0
}
