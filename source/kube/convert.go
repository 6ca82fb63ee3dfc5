package kube

import (
	"net/netip"
	"slices"
	"strings"
	"time"
	"unique"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilsnet "k8s.io/utils/net"

	"github.com/ghostwatch/ghostwatch/snapshot"
)

// Name is the source name recorded in snapshots.
const Name = "kube"

// Pod converts a Pod. Its IPs are status.podIPs, or status.podIP when podIPs
// is empty; addresses that do not parse are skipped. An IPv4-mapped IPv6
// address (::ffff:10.0.0.5) is kept as the IPv4 address it maps, as
// ParseIP unmaps every address, and marked in Mapped.
func Pod(p *corev1.Pod) snapshot.Pod {
	out := snapshot.Pod{
		UID:         string(p.UID),
		Namespace:   p.Namespace,
		Name:        p.Name,
		Node:        p.Spec.NodeName,
		Phase:       string(p.Status.Phase),
		HostNetwork: p.Spec.HostNetwork,
		Created:     utc(p.CreationTimestamp.Time),
		Deleting:    p.DeletionTimestamp != nil,
	}
	if p.Status.StartTime != nil {
		out.StartTime = utc(p.Status.StartTime.Time)
	}
	for _, pip := range p.Status.PodIPs {
		out.IPs, out.Mapped = appendPodIP(out.IPs, out.Mapped, pip.IP)
	}
	if len(p.Status.PodIPs) == 0 {
		out.IPs, out.Mapped = appendPodIP(out.IPs, out.Mapped, p.Status.PodIP)
	}
	return out
}

// appendPodIP is appendIP for a pod's IPs: it also marks in mapped the IP
// it appends when s writes it IPv4-mapped (snapshot.Pod.Mapped).
func appendPodIP(ips []netip.Addr, mapped uint8, s string) ([]netip.Addr, uint8) {
	n := len(ips)
	ips = appendIP(ips, s)
	if a, err := netip.ParseAddr(s); err == nil && a.Is4In6() && len(ips) > n && n < 8 {
		mapped |= 1 << n
	}
	return ips, mapped
}

// Service converts a Service. ClusterIPs come from spec.clusterIPs, or
// spec.clusterIP when clusterIPs is empty, without "None" (headless) and "";
// an empty spec.type means ClusterIP, as the API server defaults it. A port
// whose protocol is not TCP, UDP or SCTP (empty means TCP) or whose number is
// out of range is skipped, as are addresses that do not parse.
func Service(s *corev1.Service) snapshot.Service {
	out := snapshot.Service{
		Namespace: s.Namespace,
		Name:      s.Name,
		Type:      string(s.Spec.Type),

		HasSelector: len(s.Spec.Selector) > 0,
	}
	if out.Type == "" {
		out.Type = snapshot.ServiceClusterIP
	}
	cips := s.Spec.ClusterIPs
	if len(cips) == 0 {
		cips = []string{s.Spec.ClusterIP}
	}
	for _, ip := range cips {
		if ip != corev1.ClusterIPNone {
			out.ClusterIPs = appendIP(out.ClusterIPs, ip)
		}
	}
	for _, ip := range s.Spec.ExternalIPs {
		out.ExternalIPs = appendIP(out.ExternalIPs, ip)
	}
	for _, ing := range s.Status.LoadBalancer.Ingress {
		out.LoadBalancerIPs = appendIP(out.LoadBalancerIPs, ing.IP)
	}
	for _, sp := range s.Spec.Ports {
		proto := snapshot.ProtoTCP
		if sp.Protocol != "" {
			var ok bool
			if proto, ok = snapshot.ParseProto(string(sp.Protocol)); !ok {
				continue
			}
		}
		port, ok := portNumber(sp.Port)
		if !ok || port == 0 {
			continue
		}
		nodePort, _ := portNumber(sp.NodePort)
		out.Ports = append(out.Ports, snapshot.ServicePort{
			Name:     sp.Name,
			Protocol: proto,
			Port:     port,
			NodePort: nodePort,
		})
	}
	return out
}

