package rule

import (
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/ghostwatch/ghostwatch/finding"
	"github.com/ghostwatch/ghostwatch/snapshot"
)

// ConntrackConfig tunes the conntrack rules. The zero value is usable.
type ConntrackConfig struct {
	// NodePortAddresses, when set, makes any original destination inside
	// these prefixes a NodePort frontend (kube-proxy's --nodeport-addresses).
	// When empty, only the addresses of the snapshot's node are.
	NodePortAddresses []netip.Prefix
	// LocalAddresses are addresses of the host whose table is read, in
	// addition to the snapshot's (snapshot.Snapshot.LocalAddresses, read
	// live at every collection). kube-proxy's default (no
	// --nodeport-addresses) accepts NodePorts on every local address, not
	// only the Node object's InternalIP and ExternalIP: each is a NodePort
	// frontend too.
	LocalAddresses []netip.Addr
	// ServiceCIDRs are the cluster's service IP ranges
	// (--service-cidr), in addition to the ServiceCIDR objects the
	// cluster holds: a DNATed flow to an address in one of them that no
	// Service holds addressed a Service that was deleted.
	ServiceCIDRs []netip.Prefix
	// ClockSkew is how far the node's clock may be ahead of the API
	// server's. A flow proves it was opened to an earlier holder of its
	// backend IP only if it started more than ClockSkew before the current
	// holder did. Kubernetes timestamps have one-second resolution, so a
	// value below 1s buys nothing. Default 2s.
	ClockSkew time.Duration
	// OneByOne is how many ghost backends judged alike (through one
	// Service, for one reason, as bad) are reported a finding each.
	// Beyond it they are reported together, in one finding that counts
	// them and lists every flow: what a node whose workloads all died
	// costs then grows with its flows, not with a finding per ghost
	// backend. No remedy acts on that finding: a remedy acts on at most
	// its budget of ghost IPs at once, and the agent raises OneByOne to
	// its budget. Default DefaultOneByOne.
	OneByOne int
}

// DefaultOneByOne is ConntrackConfig.OneByOne when it is zero: five times
// the remedy's default budget of ghost IPs a minute.
const DefaultOneByOne = 100

func (c ConntrackConfig) clockSkew() time.Duration {
	if c.ClockSkew <= 0 {
		return 2 * time.Second
	}
	return c.ClockSkew
}

func (c ConntrackConfig) oneByOne() int {
	if c.OneByOne <= 0 {
		return DefaultOneByOne
	}
	return c.OneByOne
}

// Frontend kinds, as reported in evidence.
const (
	FrontendClusterIP    = "ClusterIP"
	FrontendNodePort     = "NodePort"
	FrontendExternalIP   = "ExternalIP"
	FrontendLoadBalancer = "LoadBalancer"
)

type frontendKey struct {
	proto snapshot.Proto
	addr  netip.Addr
	port  uint16
}

type protoPort struct {
	proto snapshot.Proto
	port  uint16
}

// Frontend is a Service address a client can connect to.
type Frontend struct {
	// Service is nil for the frontend of a Service that was deleted.
	Service *snapshot.Service
	Kind    string
	// CIDR is, for a deleted Service, the service range its address lies
	// in and the ServiceCIDR object that holds it ("" for --service-cidr).
	CIDR     netip.Prefix
	CIDRName string
}

// Gone reports whether the frontend's Service was deleted.
func (fe Frontend) Gone() bool { return fe.Service == nil }

// Ref returns the Service's namespace/name; the zero ObjectRef when it was
// deleted.
func (fe Frontend) Ref() snapshot.ObjectRef {
	if fe.Service == nil {
		return snapshot.ObjectRef{}
	}
	return fe.Service.Ref()
}

// describe names the frontend in a message: "ClusterIP web/api", or
// "deleted Service 10.96.0.57:80" (the address is all that is left).
func (fe Frontend) describe(f *snapshot.Flow) string {
	if fe.Service == nil {
		return "deleted Service " + f.Frontend().String()
	}
	return fe.Kind + " " + fe.Service.Ref().String()
}

