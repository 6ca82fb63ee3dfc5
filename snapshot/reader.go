package snapshot

import "net/netip"

// FlowFilter picks the conntrack flows a rule needs while the table streams
// by, so that a collector keeps a handful of flows where the table holds a
// million. Keep is called with a Flow that is reused for the next entry: it
// must not retain the pointer. Filters are compared with ==, so that rules
// sharing one judgement share one filter and each flow is judged once: make
// them pointers.
type FlowFilter interface {
	Keep(f *Flow) bool
}

// FlowReader is implemented by a rule that reads the conntrack ledger and
// can say, from what earlier sources collected (the Services and Nodes in
// s.Kube), which flows it could report. Implementing it is a promise: the
// filter keeps every flow the rule's Evaluate could turn into a finding. A
// collector keeps the flows any of its readers' filters keeps; a rule that
// reads conntrack without implementing FlowReader, or returns nil, makes it
// keep every flow.
type FlowReader interface {
	FlowFilter(s *Snapshot) FlowFilter
}

// BackendLocal is implemented by a FlowReader whose filter's verdict on a
// flow depends only on the Services, the Nodes, and the cluster objects
// that mention the flow's backend address (its reply source): the pods that
// hold it and the endpoints that list it. After a change in the cluster, a
// long-running collector that keeps flows by backend then needs to judge
// again only the flows whose backend a changed object mentions (all of
// them when a Service or Node changed). The promise is tested against the
// rule's own judgement.
type BackendLocal interface {
	FlowReader
	BackendLocal()
}

// HolderReader is implemented by a rule that needs to know which pods
// hold some addresses, when the cluster objects hold only some of the pods
// (Kube.PodsPartial: a node agent watches its own node's pods). Called
// once every source has collected, it returns, from what they collected,
// the addresses whose holders its Evaluate reads and Kube.KnowsHolders
// does not know yet: they are looked up before the rules run, and an
// address that cannot be looked up is listed in Kube.Unlooked. Returning
// an address twice, or one already known, is harmless.
type HolderReader interface {
	HolderAddrs(s *Snapshot) []netip.Addr
}

// KindReader is implemented by a rule that reads only some kinds of
// cluster objects ("Pod", "Service", "EndpointSlice", ...): a saved
// objects file must hold each kind some rule of the scan reads, and need
// hold no other. A rule that reads the cluster without implementing it
// needs Pods, Services and EndpointSlices.
type KindReader interface {
	KubeKinds() []string
}

// DefaultKinds are the kinds a rule that says nothing reads.
var DefaultKinds = []string{"Pod", "Service", "EndpointSlice"}

// KindsOf returns the kinds of cluster objects r reads: its KubeKinds, or
// DefaultKinds.
func KindsOf(r any) []string {
	if kr, ok := r.(KindReader); ok {
		return kr.KubeKinds()
	}
	return DefaultKinds
}

// Query names what to read afresh from its source of truth before a
// remedy acts: each Service with its EndpointSlices, the pods that hold
// each address, and each Node (quorum reads of the API server), and each
// gossip cluster's member list (read again from one of its agents). A
// re-check reads exactly these and judges the finding on them alone.
type Query struct {
	Services []ObjectRef
	PodIPs   []netip.Addr
	Nodes    []string
	// ServiceIPs are ClusterIPs whose Service, if any, is to be read (with
	// its EndpointSlices), together with the cluster's ServiceCIDRs: the
	// proof that a Service was deleted is that none holds its address.
	ServiceIPs []netip.Addr
	// Gossip are the gossip clusters whose views are to be read again.
	Gossip []GossipCluster
}

// GossipCluster names one gossip cluster: its system and, as the
// controller names it, "namespace/name" (GossipView.Cluster).
type GossipCluster struct{ System, Cluster string }

// Add merges q2 into q, without duplicates.
func (q *Query) Add(q2 Query) {
	for _, s := range q2.Services {
		if !contains(q.Services, s) {
			q.Services = append(q.Services, s)
		}
	}
	for _, a := range q2.PodIPs {
		if !contains(q.PodIPs, a.Unmap()) {
			q.PodIPs = append(q.PodIPs, a.Unmap())
		}
	}
	for _, n := range q2.Nodes {
		if !contains(q.Nodes, n) {
			q.Nodes = append(q.Nodes, n)
		}
	}
	for _, a := range q2.ServiceIPs {
		if !contains(q.ServiceIPs, a.Unmap()) {
			q.ServiceIPs = append(q.ServiceIPs, a.Unmap())
		}
	}
	for _, g := range q2.Gossip {
		if !contains(q.Gossip, g) {
			q.Gossip = append(q.Gossip, g)
		}
	}
}

// Kube reports whether q names cluster objects.
func (q Query) Kube() bool {
	return len(q.Services) > 0 || len(q.PodIPs) > 0 || len(q.Nodes) > 0 || len(q.ServiceIPs) > 0
}

// Empty reports whether q names nothing.
func (q Query) Empty() bool { return !q.Kube() && len(q.Gossip) == 0 }

func contains[T comparable](s []T, v T) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}
