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

// flowGroup is what a rule gathers of the flows it judged alike: the
// first flow and its judgement (the finding is written from them), the
// flows, and counts.
type flowGroup struct {
	name  string
	first snapshot.Flow
	j     judgement
	sel   snapshot.FlowSelection
	// states counts the flows by protocol and state ("tcp ESTABLISHED",
	// "udp"); clients are the first client addresses, and pods the
	// client pods proven to have opened flows of the group.
	states  map[string]int
	clients []netip.Addr
	pods    []*snapshot.Pod
	// clientSet holds the distinct client addresses, up to maxClientsCounted.
	clientSet map[netip.Addr]struct{}
}

// maxClientsKept is how many client addresses a group names; maxClientPods
// how many proven client pods it names among the objects its Events go to.
const (
	maxClientsKept    = 3
	maxClientPods     = 10
	maxClientsCounted = 1000
)

// flowGroups gathers flows into groups by name, in the order their first
// flows come.
type flowGroups struct {
	c      *snapshot.Conntrack
	byName map[string]*flowGroup
	order  []*flowGroup
}

func newFlowGroups(c *snapshot.Conntrack) *flowGroups {
	return &flowGroups{c: c, byName: map[string]*flowGroup{}}
}

// add puts the flow at ref, judged j, in the group name of its backend.
func (gs *flowGroups) add(ix *flowIndex, ref snapshot.FlowRef, f *snapshot.Flow, j judgement, name string) {
	key := f.Reply.Src.Unmap().String() + " " + name
	g := gs.byName[key]
	if g == nil {
		g = &flowGroup{name: name, first: *f, j: j, states: map[string]int{}}
		gs.byName[key] = g
		gs.order = append(gs.order, g)
	}
	g.sel.Add(gs.c, ref)
	st := f.Proto.String()
	if f.State != "" {
		st += " " + f.State
	}
	g.states[st]++
	c := f.Orig.Src.Unmap()
	if len(g.clients) < maxClientsKept && !slices.Contains(g.clients, c) {
		g.clients = append(g.clients, c)
	}
	if g.clientSet == nil {
		g.clientSet = map[netip.Addr]struct{}{}
	}
	if len(g.clientSet) < maxClientsCounted {
		g.clientSet[c] = struct{}{}
	}
	if len(g.pods) < maxClientPods {
		if p := ix.clientPod(f); p != nil && !slices.Contains(g.pods, p) {
			g.pods = append(g.pods, p)
		}
	}
}

// groups returns the groups, each with its flows complete.
func (gs *flowGroups) groups() []*flowGroup {
	for _, g := range gs.order {
		g.sel.Done()
	}
	return gs.order
}

// n is how many flows the group holds.
func (g *flowGroup) n() int { return g.sel.Len() }

// target is the group's FlowTarget.
func (g *flowGroup) target() *finding.FlowTarget {
	return &finding.FlowTarget{Flows: &g.sel, Name: g.name}
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
	var out []string
	for _, st := range slices.Sorted(maps.Keys(g.states)) {
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
	ev["flows_by_state"] = g.states
	var cs []string
	for _, c := range g.clients {
		cs = append(cs, c.String())
	}
	ev["clients"] = cs
	// How many distinct clients, counted up to maxClientsCounted.
	ev["client_count"] = len(g.clientSet)
	ev["sample_flow"] = g.first.String()
}

// concerns lists the objects an Event about the group belongs on: the
// Service (or the node, for a deleted one) and the client pods proven.
func (g *flowGroup) concerns(svc *snapshot.Service, node string) []finding.ObjectRef {
	var out []finding.ObjectRef
	switch {
	case svc != nil:
		out = append(out, finding.ObjectRef{Kind: "Service", Namespace: svc.Namespace, Name: svc.Name})
	case node != "":
		out = append(out, finding.ObjectRef{Kind: "Node", Name: node})
	}
	for _, p := range g.pods {
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
