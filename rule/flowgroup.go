package rule

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	"github.com/ghostwatch/ghostwatch/finding"
	"github.com/ghostwatch/ghostwatch/snapshot"
)

// The conntrack rules report one finding per ghost backend and per what
// they judged alike about its flows (through which Service, for which
// reason, how bad), not one per flow: when a busy backend dies, a node may
// hold a million flows to it, and a finding a flow would take gigabytes.
// A finding holds its flows where the snapshot keeps them
// (snapshot.FlowSelection), counts and a sample: a million stale flows
// cost 4 bytes each beyond the table, or nothing when they are every flow
// to their backend. Every flow is still named (the JSON report lists each,
// streamed) and acted on one by one.
//
// When a node's workloads all died, its table may hold flows to a hundred
// thousand ghost backends: a finding each, with its evidence, would cost
// the agent kilobytes a backend when it can least afford them. Past
// ConntrackConfig.OneByOne ghost backends judged alike, they are one
// finding (a crowd: finding.CrowdTarget) that counts them, names the
// first, and still lists every flow; no remedy acts on it, as none would
// act on that many ghost IPs at once (its budget refuses a batch beyond it
// whole).

// flowGroup is what a rule gathers of the flows it judged alike: the
// first flow and its judgement (the finding is written from them), the
// flows, and counts.
type flowGroup struct {
	key   groupKey
	name  string
	first snapshot.Flow
	j     judgement
	sel   snapshot.FlowSelection
	// states counts the flows by protocol and state ("tcp ESTABLISHED",
	// "udp"), in the order they first came; clients are the first client
	// addresses, and pods the client pods proven to have opened flows of
	// the group.
	states  []stateCount
	clients []netip.Addr
	pods    []*snapshot.Pod
}

// stateCount is how many flows of a group are of one protocol and state.
type stateCount struct {
	state string
	n     int
}

// maxClientsKept is how many client addresses a group names; maxClientPods
// how many proven client pods it names among the objects its Events go to.
const (
	maxClientsKept    = 3
	maxClientPods     = 10
	maxClientsCounted = 1000
)

// groupKey is what the flows of one group share besides their backend,
// comparable, so that a flow finds its group without its group's name
// being built: the Service (or, for one deleted or never translated, the
// frontend), the pod that holds the backend's address, a word for why
// (a constant), the node of a hostNetwork backend, and whether the flow
// is closing anyway.
type groupKey struct {
	svc      *snapshot.Service
	frontend netip.AddrPort
	holder   *snapshot.Pod
	why      string
	host     string
	closing  bool
}

// flowGroups gathers flows into groups by backend and name, in the order
// their first flows come, as Conntrack.Refs yields them: a backend's
// together, so that a backend's groups are complete when the next
// backend's first flow comes. Past oneByOne groups of one name (ghost
// backends judged alike), the groups of that name are folded into one
// crowd as they complete: what the rule keeps of a ghost backend is then
// its place in the table, not a group.
type flowGroups struct {
	c *snapshot.Conntrack
	// oneByOne is how many groups of one name are kept one by one; 0
	// keeps every one.
	oneByOne int
	// cur are the groups of the backend whose flows come now.
	cur     []*flowGroup
	backend netip.Addr
	order   []*flowGroup
	// byKey are the groups of each key kept one by one so far, and
	// crowds the keys past oneByOne.
	byKey  map[groupKey][]*flowGroup
	crowds map[groupKey]*flowCrowd
	// names are the groups' names by key: many backends share one.
	names map[groupKey]string
	// free are groups folded into their crowd, for the next backend's.
	free []*flowGroup
}

func newFlowGroups(c *snapshot.Conntrack, oneByOne int) *flowGroups {
	return &flowGroups{c: c, oneByOne: oneByOne, byKey: map[groupKey][]*flowGroup{}, crowds: map[groupKey]*flowCrowd{}, names: map[groupKey]string{}}
}

// add puts the flow at ref, judged j, in the group key of its backend;
// name names the key's groups, and is called once a key.
func (gs *flowGroups) add(ix *flowIndex, ref snapshot.FlowRef, f *snapshot.Flow, j judgement, key groupKey, name func(*snapshot.Flow, judgement) string) {
	if b := f.Reply.Src.Unmap(); b != gs.backend {
		gs.complete()
		gs.backend = b
	}
	var g *flowGroup
	for _, c := range gs.cur {
		if c.key == key {
			g = c
			break
		}
	}
	if g == nil {
		n, ok := gs.names[key]
		if !ok {
			n = name(f, j)
			gs.names[key] = n
		}
		if last := len(gs.free) - 1; last >= 0 {
			g, gs.free = gs.free[last], gs.free[:last]
		} else {
			g = &flowGroup{}
		}
		g.key, g.name, g.first, g.j = key, n, *f, j
		gs.cur = append(gs.cur, g)
	}
	g.sel.Add(gs.c, ref)
	st := f.Proto.String()
	if f.State != "" {
		st += " " + f.State
	}
	if i := slices.IndexFunc(g.states, func(c stateCount) bool { return c.state == st }); i >= 0 {
		g.states[i].n++
	} else {
		g.states = append(g.states, stateCount{state: st, n: 1})
	}
	c := f.Orig.Src.Unmap()
	if len(g.clients) < maxClientsKept && !slices.Contains(g.clients, c) {
		g.clients = append(g.clients, c)
	}
	if len(g.pods) < maxClientPods {
		if p := ix.clientPod(f); p != nil && !slices.Contains(g.pods, p) {
			g.pods = append(g.pods, p)
		}
	}
}

