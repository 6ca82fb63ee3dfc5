package agent

import (
	"net/netip"
	"sync"
	"time"

	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source/conntrack"
)

// flowIndex holds this node's DNATed conntrack entries by backend address,
// so that when a backend dies the agent judges the flows to that backend
// and no others, without reading the table again. A full audit seeds it;
// conntrack new and destroy events keep it current in between.
//
// Records hold no pointers, so the garbage collector does not scan a table
// of a million flows.
type flowIndex struct {
	mu        sync.Mutex
	byBackend map[[16]byte]map[indexKey]indexVal
	n         int
	// valid is false until a seed completes and after events were lost:
	// then only a full audit may judge the table.
	valid bool
	// seeding buffers the events that arrive while a dump runs; they are
	// replayed on the seeded index, so none is lost between the two.
	seeding bool
	pending []conntrack.Event
	next    map[[16]byte]map[indexKey]indexVal
	nextN   int
	// dirty holds backends of flows created since the last audit: a new
	// flow to a dead backend is judged at the next audit.
	dirty map[[16]byte]struct{}
}

// indexKey is what identifies an entry to the kernel: the original tuple
// and the zone.
type indexKey struct {
	src, dst         [16]byte
	srcPort, dstPort uint16
	zone             uint16
	proto            snapshot.Proto
}

// indexVal is the rest a rule needs to judge the flow and a remedy needs to
// delete exactly it.
type indexVal struct {
	replyDst    [16]byte
	start       int64
	id          uint32
	status      uint32
	backendPort uint16
	replyDPort  uint16
	// state is the kernel's state number (conntrack.StateNumber), or
	// noState for a protocol without states: a string would put a pointer
	// in every record.
	state uint8
	is4   bool
}

// noState marks the state of a flow whose protocol has none (UDP).
const noState = 0xff

func newFlowIndex() *flowIndex {
	return &flowIndex{byBackend: map[[16]byte]map[indexKey]indexVal{}, dirty: map[[16]byte]struct{}{}}
}

func keyOf(f *snapshot.Flow) indexKey {
	return indexKey{src: f.Orig.Src.As16(), dst: f.Orig.Dst.As16(), srcPort: f.Orig.SrcPort, dstPort: f.Orig.DstPort,
		zone: f.Zone, proto: f.Proto}
}

func valOf(f *snapshot.Flow) indexVal {
	v := indexVal{replyDst: f.Reply.Dst.As16(), id: f.ID, status: f.Status, backendPort: f.Reply.SrcPort,
		replyDPort: f.Reply.DstPort, state: noState, is4: f.Orig.Src.Is4()}
	if n, ok := conntrack.StateNumber(f.Proto, f.State); ok {
		v.state = n
	}
	if !f.Start.IsZero() {
		v.start = f.Start.UnixNano()
	}
	return v
}

func stateOf(p snapshot.Proto, n uint8) string {
	if n == noState {
		return ""
	}
	return conntrack.StateName(p, n)
}

func addr(b [16]byte, is4 bool) netip.Addr {
	if is4 {
		return netip.AddrFrom4([4]byte(b[12:]))
	}
	return netip.AddrFrom16(b)
}

func flowOf(backend [16]byte, k indexKey, v indexVal) snapshot.Flow {
	f := snapshot.Flow{ID: v.id, Proto: k.proto, State: stateOf(k.proto, v.state), Status: v.status, Zone: k.zone,
		Orig:  snapshot.Tuple{Src: addr(k.src, v.is4), Dst: addr(k.dst, v.is4), SrcPort: k.srcPort, DstPort: k.dstPort},
		Reply: snapshot.Tuple{Src: addr(backend, v.is4), Dst: addr(v.replyDst, v.is4), SrcPort: v.backendPort, DstPort: v.replyDPort}}
	if v.start != 0 {
		f.Start = time.Unix(0, v.start)
	}
	return f
}

func put(m map[[16]byte]map[indexKey]indexVal, f *snapshot.Flow) (added bool) {
	b := f.Reply.Src.As16()
	flows := m[b]
	if flows == nil {
		flows = map[indexKey]indexVal{}
		m[b] = flows
	}
	k := keyOf(f)
	_, had := flows[k]
	flows[k] = valOf(f)
	return !had
}

func remove(m map[[16]byte]map[indexKey]indexVal, f *snapshot.Flow) (removed bool) {
	b := f.Reply.Src.As16()
	flows := m[b]
	k := keyOf(f)
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
	ix.next, ix.nextN = map[[16]byte]map[indexKey]indexVal{}, 0
}

// seed adds one flow of the dump; it is called from the dump's callback,
// on the goroutine running the audit.
func (ix *flowIndex) seed(f *snapshot.Flow) {
	if !f.DNAT() {
		return
	}
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if ix.next != nil && put(ix.next, f) {
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
	ix.seeding, ix.pending, ix.next, ix.nextN = false, nil, nil, 0
}

// apply records one event.
func (ix *flowIndex) apply(e conntrack.Event) {
	if !e.Flow.DNAT() {
		return
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
	ix.valid = false
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
