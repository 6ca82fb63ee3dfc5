package snapshot

import (
	"iter"
	"net/netip"
	"slices"
	"time"
)

// The flows a node holds to one backend share most of what they are: the
// Service frontend the clients asked for, the backend's port, and, when
// the node masquerades, where replies go. A store of many flows keeps that
// once per backend, as a FlowRoute, and of each flow only what is its own,
// as a FlowRest: 48 bytes a flow, with no pointers for the garbage
// collector to scan, where a Flow takes 200 and holds pointers.

// FlowRoute is what the flows of one backend through one frontend share:
// the protocol and zone, the original destination (the frontend) and its
// port, the reply's source port (the backend's), and the reply's
// destination when it is not the client (the node masquerades). It is
// comparable.
type FlowRoute struct {
	dst, replyDst         [16]byte
	dstPort, replySrcPort uint16
	zone                  uint16
	proto                 Proto
	is4                   bool
	// masq is true when replyDst holds the reply's destination; false
	// when replies go to the client (the original source).
	masq bool
}

// FrontendKey is what identifies a flow's frontend to the kernel, with its
// client's address and port: with the backend, the flow's FlowKey.
type FrontendKey struct {
	Src     [16]byte
	SrcPort uint16
	// Route is the index of the flow's FlowRoute among its backend's.
	Route uint16
}

// FlowRest is what is a flow's own beyond its FlowRoute and its
// FrontendKey: the reply's destination port, the ID, the status (the low
// 16 bits of IPS_*, all the kernel defines), the state, the timeout, and
// the start (or when it was first seen).
type FlowRest struct {
	start        int64 // Unix ns; 0: none
	id, timeout  uint32
	replyDstPort uint16
	status       uint16
	state        uint8 // 1 + StateNumber; 0: none
	seen         bool  // start holds Seen
}

// ID is the flow's conntrack ID.
func (r FlowRest) ID() uint32 { return r.id }

// Seen is the flow's Seen (zero when it has none).
func (r FlowRest) Seen() time.Time {
	if !r.seen || r.start == 0 {
		return time.Time{}
	}
	return time.Unix(0, r.start).UTC()
}

// WithSeen returns r with Seen set to t, when the flow has no start time.
func (r FlowRest) WithSeen(t time.Time) FlowRest {
	if r.start == 0 || r.seen {
		r.start, r.seen = t.UnixNano(), true
	}
	return r
}

// SplitFlow splits f into its backend (the reply's source, as 16 bytes),
// its route, and what is its own. Its addresses are taken to be of one
// family, the original source's, as in every entry the kernel reports.
func SplitFlow(f *Flow) (backend [16]byte, route FlowRoute, src [16]byte, srcPort uint16, rest FlowRest) {
	route = FlowRoute{
		dst: f.Orig.Dst.As16(), dstPort: f.Orig.DstPort, replySrcPort: f.Reply.SrcPort,
		zone: f.Zone, proto: f.Proto, is4: f.Orig.Src.Is4(),
	}
	if f.Reply.Dst != f.Orig.Src {
		route.replyDst, route.masq = f.Reply.Dst.As16(), true
	}
	rest = FlowRest{id: f.ID, timeout: f.Timeout, replyDstPort: f.Reply.DstPort, status: uint16(f.Status)}
	if f.State != "" {
		if n, ok := StateNumber(f.Proto, f.State); ok {
			rest.state = n + 1
		}
	}
	switch {
	case !f.Start.IsZero():
		rest.start = f.Start.UnixNano()
	case !f.Seen.IsZero():
		rest.start, rest.seen = f.Seen.UnixNano(), true
	}
	return f.Reply.Src.As16(), route, f.Orig.Src.As16(), f.Orig.SrcPort, rest
}

// JoinFlow sets *f to the flow SplitFlow split. Mark and an IPv6 scope
// zone are not kept; a state StateNumber does not know comes back empty.
func JoinFlow(backend [16]byte, route *FlowRoute, src [16]byte, srcPort uint16, rest FlowRest, f *Flow) {
	is4 := route.is4
	client := unpackAddr(src, is4)
	*f = Flow{
		ID: rest.id, Proto: route.proto, Zone: route.zone, Status: uint32(rest.status), Timeout: rest.timeout,
		Orig: Tuple{Src: client, Dst: unpackAddr(route.dst, is4), SrcPort: srcPort, DstPort: route.dstPort},
		Reply: Tuple{Src: unpackAddr(backend, is4), Dst: client,
			SrcPort: route.replySrcPort, DstPort: rest.replyDstPort},
	}
	if route.masq {
		f.Reply.Dst = unpackAddr(route.replyDst, is4)
	}
	if rest.state != 0 {
		f.State = StateName(route.proto, rest.state-1)
	}
	switch {
	case rest.start != 0 && rest.seen:
		f.Seen = time.Unix(0, rest.start).UTC()
	case rest.start != 0:
		f.Start = time.Unix(0, rest.start).UTC()
	}
}