// Frontends indexes the Service frontends reachable on one node: ClusterIPs,
// externalIPs and load-balancer IPs on their service ports, and NodePorts on
// the node's addresses and the host's local addresses (or on
// NodePortAddresses).
type Frontends struct {
	byAddr    map[frontendKey]Frontend
	nodeAddrs map[netip.Addr]bool
	nodeNets  []netip.Prefix
	nodePorts map[protoPort]Frontend
}

// NewFrontends builds the index for the node named nodeName. Services whose
// type is ExternalName have no frontend.
func NewFrontends(k *snapshot.Kube, nodeName string, nodePortAddresses []netip.Prefix, local ...netip.Addr) *Frontends {
	fe := &Frontends{
		byAddr:    map[frontendKey]Frontend{},
		nodeAddrs: map[netip.Addr]bool{},
		nodeNets:  nodePortAddresses,
		nodePorts: map[protoPort]Frontend{},
	}
	for _, a := range local {
		fe.nodeAddrs[a.Unmap()] = true
	}
	if k == nil {
		return fe
	}
	for i := range k.Nodes {
		if k.Nodes[i].Name == nodeName {
			for _, a := range k.Nodes[i].Addresses {
				fe.nodeAddrs[a.Unmap()] = true
			}
		}
	}
	for i := range k.Services {
		svc := &k.Services[i]
		if svc.Type == snapshot.ServiceExternalName {
			continue
		}
		add := func(addrs []netip.Addr, kind string) {
			for _, a := range addrs {
				for _, p := range svc.Ports {
					key := frontendKey{p.Protocol, a.Unmap(), p.Port}
					if _, dup := fe.byAddr[key]; !dup {
						fe.byAddr[key] = Frontend{Service: svc, Kind: kind}
					}
				}
			}
		}
		add(svc.ClusterIPs, FrontendClusterIP)
		add(svc.ExternalIPs, FrontendExternalIP)
		add(svc.LoadBalancerIPs, FrontendLoadBalancer)
		for _, p := range svc.Ports {
			if p.NodePort != 0 {
				fe.nodePorts[protoPort{p.Protocol, p.NodePort}] = Frontend{Service: svc, Kind: FrontendNodePort}
			}
		}
	}
	return fe
}

// Lookup returns the frontend a flow's original destination addressed.
func (fe *Frontends) Lookup(proto snapshot.Proto, dst netip.Addr, port uint16) (Frontend, bool) {
	dst = dst.Unmap()
	if f, ok := fe.byAddr[frontendKey{proto, dst, port}]; ok {
		return f, true
	}
	f, ok := fe.nodePorts[protoPort{proto, port}]
	if !ok {
		return Frontend{}, false
	}
	if fe.nodeAddrs[dst] {
		return f, true
	}
	for _, p := range fe.nodeNets {
		if p.Contains(dst) {
			return f, true
		}
	}
	return Frontend{}, false
}

// flowIndex is what both conntrack rules need to judge a flow.
type flowIndex struct {
	frontends *Frontends
	// backends maps a service to the endpoint addresses its slices list;
	// bySvc the same by the Service a Frontend points to, for the hot path
	// (a pointer hashes faster than the strings of a reference).
	backends map[snapshot.ObjectRef]map[netip.Addr]*snapshot.Endpoint
	bySvc    map[*snapshot.Service]map[netip.Addr]*snapshot.Endpoint
	// holders maps an IP to the non-terminal pods that report it.
	holders map[netip.Addr][]*snapshot.Pod
	// nodeAddrs holds every node address in the cluster.
	nodeAddrs map[netip.Addr]string
	// serviceNets are the service IP ranges, and serviceIPs every
	// ClusterIP a Service holds: an address in the first and not in the
	// second belonged to a Service that was deleted.
	serviceNets []namedPrefix
	serviceIPs  map[netip.Addr]bool
	skew        time.Duration
	// kube says which addresses' holders are known (nil: no pods at all,
	// which is knowing).
	kube *snapshot.Kube
}

