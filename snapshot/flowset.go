package snapshot

import (
	"iter"
	"maps"
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

// Routes interns the FlowRoutes of one backend: a handful, in practice,
// and most often one, which is kept in place rather than in a list of its
// own (a node whose workloads all died holds a hundred thousand backends
// of one route each).
type Routes struct {
	first FlowRoute
	// n is how many routes there are; more holds those after the first.
	n    uint16
	more *moreRoutes
}

// moreRoutes are a backend's routes after its first, and, when there
// are many, their index.
type moreRoutes struct {
	list  []FlowRoute
	index map[FlowRoute]uint16
}

// Len returns how many routes there are.
func (rs *Routes) Len() int { return int(rs.n) }

// Index returns r's index, adding it when new.
func (rs *Routes) Index(r FlowRoute) uint16 {
	switch {
	case rs.n == 0:
		rs.first, rs.n = r, 1
		return 0
	case rs.first == r:
		return 0
	case rs.more == nil:
		rs.more = &moreRoutes{}
	case rs.more.index != nil:
		if i, ok := rs.more.index[r]; ok {
			return i
		}
	default:
		for i := range rs.more.list {
			if rs.more.list[i] == r {
				return uint16(i + 1)
			}
		}
	}
	m := rs.more
	i := rs.n
	m.list = append(m.list, r)
	rs.n++
	if rs.n > 16 {
		if m.index == nil {
			m.index = make(map[FlowRoute]uint16, rs.n)
			for j, x := range m.list {
				m.index[x] = uint16(j + 1)
			}
		}
		m.index[r] = i
	}
	return i
}

// Clone returns a copy of rs that shares nothing with it.
func (rs *Routes) Clone() Routes {
	c := Routes{first: rs.first, n: rs.n}
	if rs.more != nil {
		c.more = &moreRoutes{list: slices.Clone(rs.more.list), index: maps.Clone(rs.more.index)}
	}
	return c
}

// At returns the route of index i.
func (rs *Routes) At(i uint16) *FlowRoute {
	if i == 0 {
		return &rs.first
	}
	return &rs.more.list[i-1]
}

// flowSet holds flows compactly, grouped by backend, in chunks that are
// never copied as they grow. A backend's first chunk holds firstChunk
// flows, and each next one half as many as the backend holds already, up
// to maxChunk: at most a third of what a backend's chunks hold is unused,
// and a node whose table holds a hundred thousand dead backends of a few
// flows each pays for those flows, not for a chunk of a busy backend's
// size per backend. A flow from an IPv4 client takes 32 bytes, its
// client's address in 4 of them; one from an IPv6 client 44.
type flowSet struct {
	// groups are the backends' groups, groupsPer a block, so that they
	// too are never copied as they grow.
	groups [][]flowGroup
	index  map[[16]byte]int32
	ngroup int32
	n      int
	// names are the states the kernel's tables do not name, as a listing
	// printed them: a flow's state 128+i is names[i].
	names []string
}

// flowGroup is one backend's flows: those from IPv4 clients first, then
// those from IPv6 clients (a backend's flows are of one family in
// practice), each in the order they were added.
type flowGroup struct {
	backend [16]byte
	routes  Routes
	v4      chunks[setFlow4]
	v6      *chunks[setFlow6]
}

// setFlow4 and setFlow6 are a flow's own part with its client's address
// and port and its route's index: 32 and 44 bytes.
type setFlow4 struct {
	src   [4]byte
	sport uint16
	route uint16
	rest  packedRest
}

type setFlow6 struct {
	src   [16]byte
	sport uint16
	route uint16
	rest  packedRest
}

// packedRest is a FlowRest in 24 bytes, its start in two halves, so that
// a setFlow4 is not padded to 8 bytes' alignment.
type packedRest struct {
	startLo, startHi uint32
	id, timeout      uint32
	replyDstPort     uint16
	status           uint16
	state            uint8
	seen             bool
}

func packRest(r FlowRest) packedRest {
	return packedRest{startLo: uint32(r.start), startHi: uint32(uint64(r.start) >> 32), id: r.id, timeout: r.timeout,
		replyDstPort: r.replyDstPort, status: r.status, state: r.state, seen: r.seen}
}

func (p packedRest) unpack() FlowRest {
	return FlowRest{start: int64(uint64(p.startHi)<<32 | uint64(p.startLo)), id: p.id, timeout: p.timeout,
		replyDstPort: p.replyDstPort, status: p.status, state: p.state, seen: p.seen}
}

// chunks holds a group's flows of one family, in the order added: a
// first chunk, and the others, when there are more, behind a pointer.
type chunks[E any] struct {
	first []E
	more  *[][]E
	n     int32
}

func (c *chunks[E]) len() int {
	if c == nil {
		return 0
	}
	return int(c.n)
}

func (c *chunks[E]) last() *[]E {
	if c.more != nil {
		return &(*c.more)[len(*c.more)-1]
	}
	return &c.first
}

func (c *chunks[E]) add(e E) {
	last := c.last()
	if len(*last) == cap(*last) {
		next := make([]E, 0, min(max(int(c.n)/2, firstChunk), maxChunk))
		switch {
		case c.first == nil:
			c.first = next
		case c.more == nil:
			c.more = &[][]E{next}
		default:
			*c.more = append(*c.more, next)
		}
		last = c.last()
	}
	*last = append(*last, e)
	c.n++
}

// fit puts the entries in one chunk of their number, when they are few
// (a copy of a busy backend's would double it for a while, for little)
// and their chunks have room for an eighth more.
func (c *chunks[E]) fit() {
	if c == nil || c.n > maxChunk {
		return
	}
	room := cap(c.first)
	if c.more != nil {
		for _, ch := range *c.more {
			room += cap(ch)
		}
	}
	if room-int(c.n) <= int(c.n)/8 {
		return
	}
	all := make([]E, 0, c.n)
	c.each(func(e *E) bool {
		all = append(all, *e)
		return true
	})
	c.first, c.more = all, nil
}

// fit fits every group's chunks.
func (s *flowSet) fit() {
	for gi := int32(0); gi < s.ngroup; gi++ {
		g := s.group(gi)
		g.v4.fit()
		g.v6.fit()
	}
}

// at returns the entry at pos.
func (c *chunks[E]) at(pos int) *E {
	if pos < len(c.first) {
		return &c.first[pos]
	}
	pos -= len(c.first)
	for _, ch := range *c.more {
		if pos < len(ch) {
			return &ch[pos]
		}
		pos -= len(ch)
	}
	return nil
}

// each calls fn with each entry, in order, until it returns false.
func (c *chunks[E]) each(fn func(*E) bool) bool {
	if c == nil {
		return true
	}
	for i := range c.first {
		if !fn(&c.first[i]) {
			return false
		}
	}
	if c.more == nil {
		return true
	}
	for _, ch := range *c.more {
		for i := range ch {
			if !fn(&ch[i]) {
				return false
			}
		}
	}
	return true
}

const (
	firstChunk = 4
	maxChunk   = 16384
	groupsPer  = 1024
)

func (g *flowGroup) len() int { return g.v4.len() + g.v6.len() }

// is4 reports whether the group's backend is an IPv4 address, as its
// first route says.
func (g *flowGroup) is4() bool { return g.routes.first.is4 }

func (s *flowSet) group(i int32) *flowGroup { return &s.groups[i/groupsPer][i%groupsPer] }

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
			s.index = map[[16]byte]int32{}
		}
		gi = s.ngroup
		if gi%groupsPer == 0 {
			s.groups = append(s.groups, make([]flowGroup, 0, groupsPer))
		}
		last := &s.groups[len(s.groups)-1]
		*last = append(*last, flowGroup{backend: backend})
		s.index[backend] = gi
		s.ngroup++
	}
	g := s.group(gi)
	ri := g.routes.Index(route)
	if route.is4 {
		g.v4.add(setFlow4{src: [4]byte(src[12:]), sport: sport, route: ri, rest: packRest(rest)})
	} else {
		if g.v6 == nil {
			g.v6 = &chunks[setFlow6]{}
		}
		g.v6.add(setFlow6{src: src, sport: sport, route: ri, rest: packRest(rest)})
	}
	s.n++
}