// complete settles the groups of the backend whose flows came last: each
// is kept one by one, or folded into the crowd of its name.
func (gs *flowGroups) complete() {
	for _, g := range gs.cur {
		if cr := gs.crowds[g.key]; cr != nil {
			cr.fold(g)
			gs.reuse(g)
			continue
		}
		kept := append(gs.byKey[g.key], g)
		if gs.oneByOne <= 0 || len(kept) <= gs.oneByOne {
			gs.byKey[g.key] = kept
			gs.order = append(gs.order, g)
			continue
		}
		cr := &flowCrowd{key: g.key, name: g.name, first: kept[0].first, j: kept[0].j, states: map[string]int{}}
		for _, k := range kept {
			cr.fold(k)
		}
		gs.crowds[g.key] = cr
		delete(gs.byKey, g.key)
	}
	gs.cur = gs.cur[:0]
}

// reuse keeps g, folded into its crowd, for another backend's group.
func (gs *flowGroups) reuse(g *flowGroup) {
	*g = flowGroup{states: g.states[:0], clients: g.clients[:0], pods: g.pods[:0]}
	gs.free = append(gs.free, g)
}

// groups returns the groups kept one by one, each with its flows
// complete, in the order their first flows came, and the crowds, by their
// first backend.
func (gs *flowGroups) groups() ([]*flowGroup, []*flowCrowd) {
	gs.complete()
	kept := gs.order[:0]
	for _, g := range gs.order {
		if _, crowded := gs.crowds[g.key]; !crowded {
			kept = append(kept, g)
		}
	}
	gs.order = kept
	var crowds []*flowCrowd
	for _, cr := range gs.crowds {
		crowds = append(crowds, cr)
	}
	slices.SortFunc(crowds, func(a, b *flowCrowd) int { return a.sels[0].Backend().Compare(b.sels[0].Backend()) })
	return gs.order, crowds
}

// flowCrowd is the ghost backends of one name beyond the groups kept one
// by one: each backend's flows where the table keeps them, and what the
// finding says of them all, counted.
type flowCrowd struct {
	key   groupKey
	name  string
	first snapshot.Flow
	j     judgement
	sels  []snapshot.FlowSelection
	flows int
	// states counts the flows by protocol and state; clients are the
	// first client addresses, and pods the proven client pods.
	states  map[string]int
	clients []netip.Addr
	pods    []*snapshot.Pod
}

// fold adds the flows of g, a group of the crowd's name, to the crowd.
func (cr *flowCrowd) fold(g *flowGroup) {
	cr.sels = append(cr.sels, g.sel)
	cr.flows += g.n()
	for _, st := range g.states {
		cr.states[st.state] += st.n
	}
	for _, c := range g.clients {
		if len(cr.clients) < maxClientsKept && !slices.Contains(cr.clients, c) {
			cr.clients = append(cr.clients, c)
		}
	}
	for _, p := range g.pods {
		if len(cr.pods) < maxClientPods && !slices.Contains(cr.pods, p) {
			cr.pods = append(cr.pods, p)
		}
	}
}

// protocols are the protocols of the crowd's flows, sorted.
func (cr *flowCrowd) protocols() []string { return protocolsOf(slices.Sorted(maps.Keys(cr.states))) }

// target is the crowd's CrowdTarget.
func (cr *flowCrowd) target() *finding.CrowdTarget {
	return &finding.CrowdTarget{Flows: cr.sels, Name: cr.name}
}