// knows reports whether every pod that holds a is among the holders.
func (ix *flowIndex) knows(a netip.Addr) bool { return ix.kube == nil || ix.kube.KnowsHolders(a) }

type namedPrefix struct {
	name   string
	prefix netip.Prefix
}

func newFlowIndex(s *snapshot.Snapshot, cfg ConntrackConfig) *flowIndex {
	k := s.Kube
	local := append(slices.Clip(cfg.LocalAddresses), s.LocalAddresses...)
	if p := s.ServiceProxy; p != nil && p.Mode == "nftables" {
		// kube-proxy's nftables mode serves NodePorts on the node's
		// primary addresses only (its --nodeport-addresses=primary
		// default), not on every address of the host as iptables mode
		// does: the host's other addresses are no NodePort frontends.
		local = nil
	}
	ix := &flowIndex{
		frontends:  NewFrontends(k, s.NodeName, cfg.NodePortAddresses, local...),
		backends:   map[snapshot.ObjectRef]map[netip.Addr]*snapshot.Endpoint{},
		holders:    map[netip.Addr][]*snapshot.Pod{},
		nodeAddrs:  map[netip.Addr]string{},
		serviceIPs: map[netip.Addr]bool{},
		skew:       cfg.clockSkew(),
	}
	for _, p := range cfg.ServiceCIDRs {
		ix.serviceNets = append(ix.serviceNets, namedPrefix{"", p.Masked()})
	}
	if k == nil {
		return ix
	}
	ix.kube = k
	for _, c := range k.ServiceCIDRs {
		for _, p := range c.CIDRs {
			ix.serviceNets = append(ix.serviceNets, namedPrefix{c.Name, p})
		}
	}
	for i := range k.Services {
		for _, a := range k.Services[i].ClusterIPs {
			ix.serviceIPs[a.Unmap()] = true
		}
	}
	for i := range k.Endpoints {
		ep := &k.Endpoints[i]
		m := ix.backends[ep.Service]
		if m == nil {
			m = map[netip.Addr]*snapshot.Endpoint{}
			ix.backends[ep.Service] = m
		}
		m[ep.Address.Unmap()] = ep
	}
	ix.bySvc = make(map[*snapshot.Service]map[netip.Addr]*snapshot.Endpoint, len(k.Services))
	for i := range k.Services {
		ix.bySvc[&k.Services[i]] = ix.backends[k.Services[i].Ref()]
	}
	for i := range k.Pods {
		p := &k.Pods[i]
		if p.Terminal() {
			continue
		}
		for _, a := range p.IPs {
			ix.holders[a.Unmap()] = append(ix.holders[a.Unmap()], p)
		}
	}
	for i := range k.Nodes {
		for _, a := range k.Nodes[i].Addresses {
			ix.nodeAddrs[a.Unmap()] = k.Nodes[i].Name
		}
	}
	return ix
}

// verdict is what the conntrack rules conclude about one flow.
type verdict int

const (
	// notService: not a DNATed flow to a known frontend.
	notService verdict = iota
	// healthy: the backend is still an endpoint of the service.
	healthy
	// draining: the backend's pod is terminating but still exists.
	draining
	// stale: no pod holds the backend's IP, and it is no longer a live
	// endpoint: gone from the slices, or still listed but not serving for
	// a pod that no longer exists.
	stale
	// misdelivered: the backend IP is held by a pod that is not the one the
	// flow was opened to.
	misdelivered
	// relabelled: the backend left the service but the pod the flow was
	// opened to still holds the IP: the connection still works.
	relabelled
	// unknownHolders: which pods hold the backend's address is not known
	// here (a node agent watches its own node's pods only), and the
	// verdict depends on it: the holders are to be looked up, and a flow
	// whose backend's holders cannot be is not judged.
	unknownHolders
)