// Endpoints flattens an EndpointSlice into one Endpoint per address. A slice
// without the kubernetes.io/service-name label belongs to no Service and
// yields nothing; addresses that do not parse (FQDN slices) are skipped.
// Conditions are mapped as snapshot.Endpoint documents: ready=nil is ready,
// serving=nil is the value of ready, terminating=nil is false.
func Endpoints(es *discoveryv1.EndpointSlice) []snapshot.Endpoint {
	svc := es.Labels[discoveryv1.LabelServiceName]
	if svc == "" {
		return nil
	}
	ref := snapshot.ObjectRef{Namespace: es.Namespace, Name: svc}
	// A node holds every endpoint of the cluster's Services: sized once,
	// and the strings every endpoint repeats (its namespace, its node's
	// name) shared.
	n := 0
	for i := range es.Endpoints {
		n += len(es.Endpoints[i].Addresses)
	}
	if n == 0 {
		return nil
	}
	out := make([]snapshot.Endpoint, 0, n)
	for i := range es.Endpoints {
		ep := &es.Endpoints[i]
		ready := ep.Conditions.Ready == nil || *ep.Conditions.Ready
		serving := ready
		if ep.Conditions.Serving != nil {
			serving = *ep.Conditions.Serving
		}
		terminating := ep.Conditions.Terminating != nil && *ep.Conditions.Terminating
		var node string
		if ep.NodeName != nil {
			node = unique.Make(*ep.NodeName).Value()
		}
		var pod *snapshot.ObjectRef
		var podUID string
		if tr := ep.TargetRef; tr != nil && tr.Kind == "Pod" && (tr.APIVersion == "" || tr.APIVersion == "v1") {
			ns := tr.Namespace
			if ns == "" || ns == es.Namespace {
				ns = es.Namespace
			}
			pod, podUID = &snapshot.ObjectRef{Namespace: ns, Name: tr.Name}, string(tr.UID)
		}
		for _, a := range ep.Addresses {
			ip, ok := ParseIP(a)
			if !ok {
				continue
			}
			e := snapshot.Endpoint{
				Service:     ref,
				Slice:       es.Name,
				Address:     ip,
				Ready:       ready,
				Serving:     serving,
				Terminating: terminating,
				Node:        node,
			}
			if pod != nil {
				p := *pod
				e.Pod, e.PodUID = &p, podUID
			}
			out = append(out, e)
		}
	}
	return out
}

// Node converts a Node: its addresses are the status.addresses of type
// InternalIP and ExternalIP that parse as IPs, without repeats.
func Node(n *corev1.Node) snapshot.Node {
	out := snapshot.Node{Name: n.Name}
	for _, a := range n.Status.Addresses {
		if a.Type == corev1.NodeInternalIP || a.Type == corev1.NodeExternalIP {
			out.Addresses = appendIP(out.Addresses, a.Address)
		}
	}
	cidrs := n.Spec.PodCIDRs
	if len(cidrs) == 0 && n.Spec.PodCIDR != "" {
		cidrs = []string{n.Spec.PodCIDR}
	}
	for _, c := range cidrs {
		if p, err := netip.ParsePrefix(c); err == nil {
			out.PodCIDRs = append(out.PodCIDRs, p.Masked())
		}
	}
	return out
}

// ServiceCIDR converts a ServiceCIDR: the prefixes of spec.cidrs that
// parse, masked.
func ServiceCIDR(c *networkingv1.ServiceCIDR) snapshot.ServiceCIDR {
	out := snapshot.ServiceCIDR{Name: c.Name}
	for _, s := range c.Spec.CIDRs {
		if p, err := netip.ParsePrefix(s); err == nil {
			out.CIDRs = append(out.CIDRs, p.Masked())
		}
	}
	return out
}

// LookupNode returns the node called name in k.
func LookupNode(k *snapshot.Kube, name string) (*snapshot.Node, bool) {
	if k == nil {
		return nil, false
	}
	for i := range k.Nodes {
		if k.Nodes[i].Name == name {
			return &k.Nodes[i], true
		}
	}
	return nil, false
}

// TrimPod is an informer transform (cache.TransformFunc) that keeps only what
// Pod reads, plus the resourceVersion informers need, so that a big cluster's
// pods cost little memory: uid, name, namespace, creation and deletion
// timestamps, resourceVersion, spec.nodeName, spec.hostNetwork, status.phase,
// status.podIP(s) and status.startTime; no annotation (TrimPodKeeping keeps
// some). Anything that is not a *v1.Pod (such as
// cache.DeletedFinalStateUnknown) is returned unchanged. It never modifies
// its argument and is idempotent.
func TrimPod(obj any) (any, error) { return trimPod(obj, nil) }

// TrimPodKeeping returns an informer transform that trims a Pod as TrimPod
// does, but keeps the annotations whose keys start with one of prefixes,
// for a caller that reads them: the controller finds the gossip agents by
// theirs (source/gossip's AnnotationPrefix).
func TrimPodKeeping(prefixes ...string) func(obj any) (any, error) {
	prefixes = slices.Clone(prefixes)
	return func(obj any) (any, error) { return trimPod(obj, prefixes) }
}