// describe adds to a finding's evidence what the crowd counted: its ghost
// backends, the first of them, its flows by protocol and state, and the
// first clients.
func (cr *flowCrowd) describe(ev map[string]any) {
	ev["ghost_backends"] = len(cr.sels)
	var bs []string
	for i := range cr.sels[:min(len(cr.sels), maxBackendsNamed)] {
		f := cr.sels[i].First()
		bs = append(bs, f.Backend().String())
	}
	if len(cr.sels) > maxBackendsNamed {
		bs = append(bs, "...")
	}
	ev["backends"] = bs
	ev["flows"] = cr.flows
	ev["flows_by_state"] = cr.states
	var cs []string
	for _, c := range cr.clients {
		cs = append(cs, c.String())
	}
	ev["clients"] = cs
	// How many distinct clients, counted up to maxClientsCounted: from
	// the flows, once the crowd is complete, rather than in a set per
	// crowd as its flows come.
	clients := map[netip.Addr]struct{}{}
	for i := 0; i < len(cr.sels) && len(clients) < maxClientsCounted; i++ {
		for f := range cr.sels[i].All() {
			if len(clients) >= maxClientsCounted {
				break
			}
			clients[f.Orig.Src.Unmap()] = struct{}{}
		}
	}
	ev["client_count"] = len(clients)
	ev["sample_flow"] = cr.first.String()
}

// maxBackendsNamed is how many of a crowd's ghost backends its finding
// names.
const maxBackendsNamed = 10

// concerns lists the objects an Event about the crowd belongs on: the
// Service (or the node, for a deleted one) and the client pods proven.
func (cr *flowCrowd) concerns(svc *snapshot.Service, node string) []finding.ObjectRef {
	return concernsOf(svc, node, cr.pods)
}

// n is how many flows the group holds.
func (g *flowGroup) n() int { return g.sel.Len() }

// target is the group's FlowTarget. It holds a copy of the group's
// selection, not the group: what else the group counted goes with it.
func (g *flowGroup) target() *finding.FlowTarget {
	sel := g.sel
	return &finding.FlowTarget{Flows: &sel, Name: g.name}
}

// subjectFlow names the group's flows in a finding's subject: the flow
// itself when it is alone, "12 flows (tcp, udp)" otherwise.
func (g *flowGroup) subjectFlow() string {
	if g.n() == 1 {
		return g.first.String()
	}
	return fmt.Sprintf("%d flows (%s)", g.n(), strings.Join(g.protocols(), ", "))
}

// protocols are the protocols of the group's flows, sorted.
func (g *flowGroup) protocols() []string {
	var sts []string
	for _, st := range g.states {
		sts = append(sts, st.state)
	}
	slices.Sort(sts)
	return protocolsOf(sts)
}

// protocolsOf are the protocols of sorted "proto state" counts' keys.
func protocolsOf(sorted []string) []string {
	var out []string
	for _, st := range sorted {
		p, _, _ := strings.Cut(st, " ")
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	return out
}

// remove is the command that removes the group's flow by hand when it is
// alone; "" for several (the report lists each flow's).
func (g *flowGroup) remove() string {
	if g.n() == 1 {
		return g.first.DeleteCommand()
	}
	return ""
}

// describe adds to a finding's evidence what the group counted: the flows,
// by protocol and state, and the first clients, when there are several.
func (g *flowGroup) describe(ev map[string]any) {
	if g.n() == 1 {
		return
	}
	ev["flows"] = g.n()
	states := make(map[string]int, len(g.states))
	for _, st := range g.states {
		states[st.state] = st.n
	}
	ev["flows_by_state"] = states
	var cs []string
	for _, c := range g.clients {
		cs = append(cs, c.String())
	}
	ev["clients"] = cs
	// How many distinct clients, counted up to maxClientsCounted.
	clients := map[netip.Addr]struct{}{}
	for f := range g.sel.All() {
		if len(clients) >= maxClientsCounted {
			break
		}
		clients[f.Orig.Src.Unmap()] = struct{}{}
	}
	ev["client_count"] = len(clients)
	ev["sample_flow"] = g.first.String()
}

// concerns lists the objects an Event about the group belongs on: the
// Service (or the node, for a deleted one) and the client pods proven.
func (g *flowGroup) concerns(svc *snapshot.Service, node string) []finding.ObjectRef {
	return concernsOf(svc, node, g.pods)
}

// concernsOf lists the Service (or the node, for a deleted one) and pods.
func concernsOf(svc *snapshot.Service, node string, pods []*snapshot.Pod) []finding.ObjectRef {
	var out []finding.ObjectRef
	switch {
	case svc != nil:
		out = append(out, finding.ObjectRef{Kind: "Service", Namespace: svc.Namespace, Name: svc.Name})
	case node != "":
		out = append(out, finding.ObjectRef{Kind: "Node", Name: node})
	}
	for _, p := range pods {
		out = append(out, finding.ObjectRef{Kind: "Pod", Namespace: p.Namespace, Name: p.Name, UID: p.UID})
	}
	return out
}

// flowOf returns the first flow a conntrack finding names: what its rule
// judged, as every other flow of the finding was judged alike.
func flowOf(f finding.Finding) (*snapshot.Flow, bool) {
	t, ok := f.Target.(*finding.FlowTarget)
	if !ok || t.Flows.Len() == 0 {
		return nil, false
	}
	fl := t.Flows.First()
	return &fl, true
}