// judgement carries a verdict and the facts behind it.
type judgement struct {
	verdict  verdict
	frontend Frontend
	endpoint *snapshot.Endpoint
	holder   *snapshot.Pod
	// hostNode is set when the backend is a node address (hostNetwork).
	hostNode string
	// openedBefore is true when the flow's start time proves it was opened
	// before the current holder of its backend IP existed.
	openedBefore bool
	// seenBefore is true when the agent saw the flow (snapshot.Flow.Seen)
	// before the current holder of its backend IP existed.
	seenBefore bool
	// listedDead is true when the backend is still listed in a slice, not
	// serving, for a pod that no longer exists: the slice lags.
	listedDead bool
	// foreign is true when the holder could never have been a backend of
	// the Service: it lives in another namespace, and the Service's
	// selector (the EndpointSlice controller) only picks its own.
	foreign bool
	// untranslated is true for a UDP flow to a frontend that the kernel
	// never translated: it was created while no rule translated the
	// Service, and NAT is decided on a flow's first packet only.
	untranslated bool
}

// judge classifies one flow. The order of the checks is the safety argument:
// a backend IP still held by a pod is never "stale", and a pod that still
// exists while terminating is always "draining".
func (ix *flowIndex) judge(f *snapshot.Flow) judgement {
	if !f.DNAT() {
		return ix.judgeUntranslated(f)
	}
	fe, ok := ix.frontends.Lookup(f.Proto, f.Orig.Dst, f.Orig.DstPort)
	if !ok {
		return ix.judgeDeleted(f)
	}
	j := judgement{frontend: fe}
	b := f.Reply.Src.Unmap()
	if m, ok := ix.bySvc[fe.Service]; ok {
		j.endpoint = m[b]
	} else {
		j.endpoint = ix.backends[fe.Service.Ref()][b]
	}
	if !ix.knows(b) {
		return ix.judgeUnknownHolders(f, j)
	}

	var podHolders, hostHolders []*snapshot.Pod
	for _, p := range ix.holders[b] {
		if p.HostNetwork {
			hostHolders = append(hostHolders, p)
		} else {
			podHolders = append(podHolders, p)
		}
	}
	j.hostNode = ix.nodeAddrs[b]

	// A backend on a node address belongs to a hostNetwork pod. The IP says
	// nothing about which pod, so only the endpoint list and terminating
	// hostNetwork pods on that address can be judged.
	if j.hostNode != "" || (len(podHolders) == 0 && len(hostHolders) > 0) {
		switch {
		case j.endpoint != nil && j.endpoint.Terminating:
			j.verdict = draining
		case j.endpoint != nil:
			j.verdict = healthy
		case anyDeleting(hostHolders):
			j.verdict = draining
		default:
			j.verdict = stale
		}
		return j
	}

	if len(podHolders) > 0 {
		// With several holders the IP is duplicated; judge against the
		// newest, the one a reused IP most likely went to.
		h := newest(podHolders)
		j.holder = h
		switch {
		case h.Since().IsZero():
		case !f.Start.IsZero() && f.Start.Add(ix.skew).Before(h.Since()):
			j.openedBefore = true
			j.verdict = misdelivered
			return j
		case f.Start.IsZero() && !f.Seen.IsZero() && f.Seen.Add(ix.skew).Before(h.Since()):
			// The agent saw the flow before the holder existed: it was
			// opened to an earlier holder of the IP.
			j.seenBefore = true
			j.verdict = misdelivered
			return j
		}
	}
	switch {
	case j.endpoint != nil && j.endpoint.Pod != nil && !j.endpoint.Serving && j.holder == nil:
		// Listed, but not serving, for a pod that no longer exists and
		// whose IP no pod holds: the slice lags the pod's deletion (or is
		// stuck). kube-proxy sends nothing new there, and nothing answers.
		// An endpoint without a Pod targetRef (an address outside the pod
		// network) stays live.
		j.listedDead = true
		j.verdict = stale
	case j.endpoint != nil && j.endpoint.Terminating:
		// Terminating while its pod still exists: draining.
		j.verdict = draining
	case j.endpoint != nil:
		j.verdict = healthy
	case j.holder != nil && j.holder.Deleting:
		// Gone from the slices but the pod still exists: let it drain.
		j.verdict = draining
	case j.holder != nil && j.frontend.Service.HasSelector && j.holder.Namespace != j.frontend.Service.Namespace:
		// The Service could never have sent the flow to this pod: it was
		// opened to an earlier holder of the IP.
		j.foreign = true
		j.verdict = misdelivered
	case j.holder != nil:
		// The holder may be the very pod the flow was opened to, since
		// left the Service (a blue/green switch, a pod relabelled out of
		// rotation): with nothing proving otherwise, the connection still
		// reaches its own pod.
		j.verdict = relabelled
	default:
		j.verdict = stale
	}
	return j
}

