package snapshot

import (
	"net/netip"
	"slices"
	"time"
)

// Kube is the trimmed view of the cluster objects the rules need. It is built
// from client-go informers or from kubectl output files; both paths convert
// through the same functions in source/kube.
type Kube struct {
	Pods      []Pod
	Services  []Service
	Endpoints []Endpoint
	Nodes     []Node
	// ServiceCIDRs are the cluster's service IP ranges, from the
	// networking.k8s.io/v1 ServiceCIDR objects (Kubernetes 1.33 and
	// later). A DNATed flow to an address in one of them that no Service
	// holds addressed a Service that was deleted.
	ServiceCIDRs []ServiceCIDR
	// NoServiceCIDRAPI is true when the API server does not serve
	// ServiceCIDRs (before Kubernetes 1.33).
	NoServiceCIDRAPI bool

	// APIClock is the API server's clock as the reader measured it: the
	// objects' own times (a pod's creation) are on it. A pod's startTime
	// is on its node's clock, which nothing measures: no proof reads it.
	APIClock Clock

	// Index, when set, is the index Pods are the records of, kept
	// current per event by a watcher of every pod: it knows the pods
	// that share an IP without a pass over every pod.
	Index *PodIndex

	// PodsPartial is true when Pods does not hold every pod of the
	// cluster: a node agent watches the pods of its own node (PodNode)
	// only, and asks the API server for the pods at the few addresses a
	// rule needs to know the holders of (Looked). A rule must then ask
	// KnowsHolders before it reads "no pod holds this address" into
	// Pods.
	PodsPartial bool
	// Missing are the kinds some rule reads that saved objects do not
	// hold ("Service", ...): the rules that read one are not judged.
	// SaveMissing is the command that saves them, %s standing for the
	// resources as kubectl get names them ("services,nodes").
	Missing     []string
	SaveMissing string
	// PodNode, when Pods is partial, is the node whose every pod Pods
	// holds ("" when none).
	PodNode string
	// Looked are, when Pods is partial, the addresses whose holders were
	// looked up: Pods holds every pod that held each when it was asked.
	Looked map[netip.Addr]bool
	// Unlooked are, when Pods is partial, the addresses whose holders
	// could not be looked up, each with why: the flows and reservations
	// they concern are not judged.
	Unlooked map[netip.Addr]string
}

// KnowsHolders reports whether Pods holds every pod that holds a: always
// when Pods holds the whole cluster, and otherwise when a was looked up
// or is an address of PodNode (only that node's hostNetwork pods hold
// it).
func (k *Kube) KnowsHolders(a netip.Addr) bool {
	a = a.Unmap()
	if !k.PodsPartial || k.Looked[a] {
		return true
	}
	if k.PodNode == "" {
		return false
	}
	for i := range k.Nodes {
		if k.Nodes[i].Name == k.PodNode && slices.Contains(k.Nodes[i].Addresses, a) {
			return true
		}
	}
	return false
}

// ServiceCIDR is one ServiceCIDR object: the ranges ClusterIPs are
// allocated from.
type ServiceCIDR struct {
	Name  string
	CIDRs []netip.Prefix
}

// ObjectRef names a namespaced object.
type ObjectRef struct {
	Namespace string
	Name      string
}

// String renders "namespace/name".
func (r ObjectRef) String() string {
	if r.Namespace == "" {
		return r.Name
	}
	return r.Namespace + "/" + r.Name
}

// Pod phases as Kubernetes reports them.
const (
	PodPending   = "Pending"
	PodRunning   = "Running"
	PodSucceeded = "Succeeded"
	PodFailed    = "Failed"
)

// Pod is a Pod trimmed to what the rules read.
type Pod struct {
	UID         string
	Namespace   string
	Name        string
	Node        string
	Phase       string
	IPs         []netip.Addr
	HostNetwork bool
	// Mapped marks the IPs the pod's status wrote IPv4-mapped
	// (::ffff:10.0.0.5), bit i for IPs[i]. Such an IP is kept as the IPv4
	// address it maps (10.0.0.5) on purpose: Kubernetes reads it so, and
	// the kernel, the IPAM ledgers and every other pod's record write it
	// so; the mark lets a finding say how the pod wrote it (WrittenAs), so
	// that two pods whose podIPs read differently are seen to hold one
	// address. A byte in the record's padding, not a slice per pod; an IP
	// beyond the eighth is not marked.
	Mapped uint8
	// Created is metadata.creationTimestamp; StartTime is status.startTime
	// (zero when the kubelet has not acknowledged the pod yet).
	Created   time.Time
	StartTime time.Time
	// Deleting is true once metadata.deletionTimestamp is set: the pod is
	// terminating but still exists.
	Deleting bool
}