// each calls fn with each flow of group g, in order, in one reused Flow,
// until it returns false.
func (s *flowSet) each(g *flowGroup, f *Flow, fn func(*Flow) bool) bool {
	return g.v4.each(func(e *setFlow4) bool {
		s.join4(g, e, f)
		return fn(f)
	}) && g.v6.each(func(e *setFlow6) bool {
		s.join6(g, e, f)
		return fn(f)
	})
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
		for gi := range c.groups() {
			if !c.each(gi, &f, func(pos uint32, f *Flow) bool {
				return yield(FlowRef{group: gi, pos: pos}, f)
			}) {
				return
			}
		}
	}
}

// join4 and join6 set *f to the flow e of group g.
func (s *flowSet) join4(g *flowGroup, e *setFlow4, f *Flow) {
	var src [16]byte
	src[10], src[11] = 0xff, 0xff
	copy(src[12:], e.src[:])
	s.join(g, src, e.sport, e.route, e.rest, f)
}

func (s *flowSet) join6(g *flowGroup, e *setFlow6, f *Flow) {
	s.join(g, e.src, e.sport, e.route, e.rest, f)
}

func (s *flowSet) join(g *flowGroup, src [16]byte, sport, route uint16, pr packedRest, f *Flow) {
	r := pr.unpack()
	odd := r.state >= 128
	if odd {
		r.state = 0
	}
	JoinFlow(g.backend, g.routes.At(route), src, sport, r, f)
	if odd {
		f.State = s.names[pr.state-128]
	}
}