// judgeUnknownHolders classifies a flow whose backend's holders are not
// known. Only a flow to a current endpoint that cannot be older than the
// pod it lists there is judged without them: healthy, or draining when
// the endpoint is terminating and still serving. Any other verdict
// depends on who holds the address: the holders are to be looked up.
func (ix *flowIndex) judgeUnknownHolders(f *snapshot.Flow, j judgement) judgement {
	ep := j.endpoint
	j.verdict = unknownHolders
	switch {
	case ep == nil, ix.mayPredate(f, ep):
	case ep.Serving && ep.Terminating:
		j.verdict = draining
	case ep.Serving:
		j.verdict = healthy
	case ep.Pod == nil:
		// Not serving, and no pod: live while listed, as with known
		// holders.
		j.verdict = healthy
		if ep.Terminating {
			j.verdict = draining
		}
	}
	return j
}

// mayPredate reports whether f may have been opened before the pod that
// ep lists at f's backend got that address, so that a proof of
// misdelivery needs that pod's start: f started (by the kernel's clock, or
// when the agent first saw it) more than the clock skew before ep.Since,
// or ep.Since is not known. A flow with no start cannot be proven older
// than any pod.
func (ix *flowIndex) mayPredate(f *snapshot.Flow, ep *snapshot.Endpoint) bool {
	t := f.Start
	if t.IsZero() {
		t = f.Seen
	}
	if t.IsZero() {
		return false
	}
	return ep.Since.IsZero() || t.Add(ix.skew).Before(ep.Since)
}

// judgeUntranslated classifies a flow the kernel did not translate. A UDP
// flow to a Service frontend that was never translated was created while
// no rule translated the Service (before it had endpoints, or before
// kube-proxy synced its rules): NAT is decided on a flow's first packet
// only, so every later datagram of that socket goes to the frontend
// address itself, where nothing answers, for as long as the client keeps
// sending (each datagram renews the entry). kube-proxy deletes such
// entries when the Service gains endpoints; one that outlives that is a
// ghost. TCP is left alone: a connection never established is retried
// from a new port.
func (ix *flowIndex) judgeUntranslated(f *snapshot.Flow) judgement {
	if f.Proto != snapshot.ProtoUDP {
		return judgement{verdict: notService}
	}
	fe, ok := ix.frontends.Lookup(f.Proto, f.Orig.Dst, f.Orig.DstPort)
	if !ok {
		return judgement{verdict: notService}
	}
	return judgement{verdict: stale, frontend: fe, untranslated: true}
}

// judgeDeleted classifies a DNATed flow that addresses no frontend: when
// its original destination lies in a service range and no Service holds
// that address, it was opened to a Service since deleted. kube-proxy removed
// its rules, but the kernel keeps translating the flow to the backend it
// picked. With no Service left, nothing says who that backend should be:
// the flow is stale only when nothing holds the backend's address (no pod,
// no node), and otherwise left alone: it may still reach its own pod.
func (ix *flowIndex) judgeDeleted(f *snapshot.Flow) judgement {
	dst := f.Orig.Dst.Unmap()
	if ix.serviceIPs[dst] {
		// A Service holds the address, just not this port or protocol.
		return judgement{verdict: notService}
	}
	var cidr *namedPrefix
	for i := range ix.serviceNets {
		if ix.serviceNets[i].prefix.Contains(dst) {
			cidr = &ix.serviceNets[i]
			break
		}
	}
	if cidr == nil {
		return judgement{verdict: notService}
	}
	j := judgement{frontend: Frontend{Kind: FrontendClusterIP, CIDR: cidr.prefix, CIDRName: cidr.name}}
	b := f.Reply.Src.Unmap()
	if !ix.knows(b) && ix.nodeAddrs[b] == "" {
		j.verdict = unknownHolders
		return j
	}
	if len(ix.holders[b]) > 0 || ix.nodeAddrs[b] != "" {
		j.verdict = relabelled
		return j
	}
	j.verdict = stale
	return j
}

