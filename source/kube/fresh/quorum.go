package fresh

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"

	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source/kube"
)

// QuorumListed lists the resources Quorum lists beyond those
// source/kube/live's Informers watch (live.Watched): the ClusterRole of
// anything that re-checks with Quorum must grant list on each.
func QuorumListed() []schema.GroupResource {
	return []schema.GroupResource{{Group: networkingv1.GroupName, Resource: kube.ResourceIPAddresses}}
}

// Quorum reads what q names from the API server with quorum reads
// (resourceVersion unset: the answer is as current as etcd, never a cache
// that may lag), for a remedy's last re-check before it acts: each Service
// and its EndpointSlices, the pods that hold each address, each Node, and
// for each service address the Service it is booked to (its IPAddress
// object) with the cluster's ServiceCIDRs. An object that does not exist is
// absent from the result. It makes two requests per Service, one per
// address and one per Node, all of them lists (the permissions to list
// what the informers watch, and IPAddresses, are all it needs), all at
// once; a service address booked to a Service costs a second round trip.
//
// The API server selects pods by their first IP only (field selector
// status.podIP): in a dual-stack cluster a pod's address of the other
// family cannot be looked up. When a Node's pod CIDRs show that an address
// is of the second family, Quorum fails rather than report that no pod
// holds it; so it does when no Node gives pod CIDRs (Calico, Cilium's
// cluster pool, AWS's VPC CNI) and no pod was found at the address: which
// family comes first is then not known (QuorumFamilies says).
func Quorum(ctx context.Context, client kubernetes.Interface, q snapshot.Query) (*snapshot.Kube, error) {
	return QuorumFamilies(ctx, client, q, Families{})
}

// Families is what the pods a source watches show of the cluster's pod
// address families, for when no Node's pod CIDRs say it: a pod with two
// addresses gives their order (dual-stack); pods with one address each,
// all of one family, a single-stack network, where no pod holds an
// address of the other family.
type Families struct {
	// Known is false when no pod showed an address.
	Known bool
	// Dual is true when a pod has addresses of both families; First4
	// whether the first is IPv4 (the family of every pod's one address,
	// single-stack).
	Dual, First4 bool
}

// FamiliesOf returns what pods show of the families: host-network pods,
// whose addresses are the node's, aside.
func FamiliesOf(pods []snapshot.Pod) Families {
	var f Families
	for i := range pods {
		p := &pods[i]
		if p.HostNetwork || len(p.IPs) == 0 {
			continue
		}
		if len(p.IPs) > 1 && p.IPs[0].Is4() != p.IPs[1].Is4() {
			return Families{Known: true, Dual: true, First4: p.IPs[0].Is4()}
		}
		if f.Known && f.First4 != p.IPs[0].Is4() {
			// One address each, of both families: nothing is known.
			return Families{}
		}
		f = Families{Known: true, First4: p.IPs[0].Is4()}
	}
	return f
}