// Routes interns the FlowRoutes of one backend: a handful, in practice.
type Routes struct {
	list  []FlowRoute
	index map[FlowRoute]uint16
}

// Index returns r's index, adding it when new.
func (rs *Routes) Index(r FlowRoute) uint16 {
	if rs.index != nil {
		if i, ok := rs.index[r]; ok {
			return i
		}
	} else {
		for i := range rs.list {
			if rs.list[i] == r {
				return uint16(i)
			}
		}
	}
	i := uint16(len(rs.list))
	rs.list = append(rs.list, r)
	if len(rs.list) > 16 {
		if rs.index == nil {
			rs.index = make(map[FlowRoute]uint16, len(rs.list))
			for j, x := range rs.list {
				rs.index[x] = uint16(j)
			}
		}
		rs.index[r] = i
	}
	return i
}

// At returns the route of index i.
func (rs *Routes) At(i uint16) *FlowRoute { return &rs.list[i] }

// flowSet holds flows compactly, grouped by backend, in chunks that are
// never copied as they grow.
type flowSet struct {
	groups []flowGroup
	index  map[[16]byte]int
	n      int
	// names are the states the kernel's tables do not name, as a listing
	// printed them: a flow's state 128+i is names[i].
	names []string
}

type flowGroup struct {
	backend [16]byte
	routes  Routes
	chunks  [][]setFlow
	n       int
}

type setFlow struct {
	key  FrontendKey
	rest FlowRest
}

const (
	firstChunk = 64
	maxChunk   = 16384
)

func (s *flowSet) add(f *Flow) {
	backend, route, src, sport, rest := SplitFlow(f)
	if f.State != "" && rest.state == 0 {
		i := slices.Index(s.names, f.State)
		if i < 0 && len(s.names) < 127 {
			i = len(s.names)
			s.names = append(s.names, f.State)
		}
		if i >= 0 {
			rest.state = 128 + uint8(i)
		}
	}
	gi, ok := s.index[backend]
	if !ok {
		if s.index == nil {
			s.index = map[[16]byte]int{}
		}
		gi = len(s.groups)
		s.groups = append(s.groups, flowGroup{backend: backend})
		s.index[backend] = gi
	}
	g := &s.groups[gi]
	sf := setFlow{key: FrontendKey{Src: src, SrcPort: sport, Route: g.routes.Index(route)}, rest: rest}
	last := len(g.chunks) - 1
	if last < 0 || len(g.chunks[last]) == cap(g.chunks[last]) {
		g.chunks = append(g.chunks, make([]setFlow, 0, min(max(g.n, firstChunk), maxChunk)))
		last++
	}
	g.chunks[last] = append(g.chunks[last], sf)
	g.n++
	s.n++
}

// all yields every flow, a backend's together, in one reused Flow.
func (s *flowSet) all() iter.Seq[*Flow] {
	return func(yield func(*Flow) bool) {
		var f Flow
		for gi := range s.groups {
			g := &s.groups[gi]
			for _, ch := range g.chunks {
				for i := range ch {
					s.join(g, &ch[i], &f)
					if !yield(&f) {
						return
					}
				}
			}
		}
	}
}

// backends yields each backend with how many flows go to it.
func (s *flowSet) backends() iter.Seq2[netip.Addr, int] {
	return func(yield func(netip.Addr, int) bool) {
		for gi := range s.groups {
			g := &s.groups[gi]
			if len(g.routes.list) == 0 {
				continue
			}
			if !yield(unpackAddr(g.backend, g.routes.list[0].is4), g.n) {
				return
			}
		}
	}
}

// FlowRef is where a kept flow lies in its table.
type FlowRef struct {
	group int32
	pos   uint32
}

// Refs yields every kept flow with where it lies, a backend's together.
// The Flow is reused from one flow to the next: copy it to keep it.
func (c *Conntrack) Refs() iter.Seq2[FlowRef, *Flow] {
	return func(yield func(FlowRef, *Flow) bool) {
		if c == nil {
			return
		}
		var f Flow
		s := &c.kept
		for gi := range s.groups {
			g := &s.groups[gi]
			pos := uint32(0)
			for _, ch := range g.chunks {
				for i := range ch {
					s.join(g, &ch[i], &f)
					if !yield(FlowRef{group: int32(gi), pos: pos}, &f) {
						return
					}
					pos++
				}
			}
		}
	}
}