func anyDeleting(ps []*snapshot.Pod) bool {
	for _, p := range ps {
		if p.Deleting {
			return true
		}
	}
	return false
}

func newest(ps []*snapshot.Pod) *snapshot.Pod {
	n := ps[0]
	for _, p := range ps[1:] {
		if p.Since().After(n.Since()) {
			n = p
		}
	}
	return n
}

// currentBackends lists up to max endpoint addresses of a service, sorted.
func (ix *flowIndex) currentBackends(svc snapshot.ObjectRef, max int) []string {
	var out []string
	for a := range ix.backends[svc] {
		out = append(out, a.String())
	}
	sort.Strings(out)
	if len(out) > max {
		out = append(out[:max], "...")
	}
	return out
}

// conntrackRules is the judgement the conntrack rules share: one index of
// the cluster per snapshot and one flow filter, so that a flow streaming by
// is judged once however many of these rules read the table. Both live in
// the pass's scratch (snapshot.Derive), not here: the rules keep no state
// between passes.
type conntrackRules struct {
	cfg ConntrackConfig
}

// derived names what the conntrack rules derive from one snapshot's cluster
// objects: the rules that share the judgement, and the Kube it was built
// from (a node agent's Kube is completed, once every source has collected,
// with the pods it looked up: the index is built again then).
type derived struct {
	c       *conntrackRules
	kube    *snapshot.Kube
	filter  bool
	holders bool
}

func newConntrackRules(cfg ConntrackConfig) *conntrackRules { return &conntrackRules{cfg: cfg} }

// index returns the index of s's cluster objects, built once per pass.
func (c *conntrackRules) index(s *snapshot.Snapshot) *flowIndex {
	return snapshot.Derive(s, derived{c: c, kube: s.Kube}, func() *flowIndex { return newFlowIndex(s, c.cfg) })
}

// flowFilter is the FlowFilter of every conntrack rule: the flows to a
// Service frontend whose backend is not a current endpoint. The same
// filter is returned for the same snapshot in one pass.
func (c *conntrackRules) flowFilter(s *snapshot.Snapshot) snapshot.FlowFilter {
	ix := c.index(s)
	return snapshot.Derive(s, derived{c: c, kube: s.Kube, filter: true}, func() *suspectFilter {
		return &suspectFilter{ix: ix, node: s.NodeName, kube: s.Kube != nil}
	})
}

// holderAddrs are the addresses whose holders the conntrack rules need
// and s does not know (snapshot.HolderReader): the backends of the kept
// flows that cannot be judged without them, and, for a flow whose start
// the kernel gave, its client address when a pod of the node holds it
// (the pod that opened it is named only when no other pod holds it).
//
// Both conntrack rules ask the same: it is worked out once a pass. A
// backend's flows come together (Conntrack.All), so a backend is told
// from the last one added; clients, which come in any order, are kept in
// a set.
func (c *conntrackRules) holderAddrs(s *snapshot.Snapshot) []netip.Addr {
	if s.Kube == nil || s.Conntrack == nil || !s.Kube.PodsPartial {
		return nil
	}
	ix := c.index(s)
	return snapshot.Derive(s, derived{c: c, kube: s.Kube, holders: true}, func() []netip.Addr {
		var out []netip.Addr
		var backend netip.Addr
		var clients map[netip.Addr]bool
		for f := range s.Conntrack.All() {
			switch ix.judge(f).verdict {
			case notService, healthy:
				continue
			case unknownHolders:
				if b := f.Reply.Src.Unmap(); b != backend {
					backend = b
					out = append(out, b)
				}
			}
			if a := f.Orig.Src.Unmap(); !f.Start.IsZero() && len(ix.holders[a]) > 0 && !ix.knows(a) && !clients[a] {
				if clients == nil {
					clients = map[netip.Addr]bool{}
				}
				clients[a] = true
				out = append(out, a)
			}
		}
		// A client may be a backend of another flow too.
		slices.SortFunc(out, netip.Addr.Compare)
		return slices.Compact(out)
	})
}