// at sets *f to the flow at position pos of group g.
func (s *flowSet) at(g *flowGroup, pos uint32, f *Flow) {
	if n4 := g.v4.len(); int(pos) < n4 {
		s.join4(g, g.v4.at(int(pos)), f)
	} else {
		s.join6(g, g.v6.at(int(pos)-n4), f)
	}
}

// FlowSelection is some of the flows kept in one table, all to one
// backend: the flows one finding is about. It holds no copy of them: 4
// bytes a flow, and none when it holds the first of its backend's kept
// flows in order, as a ghost backend's finding usually does (every one of
// them); 24 bytes itself, as a crowd keeps one for each of a hundred
// thousand ghost backends. A copy shares the positions it holds: only
// one of the two may be added to.
type FlowSelection struct {
	c     *Conntrack
	group int32
	n     uint32
	// pos are the positions of the flows held; nil when they are the
	// first n of the group's.
	pos *[]uint32
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
	if s.pos == nil && r.pos == s.n {
		// Still the first n: no position to keep.
		s.n++
		return
	}
	if s.pos == nil {
		pos := make([]uint32, s.n, s.n+1)
		for i := range pos {
			pos[i] = uint32(i)
		}
		s.pos = &pos
	}
	*s.pos = append(*s.pos, r.pos)
	s.n++
}

// Len returns how many flows it holds.
func (s *FlowSelection) Len() int {
	if s == nil {
		return 0
	}
	return int(s.n)
}

// All yields every flow it holds, in order. The Flow is reused from one
// flow to the next: copy it to keep it.
func (s *FlowSelection) All() iter.Seq[*Flow] {
	return func(yield func(*Flow) bool) {
		if s == nil || s.c == nil {
			return
		}
		var f Flow
		if s.pos == nil {
			left := s.n
			s.c.each(s.group, &f, func(_ uint32, f *Flow) bool {
				if left == 0 {
					return false
				}
				left--
				return yield(f)
			})
			return
		}
		for _, p := range *s.pos {
			s.c.at(s.group, p, &f)
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
	b, _ := s.c.group(s.group)
	return b
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