func trimPod(obj any, keep []string) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok || p == nil {
		return obj, nil
	}
	out := &corev1.Pod{
		TypeMeta: p.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			UID:               p.UID,
			Name:              p.Name,
			Namespace:         p.Namespace,
			ResourceVersion:   p.ResourceVersion,
			CreationTimestamp: p.CreationTimestamp,
			DeletionTimestamp: p.DeletionTimestamp.DeepCopy(),
		},
		Spec: corev1.PodSpec{
			NodeName:    p.Spec.NodeName,
			HostNetwork: p.Spec.HostNetwork,
		},
		Status: corev1.PodStatus{
			Phase:     p.Status.Phase,
			PodIP:     p.Status.PodIP,
			StartTime: p.Status.StartTime.DeepCopy(),
		},
	}
	if len(p.Status.PodIPs) > 0 {
		out.Status.PodIPs = append([]corev1.PodIP(nil), p.Status.PodIPs...)
	}
	for k, v := range p.Annotations {
		if slices.ContainsFunc(keep, func(prefix string) bool { return strings.HasPrefix(k, prefix) }) {
			if out.Annotations == nil {
				out.Annotations = map[string]string{}
			}
			out.Annotations[k] = v
		}
	}
	return out, nil
}

// TrimNode is the informer transform for Nodes: it keeps the metadata the
// informer needs, the addresses and the pod CIDRs, and drops the rest
// (images, conditions, ...), which is most of a Node. It never modifies its argument and is
// idempotent.
func TrimNode(obj any) (any, error) {
	n, ok := obj.(*corev1.Node)
	if !ok || n == nil {
		return obj, nil
	}
	return &corev1.Node{
		TypeMeta: n.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			UID:               n.UID,
			Name:              n.Name,
			ResourceVersion:   n.ResourceVersion,
			CreationTimestamp: n.CreationTimestamp,
		},
		Spec: corev1.NodeSpec{
			PodCIDR:  n.Spec.PodCIDR,
			PodCIDRs: append([]string(nil), n.Spec.PodCIDRs...),
		},
		Status: corev1.NodeStatus{
			Addresses: append([]corev1.NodeAddress(nil), n.Status.Addresses...),
		},
	}, nil
}

// TrimMeta is the informer transform for Services, EndpointSlices and
// ServiceCIDRs: it drops managedFields and annotations
// (last-applied-configuration can be the largest part of an object) and
// keeps everything else.
func TrimMeta(obj any) (any, error) {
	switch o := obj.(type) {
	case *corev1.Service:
		return withoutMeta(o), nil
	case *discoveryv1.EndpointSlice:
		return withoutMeta(o), nil
	case *networkingv1.ServiceCIDR:
		return withoutMeta(o), nil
	}
	return obj, nil
}

// withoutMeta returns a copy of o without managedFields and annotations.
func withoutMeta[T any, PT interface {
	*T
	metav1.Object
}](o PT) any {
	if o == nil {
		return o
	}
	c := PT(new(T))
	*c = *o
	c.SetManagedFields(nil)
	c.SetAnnotations(nil)
	return c
}

func utc(t time.Time) time.Time {
	if t.IsZero() {
		return time.Time{}
	}
	return t.UTC()
}

// portNumber converts an API port number; 0 is valid (no port), negative or
// too large ones are not.
func portNumber(p int32) (uint16, bool) {
	if p < 0 || p > 65535 {
		return 0, false
	}
	return uint16(p), true
}

// appendIP appends s to ips if it parses and is not already there.
func appendIP(ips []netip.Addr, s string) []netip.Addr {
	ip, ok := ParseIP(s)
	if !ok {
		return ips
	}
	for _, a := range ips {
		if a == ip {
			return ips
		}
	}
	return append(ips, ip)
}

// ParseIP parses an address as the API server accepts it: IPv4 may carry
// leading zeros, which old clusters let through and which mean decimal
// (k8s.io/utils/net.ParseIPSloppy); IPv4-mapped IPv6 addresses are
// unmapped; zones are refused.
func ParseIP(s string) (netip.Addr, bool) {
	ip, err := netip.ParseAddr(s)
	if err != nil {
		a, ok := netip.AddrFromSlice(utilsnet.ParseIPSloppy(s))
		return a.Unmap(), ok
	}
	if ip.Zone() != "" {
		return netip.Addr{}, false
	}
	return ip.Unmap(), true
}