// QuorumFamilies is Quorum, told what the pods a source watches show of
// the families (fam) for when no Node's pod CIDRs say it.
func QuorumFamilies(ctx context.Context, client kubernetes.Interface, q snapshot.Query, fam Families) (*snapshot.Kube, error) {
	// The reads are independent: they run at once, so that a re-check
	// costs one round trip to the API server, not one per object.
	var (
		wg       sync.WaitGroup
		nodes    = make([]*corev1.Node, len(q.Nodes))
		services = make([]*corev1.Service, len(q.Services))
		epSlices = make([][]discoveryv1.EndpointSlice, len(q.Services))
		pods     = make([][]corev1.Pod, len(q.PodIPs))
		addrs    = make([]*networkingv1.IPAddress, len(q.ServiceIPs))
		cidrs    []networkingv1.ServiceCIDR
		errs     = make([]error, len(q.Nodes)+2*len(q.Services)+len(q.PodIPs)+len(q.ServiceIPs)+1)
	)
	read := func(i int, fn func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = fn()
		}()
	}
	n := 0
	for i, name := range q.Nodes {
		read(n, func() error {
			l, err := client.CoreV1().Nodes().List(ctx, byName(name))
			if err != nil {
				return fmt.Errorf("quorum read of node %s: %s", name, kube.DescribeError(err, kube.ResourceNodes))
			}
			nodes[i] = named(l.Items, name)
			return nil
		})
		n++
	}
	for i, ref := range q.Services {
		read(n, func() error {
			l, err := client.CoreV1().Services(ref.Namespace).List(ctx, byName(ref.Name))
			if err != nil {
				return fmt.Errorf("quorum read of service %s: %s", ref, kube.DescribeError(err, kube.ResourceServices))
			}
			services[i] = named(l.Items, ref.Name)
			return nil
		})
		read(n+1, func() error {
			sel := labels.Set{discoveryv1.LabelServiceName: ref.Name}.String()
			l, err := client.DiscoveryV1().EndpointSlices(ref.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
			if err != nil {
				return fmt.Errorf("quorum read of the EndpointSlices of %s: %s", ref, kube.DescribeError(err, kube.ResourceEndpointSlices))
			}
			epSlices[i] = l.Items
			return nil
		})
		n += 2
	}
	for i, a := range q.PodIPs {
		a = a.Unmap()
		read(n, func() error {
			sel := fields.OneTermEqualSelector("status.podIP", a.String()).String()
			l, err := client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: sel})
			if err != nil {
				return fmt.Errorf("quorum read of the pods holding %s: %s", a, kube.DescribeError(err, kube.ResourcePods))
			}
			pods[i] = l.Items
			return nil
		})
		n++
	}
	for i, a := range q.ServiceIPs {
		a = a.Unmap()
		read(n, func() error {
			// The ClusterIP allocator books every address it hands out
			// as an IPAddress object named after it, pointing to its
			// Service: none means no Service holds the address.
			l, err := client.NetworkingV1().IPAddresses().List(ctx, byName(a.String()))
			if err != nil {
				if apierrors.IsNotFound(err) {
					return fmt.Errorf("cannot prove that no Service holds %s: the API server does not serve IPAddresses (networking.k8s.io/v1, Kubernetes 1.33 and later)", a)
				}
				return fmt.Errorf("quorum read of the IPAddress %s: %s", a, kube.DescribeError(err, kube.ResourceIPAddresses))
			}
			addrs[i] = named(l.Items, a.String())
			return nil
		})
		n++
	}
	if len(q.ServiceIPs) > 0 {
		read(n, func() error {
			l, err := client.NetworkingV1().ServiceCIDRs().List(ctx, metav1.ListOptions{})
			if err != nil {
				return fmt.Errorf("quorum read of the ServiceCIDRs: %s", kube.DescribeError(err, kube.ResourceServiceCIDRs))
			}
			cidrs = l.Items
			return nil
		})
		n++
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	// The Services the addresses are booked to are read as q.Services are.
	var owners snapshot.Query
	for i, ip := range addrs {
		if ip == nil {
			continue
		}
		ref := ip.Spec.ParentRef
		if ref == nil || ref.Group != "" || ref.Resource != "services" {
			return nil, fmt.Errorf("%s is booked by IPAddress %s to %s, not to a Service", q.ServiceIPs[i].Unmap(), ip.Name, parentOf(ref))
		}
		svc := snapshot.ObjectRef{Namespace: ref.Namespace, Name: ref.Name}
		if !slices.Contains(q.Services, svc) {
			owners.Services = append(owners.Services, svc)
		}
	}

	k := &snapshot.Kube{}
	for i := range cidrs {
		k.ServiceCIDRs = append(k.ServiceCIDRs, kube.ServiceCIDR(&cidrs[i]))
	}
	if len(owners.Services) > 0 {
		ok, err := QuorumFamilies(ctx, client, owners, fam)
		if err != nil {
			return nil, err
		}
		k.Services, k.Endpoints = ok.Services, ok.Endpoints
	}
	var primary *bool // whether the pod network's first family is IPv4, when a Node says
	for _, nd := range nodes {
		if nd == nil {
			continue
		}
		k.Nodes = append(k.Nodes, kube.Node(nd))
		if primary == nil && len(nd.Spec.PodCIDRs) > 0 {
			if p, err := netip.ParsePrefix(nd.Spec.PodCIDRs[0]); err == nil {
				v4 := p.Addr().Is4()
				primary = &v4
			}
		}
	}
	for i, ref := range q.Services {
		if services[i] == nil {
			continue
		}
		k.Services = append(k.Services, kube.Service(services[i]))
		for j := range epSlices[i] {
			for _, ep := range kube.Endpoints(&epSlices[i][j]) {
				if ep.Service == ref {
					k.Endpoints = append(k.Endpoints, ep)
				}
			}
		}
	}
	if primary == nil && fam.Known && fam.Dual {
		primary = &fam.First4
	}
	for i, a := range q.PodIPs {
		a = a.Unmap()
		if primary != nil && a.Is4() != *primary {
			return nil, fmt.Errorf("cannot prove from the API server which pod holds %s: pods are selected by their first address only, and %s is of the cluster's second address family", a, a)
		}
		if primary == nil && !fam.Known && len(pods[i]) == 0 {
			return nil, fmt.Errorf("cannot prove from the API server that no pod holds %s: pods are selected by their first address only, and neither a Node's pod CIDRs nor the pods watched show whether %s is of the cluster's first address family", a, a)
		}
		for j := range pods[i] {
			p := kube.Pod(&pods[i][j])
			// Keep only what truly holds the address, whatever the server
			// selected.
			if p.HasIP(a) && !containsPod(k.Pods, p.UID) {
				k.Pods = append(k.Pods, p)
			}
		}
	}
	return k, nil
}

// Collect sets s.Kube to what Quorum reads of q, for the Fresh method of a
// source that watches the cluster (source.Fresher); it leaves s as it is
// when q names no cluster object (a gossip cluster only). It fails,
// leaving s untouched, without a client or when a read fails.
//
// fam is what the pods the source watches show of the pod address
// families (QuorumFamilies).
func Collect(ctx context.Context, client kubernetes.Interface, q snapshot.Query, fam Families, s *snapshot.Snapshot) error {
	if !q.Kube() {
		return nil
	}
	if client == nil {
		return errors.New("no Kubernetes client to re-check against the API server")
	}
	k, err := QuorumFamilies(ctx, client, q, fam)
	if err != nil {
		return err
	}
	s.Kube = k
	return nil
}

// parentOf names an IPAddress's parent, as "resource.group namespace/name".
func parentOf(ref *networkingv1.ParentReference) string {
	if ref == nil {
		return "nothing"
	}
	res := ref.Resource
	if ref.Group != "" {
		res += "." + ref.Group
	}
	return res + " " + snapshot.ObjectRef{Namespace: ref.Namespace, Name: ref.Name}.String()
}

// byName selects one object by name: a list, not a get, so that the
// permission to list and watch, which the informers need anyway, is all a
// re-check needs.
func byName(name string) metav1.ListOptions {
	return metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", name).String()}
}

// named returns the item called name, whatever the server selected.
func named[T any, PT interface {
	*T
	GetName() string
}](items []T, name string) PT {
	for i := range items {
		if PT(&items[i]).GetName() == name {
			return &items[i]
		}
	}
	return nil
}

func containsPod(ps []snapshot.Pod, uid string) bool {
	for i := range ps {
		if ps[i].UID == uid {
			return true
		}
	}
	return false
}