// Ref returns the pod's namespace/name.
func (p *Pod) Ref() ObjectRef { return ObjectRef{p.Namespace, p.Name} }

// Terminal reports whether the pod has finished and no longer holds its IP.
func (p *Pod) Terminal() bool { return p.Phase == PodSucceeded || p.Phase == PodFailed }

// Since is the earliest moment the pod could have held an IP: its start
// time, or its creation time when the start time is unknown.
func (p *Pod) Since() time.Time {
	if !p.StartTime.IsZero() {
		return p.StartTime
	}
	return p.Created
}

// HoldsPodIP reports whether the pod's IPs are its own, taken from the pod
// network: it is not hostNetwork (which reports the node's address) and
// has not finished (its sandbox, and its IP, are gone).
func (p *Pod) HoldsPodIP() bool { return !p.HostNetwork && !p.Terminal() }

// WrittenAs returns the pod's IP ip as the pod's status wrote it:
// "::ffff:10.0.0.5" for an address written IPv4-mapped (Mapped, or an IP
// kept mapped), its own form otherwise.
func (p *Pod) WrittenAs(ip netip.Addr) string {
	for i, a := range p.IPs {
		if a.Unmap() != ip.Unmap() {
			continue
		}
		if a.Is4In6() || (i < 8 && p.Mapped&(1<<i) != 0) {
			return netip.AddrFrom16(a.As16()).String()
		}
		return a.String()
	}
	return ip.String()
}

// HasIP reports whether ip is one of the pod's IPs.
func (p *Pod) HasIP(ip netip.Addr) bool {
	for _, a := range p.IPs {
		if a == ip {
			return true
		}
	}
	return false
}

// Service types.
const (
	ServiceClusterIP    = "ClusterIP"
	ServiceNodePort     = "NodePort"
	ServiceLoadBalancer = "LoadBalancer"
	ServiceExternalName = "ExternalName"
)

// Service is a Service trimmed to its frontends.
type Service struct {
	Namespace string
	Name      string
	Type      string
	// ClusterIPs excludes "None" (headless services have none).
	ClusterIPs []netip.Addr
	// ExternalIPs is spec.externalIPs.
	ExternalIPs []netip.Addr
	// LoadBalancerIPs is status.loadBalancer.ingress[].ip.
	LoadBalancerIPs []netip.Addr
	Ports           []ServicePort
	// HasSelector is true when spec.selector is set: the EndpointSlice
	// controller then keeps the slices, and it only ever picks pods of
	// the Service's own namespace.
	HasSelector bool
}

// Ref returns the service's namespace/name.
func (s *Service) Ref() ObjectRef { return ObjectRef{s.Namespace, s.Name} }

// ServicePort is one port of a Service.
type ServicePort struct {
	Name     string
	Protocol Proto
	Port     uint16
	NodePort uint16 // 0 when none is allocated
}

// Endpoint is one address of one EndpointSlice, flattened and tied to the
// Service the slice belongs to (label kubernetes.io/service-name).
type Endpoint struct {
	Service ObjectRef
	Slice   string
	Address netip.Addr
	// Conditions as the EndpointSlice reports them. A nil condition in the
	// API is mapped as Kubernetes documents it: ready=nil means ready,
	// serving=nil means the value of ready, terminating=nil means false.
	Ready       bool
	Serving     bool
	Terminating bool
	// Pod is set when the endpoint's targetRef is a Pod; PodUID is the
	// targetRef's uid ("" when the slice gives none).
	Pod    *ObjectRef
	PodUID string
	Node   string
	// Since is when the process that watches the slices first saw this
	// address listed for this pod (PodUID): the pod held the address
	// from then on, or earlier. Zero when not known (saved objects).
	Since time.Time
}

// Node is a Node trimmed to its addresses.
type Node struct {
	Name      string
	Addresses []netip.Addr
	// PodCIDRs are spec.podCIDRs (or spec.podCIDR): the ranges the
	// node's pods get IPs from when the CNI plugin allocates from them
	// (host-local under flannel, kindnet and the like).
	PodCIDRs []netip.Prefix
}