// suspectFilter keeps the flows a conntrack rule could report: DNATed to a
// frontend, to a backend that is not a current endpoint of the service.
// Healthy flows and flows that address no frontend are dropped. Without
// cluster objects no conntrack rule can run, so it keeps nothing.
type suspectFilter struct {
	ix      *flowIndex
	node    string
	kube    bool
	matched int
	// elsewhere counts, by node, the flows to a NodePort on another
	// node's address (a table read with the wrong --node-name), and
	// nodePorts those to a NodePort of this node.
	elsewhere map[string]int
	nodePorts int
}

// Keep judges one flow.
func (f *suspectFilter) Keep(fl *snapshot.Flow) bool {
	if !f.kube {
		return false
	}
	j := f.ix.judge(fl)
	if j.verdict != notService && j.frontend.Kind == FrontendNodePort {
		f.nodePorts++
	}
	switch j.verdict {
	case notService:
		if n := f.ix.otherNodePort(fl, f.node); n != "" {
			if f.elsewhere == nil {
				f.elsewhere = map[string]int{}
			}
			f.elsewhere[n]++
		}
		return false
	case healthy:
		f.matched++
		return false
	}
	f.matched++
	return true
}

// String says how many flows addressed a frontend, for the source's report;
// nothing when there were no cluster objects to tell frontends by.
func (f *suspectFilter) String() string {
	if !f.kube {
		return ""
	}
	s := fmt.Sprintf("%d to a Service frontend of node %s", f.matched, f.node)
	if n, c := f.likelyNode(); n != "" {
		s += fmt.Sprintf("; %d to NodePorts of node %s", c, n)
	}
	return s
}

// WrongNode returns an error when the conntrack table the rules just read
// was most likely read on another node than the snapshot's: more of its
// flows were translated from NodePorts on that node's addresses than on
// this node's. kube-proxy translates a NodePort only on the node that
// owns the address, so such a table is that node's, and NodePort ghosts
// would be judged against the wrong frontends.
func WrongNode(rules []Rule, s *snapshot.Snapshot) error {
	for _, r := range rules {
		var c *conntrackRules
		switch r := r.(type) {
		case *StaleNATFlow:
			c = r.ct
		case *MisdeliveredFlow:
			c = r.ct
		}
		if c == nil {
			continue
		}
		f := snapshot.Derive(s, derived{c: c, kube: s.Kube, filter: true}, func() *suspectFilter { return nil })
		if f == nil {
			continue
		}
		if n, count := f.likelyNode(); n != "" {
			return fmt.Errorf("the conntrack table was most likely read on node %s, not %s: %d of its flows were translated from NodePorts on %s's addresses, %d on %s's; scan again with --node-name %s",
				n, s.NodeName, count, n, f.nodePorts, s.NodeName, n)
		}
	}
	return nil
}

// likelyNode names the other node whose NodePorts the most flows
// addressed, when more did than addressed this node's NodePorts
// (ClusterIPs are the same on every node and tell nothing).
func (f *suspectFilter) likelyNode() (string, int) {
	best, n := "", 0
	for node, c := range f.elsewhere {
		if c > n || (c == n && node < best) {
			best, n = node, c
		}
	}
	if n <= f.nodePorts {
		return "", 0
	}
	return best, n
}

