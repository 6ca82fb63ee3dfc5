package kube

import (
	"context"
	"fmt"
	"net/netip"

	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"

	"github.com/ghostwatch/ghostwatch/snapshot"
)

// Quorum reads what q names from the API server with quorum reads
// (resourceVersion unset: the answer is as current as etcd, never a cache
// that may lag), for a remedy's last re-check before it acts: each Service
// and its EndpointSlices, the pods that hold each address, each Node. An
// object that does not exist is absent from the result. It makes two
// requests per Service, one per address and one per Node, all of them
// lists: the permissions the informers need are all it needs.
//
// The API server selects pods by their first IP only (field selector
// status.podIP): in a dual-stack cluster a pod's address of the other
// family cannot be looked up. When a Node's pod CIDRs show that an address
// is of the second family, Quorum fails rather than report that no pod
// holds it.
func Quorum(ctx context.Context, client kubernetes.Interface, q snapshot.KubeQuery) (*snapshot.Kube, error) {
	k := &snapshot.Kube{}
	var primary *bool // whether the pod network's first family is IPv4, when a Node says
	for _, name := range q.Nodes {
		nodes, err := client.CoreV1().Nodes().List(ctx, byName(name))
		if err != nil {
			return nil, fmt.Errorf("quorum read of node %s: %s", name, describe(err, resNodes))
		}
		n := named(nodes.Items, name)
		if n == nil {
			continue
		}
		k.Nodes = append(k.Nodes, Node(n))
		if primary == nil && len(n.Spec.PodCIDRs) > 0 {
			if p, err := netip.ParsePrefix(n.Spec.PodCIDRs[0]); err == nil {
				v4 := p.Addr().Is4()
				primary = &v4
			}
		}
	}
	for _, ref := range q.Services {
		svcs, err := client.CoreV1().Services(ref.Namespace).List(ctx, byName(ref.Name))
		if err != nil {
			return nil, fmt.Errorf("quorum read of service %s: %s", ref, describe(err, resServices))
		}
		svc := named(svcs.Items, ref.Name)
		if svc == nil {
			continue
		}
		k.Services = append(k.Services, Service(svc))
		sel := labels.Set{discoveryv1.LabelServiceName: ref.Name}.String()
		slices, err := client.DiscoveryV1().EndpointSlices(ref.Namespace).List(ctx, metav1.ListOptions{LabelSelector: sel})
		if err != nil {
			return nil, fmt.Errorf("quorum read of the EndpointSlices of %s: %s", ref, describe(err, resEndpointSlices))
		}
		for i := range slices.Items {
			for _, ep := range Endpoints(&slices.Items[i]) {
				if ep.Service == ref {
					k.Endpoints = append(k.Endpoints, ep)
				}
			}
		}
	}
	for _, a := range q.PodIPs {
		a = a.Unmap()
		if primary != nil && a.Is4() != *primary {
			return nil, fmt.Errorf("cannot prove from the API server which pod holds %s: pods are selected by their first address only, and %s is of the cluster's second address family", a, a)
		}
		sel := fields.OneTermEqualSelector("status.podIP", a.String()).String()
		pods, err := client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: sel})
		if err != nil {
			return nil, fmt.Errorf("quorum read of the pods holding %s: %s", a, describe(err, resPods))
		}
		for i := range pods.Items {
			p := Pod(&pods.Items[i])
			// Keep only what truly holds the address, whatever the server
			// selected.
			if p.HasIP(a) && !containsPod(k.Pods, p.UID) {
				k.Pods = append(k.Pods, p)
			}
		}
	}
	return k, nil
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