// join sets *f to the flow sf of group g.
func (s *flowSet) join(g *flowGroup, sf *setFlow, f *Flow) {
	r := sf.rest
	odd := r.state >= 128
	if odd {
		r.state = 0
	}
	JoinFlow(g.backend, g.routes.At(sf.key.Route), sf.key.Src, sf.key.SrcPort, r, f)
	if odd {
		f.State = s.names[sf.rest.state-128]
	}
}

// at returns the flow at position pos of group g.
func (s *flowSet) at(g *flowGroup, pos uint32) *setFlow {
	for _, ch := range g.chunks {
		if int(pos) < len(ch) {
			return &ch[pos]
		}
		pos -= uint32(len(ch))
	}
	return nil
}

// FlowSelection is some of the flows kept in one table, all to one
// backend: the flows one finding is about. It holds no copy of them: 4
// bytes a flow, and none when it holds every kept flow of its backend in
// order, as a ghost backend's finding usually does.
type FlowSelection struct {
	c     *Conntrack
	group int32
	pos   []uint32
	n     int
	// every is true when the selection is every kept flow of its group.
	every bool
}

// Add adds the flow at r; every flow added must be to the same backend as
// the first, and added in the order Refs yields them.
func (s *FlowSelection) Add(c *Conntrack, r FlowRef) {
	if s.c == nil {
		s.c, s.group = c, r.group
	}
	if c != s.c || r.group != s.group {
		panic("snapshot: a FlowSelection holds the flows of one backend of one table")
	}
	s.pos = append(s.pos, r.pos)
	s.n++
}

// Done says no more flows will be added: a selection of every flow of its
// backend, in order, lets its positions go.
func (s *FlowSelection) Done() {
	if s.c == nil {
		return
	}
	g := &s.c.kept.groups[s.group]
	if s.n != g.n {
		return
	}
	for i, p := range s.pos {
		if p != uint32(i) {
			return
		}
	}
	s.pos, s.every = nil, true
}

// Len returns how many flows it holds.
func (s *FlowSelection) Len() int {
	if s == nil {
		return 0
	}
	return s.n
}

// All yields every flow it holds, in order. The Flow is reused from one
// flow to the next: copy it to keep it.
func (s *FlowSelection) All() iter.Seq[*Flow] {
	return func(yield func(*Flow) bool) {
		if s == nil || s.c == nil {
			return
		}
		set := &s.c.kept
		g := &set.groups[s.group]
		var f Flow
		if s.every {
			for _, ch := range g.chunks {
				for i := range ch {
					set.join(g, &ch[i], &f)
					if !yield(&f) {
						return
					}
				}
			}
			return
		}
		for _, p := range s.pos {
			set.join(g, set.at(g, p), &f)
			if !yield(&f) {
				return
			}
		}
	}
}

// First returns the first flow it holds (the zero Flow when empty).
func (s *FlowSelection) First() Flow {
	for f := range s.All() {
		return *f
	}
	return Flow{}
}

// Backend returns the backend its flows go to.
func (s *FlowSelection) Backend() netip.Addr {
	if s == nil || s.c == nil {
		return netip.Addr{}
	}
	g := &s.c.kept.groups[s.group]
	return unpackAddr(g.backend, g.routes.list[0].is4)
}

// RestParts are the parts of a FlowRest a store may keep as it likes.
type RestParts struct {
	ID, Timeout  uint32
	ReplyDstPort uint16
	Status       uint16
	// State is 1 + the state's number (StateNumber); 0 for none.
	State uint8
	// Start is the flow's start (or, when Seen, when it was first seen),
	// in Unix nanoseconds; 0 for none.
	Start int64
	Seen  bool
}

// Parts returns r's parts.
func (r FlowRest) Parts() RestParts {
	return RestParts{ID: r.id, Timeout: r.timeout, ReplyDstPort: r.replyDstPort, Status: r.status, State: r.state, Start: r.start, Seen: r.seen}
}

// Rest builds the FlowRest of parts.
func (p RestParts) Rest() FlowRest {
	return FlowRest{id: p.ID, timeout: p.Timeout, replyDstPort: p.ReplyDstPort, status: p.Status, state: p.State, start: p.Start, seen: p.Seen}
}