// otherNodePort returns the node whose address f addresses on a NodePort,
// when that is not node and f was DNATed: kube-proxy there translated it.
func (ix *flowIndex) otherNodePort(f *snapshot.Flow, node string) string {
	if !f.DNAT() {
		return ""
	}
	n := ix.nodeAddrs[f.Orig.Dst.Unmap()]
	if n == "" || n == node {
		return ""
	}
	if _, ok := ix.frontends.nodePorts[protoPort{f.Proto, f.Orig.DstPort}]; !ok {
		return ""
	}
	return n
}

// stillStale returns nil when f is still a stale flow to svc in ix, and
// otherwise an error saying what the flow is now.
func (ix *flowIndex) stillStale(f *snapshot.Flow, svc snapshot.ObjectRef) error {
	switch v := ix.judge(f); {
	case v.verdict == notService && svc == (snapshot.ObjectRef{}):
		return fmt.Errorf("%s is in no service range any more", f.Frontend().Addr())
	case v.verdict == notService:
		return errors.New("the flow no longer addresses a frontend of " + svc.String())
	case v.frontend.Ref() != svc && v.frontend.Gone():
		return fmt.Errorf("%s is gone: the flow addresses a deleted Service now", svc)
	case v.frontend.Ref() != svc && svc == (snapshot.ObjectRef{}):
		return fmt.Errorf("the flow's address %s belongs to Service %s now", f.Frontend(), v.frontend.Ref())
	case v.frontend.Ref() != svc:
		return fmt.Errorf("the flow now addresses %s, not %s", v.frontend.Ref(), svc)
	case v.verdict == stale:
		return nil
	case v.verdict == healthy:
		return fmt.Errorf("%s is an endpoint of %s again", f.Backend(), svc)
	case v.verdict == draining:
		return fmt.Errorf("%s is draining: its pod is terminating but still exists", f.Backend())
	case v.verdict == unknownHolders:
		return fmt.Errorf("which pods hold %s is not known", f.Reply.Src.Unmap())
	case v.holder != nil:
		return fmt.Errorf("%s is held by pod %s", f.Reply.Src, v.holder.Ref())
	default:
		return fmt.Errorf("%s is held again (by a pod or a node)", f.Reply.Src)
	}
}

// clientPod returns the pod that provably opened f: the one pod that holds
// its source address, and that held it before the flow started (by more
// than the clock skew). A pod that merely holds the address now may have
// inherited it: then the client is named by its address only.
func (ix *flowIndex) clientPod(f *snapshot.Flow) *snapshot.Pod {
	if f.Start.IsZero() || !ix.knows(f.Orig.Src) {
		return nil
	}
	var found *snapshot.Pod
	for _, p := range ix.holders[f.Orig.Src.Unmap()] {
		if p.HostNetwork {
			return nil
		}
		if found != nil {
			return nil // two pods report the address: neither is proven
		}
		found = p
	}
	if found == nil || found.Since().IsZero() || !found.Since().Before(f.Start.Add(-ix.skew)) {
		return nil
	}
	return found
}

// concerns lists the objects an Event about f belongs on: the Service (or,
// when it was deleted, the node whose table holds the flow), and the client
// pod when it is proven.
func (ix *flowIndex) concerns(f *snapshot.Flow, svc *snapshot.Service, node string) []finding.ObjectRef {
	var out []finding.ObjectRef
	switch {
	case svc != nil:
		out = append(out, finding.ObjectRef{Kind: "Service", Namespace: svc.Namespace, Name: svc.Name})
	case node != "":
		out = append(out, finding.ObjectRef{Kind: "Node", Name: node})
	}
	if p := ix.clientPod(f); p != nil {
		out = append(out, finding.ObjectRef{Kind: "Pod", Namespace: p.Namespace, Name: p.Name, UID: p.UID})
	}
	return out
}

// serviceOf returns the Service a conntrack finding concerns.
func serviceOf(f finding.Finding) (snapshot.ObjectRef, bool) {
	for _, o := range f.Concerns {
		if o.Kind == "Service" {
			return snapshot.ObjectRef{Namespace: o.Namespace, Name: o.Name}, true
		}
	}
	ns, name, ok := strings.Cut(f.Subject.Service, "/")
	return snapshot.ObjectRef{Namespace: ns, Name: name}, ok
}
