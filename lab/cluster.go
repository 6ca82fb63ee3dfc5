package lab

import (
	"context"
	"fmt"
	"net/netip"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes/fake"
)

// Cluster is the lab's in-memory Kubernetes API and the part of the control
// plane the incidents need: it stores Nodes, Services and Pods, and keeps one
// EndpointSlice per Service the way the EndpointSlice controller does
// (ready pods ready; terminating pods listed as terminating; deleted pods
// gone). ghostwatch reads it through client-go informers, exactly as it reads
// a real API server.
type Cluster struct {
	Client *fake.Clientset

	mu   sync.Mutex
	now  func() time.Time
	uids int
}

// NewCluster returns an empty cluster whose timestamps come from now.
func NewCluster(now func() time.Time) *Cluster {
	// The simple tracker: the lab never applies server-side, and the
	// field-managed one costs ~6 ms and much memory per write, which would
	// be counted in the benchmarks' latencies and memory as the agent's.
	return &Cluster{Client: fake.NewSimpleClientset(), now: now} //nolint:staticcheck // see above

}

// LabPort is one port of a lab Service.
type LabPort struct {
	Protocol   corev1.Protocol
	Port       int32
	TargetPort int32
	NodePort   int32
}

// AddNode registers a node with its addresses.
func (c *Cluster) AddNode(ctx context.Context, name string, addrs ...netip.Addr) error {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, UID: c.uid()}}
	for _, a := range addrs {
		n.Status.Addresses = append(n.Status.Addresses, corev1.NodeAddress{Type: corev1.NodeInternalIP, Address: a.String()})
	}
	_, err := c.Client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{})
	return err
}

// AddService creates a Service selecting pods labelled app=<selector>.
func (c *Cluster) AddService(ctx context.Context, ns, name, selector string, clusterIPs []netip.Addr, ports ...LabPort) error {
	s := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: c.uid()},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeClusterIP, Selector: map[string]string{"app": selector}},
	}
	for _, a := range clusterIPs {
		s.Spec.ClusterIPs = append(s.Spec.ClusterIPs, a.String())
	}
	if len(s.Spec.ClusterIPs) > 0 {
		s.Spec.ClusterIP = s.Spec.ClusterIPs[0]
	}
	for i, p := range ports {
		sp := corev1.ServicePort{Name: fmt.Sprintf("p%d", i), Protocol: p.Protocol, Port: p.Port,
			TargetPort: intstr.FromInt32(p.TargetPort), NodePort: p.NodePort}
		if p.NodePort != 0 {
			s.Spec.Type = corev1.ServiceTypeNodePort
		}
		s.Spec.Ports = append(s.Spec.Ports, sp)
	}
	if _, err := c.Client.CoreV1().Services(ns).Create(ctx, s, metav1.CreateOptions{}); err != nil {
		return err
	}
	return c.syncSlices(ctx, ns)
}

// AddPod creates a running, ready pod holding ips on node, labelled
// app=<app>. It returns the pod's UID.
func (c *Cluster) AddPod(ctx context.Context, ns, name, app, node string, ips ...netip.Addr) (string, error) {
	now := metav1.NewTime(c.now())
	uid := c.uid()
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: uid, Labels: map[string]string{"app": app},
			CreationTimestamp: now},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: app, Image: "lab"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, StartTime: &now,
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}}},
	}
	for _, a := range ips {
		p.Status.PodIPs = append(p.Status.PodIPs, corev1.PodIP{IP: a.String()})
	}
	if len(ips) > 0 {
		p.Status.PodIP = ips[0].String()
	}
	if _, err := c.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		return "", err
	}
	return string(uid), c.syncSlices(ctx, ns)
}

// TerminatePod marks a pod as terminating: deletionTimestamp set, not ready.
// It still exists and still holds its IP (it is draining).
func (c *Cluster) TerminatePod(ctx context.Context, ns, name string) error {
	p, err := c.Client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	now := metav1.NewTime(c.now())
	p.DeletionTimestamp = &now
	grace := int64(30)
	p.DeletionGracePeriodSeconds = &grace
	p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionFalse}}
	if _, err := c.Client.CoreV1().Pods(ns).Update(ctx, p, metav1.UpdateOptions{}); err != nil {
		return err
	}
	return c.syncSlices(ctx, ns)
}

// DeletePod removes a pod: its IP is free again.
func (c *Cluster) DeletePod(ctx context.Context, ns, name string) error {
	if err := c.Client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		return err
	}
	return c.syncSlices(ctx, ns)
}

func (c *Cluster) uid() types.UID {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.uids++
	return types.UID(fmt.Sprintf("00000000-0000-4000-8000-%012d", c.uids))
}

// syncSlices rewrites the EndpointSlices of every Service in ns from the
// pods its selector matches, as the EndpointSlice controller does.
func (c *Cluster) syncSlices(ctx context.Context, ns string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	svcs, err := c.Client.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	pods, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	sort.Slice(pods.Items, func(i, j int) bool { return pods.Items[i].Name < pods.Items[j].Name })
	for _, s := range svcs.Items {
		for _, fam := range []discoveryv1.AddressType{discoveryv1.AddressTypeIPv4, discoveryv1.AddressTypeIPv6} {
			if err := c.syncSlice(ctx, &s, pods.Items, fam); err != nil {
				return err
			}
		}
	}
	return nil
}

func (c *Cluster) syncSlice(ctx context.Context, s *corev1.Service, pods []corev1.Pod, fam discoveryv1.AddressType) error {
	name := s.Name + "-" + map[discoveryv1.AddressType]string{discoveryv1.AddressTypeIPv4: "v4", discoveryv1.AddressTypeIPv6: "v6"}[fam]
	slice := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Namespace: s.Namespace, Name: name,
			Labels: map[string]string{discoveryv1.LabelServiceName: s.Name}},
		AddressType: fam,
	}
	for _, sp := range s.Spec.Ports {
		port, proto, pname := sp.TargetPort.IntVal, sp.Protocol, sp.Name
		slice.Ports = append(slice.Ports, discoveryv1.EndpointPort{Name: &pname, Port: &port, Protocol: &proto})
	}
	for i := range pods {
		p := &pods[i]
		if p.Labels["app"] != s.Spec.Selector["app"] {
			continue
		}
		terminating := p.DeletionTimestamp != nil
		ready := !terminating
		serving := true
		for _, ip := range p.Status.PodIPs {
			a, err := netip.ParseAddr(ip.IP)
			if err != nil || a.Is4() != (fam == discoveryv1.AddressTypeIPv4) {
				continue
			}
			node := p.Spec.NodeName
			slice.Endpoints = append(slice.Endpoints, discoveryv1.Endpoint{
				Addresses:  []string{a.String()},
				Conditions: discoveryv1.EndpointConditions{Ready: &ready, Serving: &serving, Terminating: &terminating},
				NodeName:   &node,
				TargetRef:  &corev1.ObjectReference{Kind: "Pod", Namespace: p.Namespace, Name: p.Name, UID: p.UID},
			})
		}
	}
	api := c.Client.DiscoveryV1().EndpointSlices(s.Namespace)
	if _, err := api.Get(ctx, name, metav1.GetOptions{}); err != nil {
		_, err = api.Create(ctx, slice, metav1.CreateOptions{})
		return err
	}
	_, err := api.Update(ctx, slice, metav1.UpdateOptions{})
	return err
}
