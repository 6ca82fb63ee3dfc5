package apicost

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
	"net/netip"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
)

// Sizes are the cluster a run builds and the churn it drives.
type Sizes struct {
	// Pods are spread evenly over the Nodes and the Services.
	Pods int `json:"pods"`
	// Nodes are Node objects; the first is the measured node, the only
	// one with a namespace, kube-proxy and the agent.
	Nodes int `json:"nodes"`
	// Services are ClusterIP Services, each selecting an equal share of
	// the pods on one TCP port.
	Services int `json:"services"`
	// Replacements are pods deleted (grace period 1s) and each replaced by
	// a new pod of the same Service on the same node, spread over every
	// node and Service.
	Replacements int `json:"replacements"`
	// Rate is replacements begun per second.
	Rate float64 `json:"rate"`
}

// DefaultSizes is the cluster the agent is to be measured on: 15,000 pods
// on 100 Nodes, 500 Services, 1,000 replacements at 20 a second.
func DefaultSizes() Sizes {
	return Sizes{Pods: 15000, Nodes: 100, Services: 500, Replacements: 1000, Rate: 20}
}

// churnGrace is the grace period of the replaced pods: short, so that the
// churn ends soon after its last replacement.
const churnGrace = 1 * time.Second

// servicesPerNamespace spreads the Services over namespaces apps-0,
// apps-1, ... as teams would.
const servicesPerNamespace = 50

// layout places pods on Nodes and in Services and gives every Node its
// addresses: node i has InternalIP 172.31.0.0+i+1 and the i-th pod CIDR of
// bits bits in 10.244.0.0/16.
type layout struct {
	Sizes
	bits       int
	namespaces int
}

func newLayout(s Sizes) (layout, error) {
	switch {
	case s.Pods < 1 || s.Nodes < 1 || s.Services < 1 || s.Replacements < 0:
		return layout{}, fmt.Errorf("sizes %+v: want at least a pod, a node and a Service, and no negative replacements", s)
	case s.Services > s.Pods:
		return layout{}, fmt.Errorf("%d Services for %d pods: want at least one pod per Service", s.Services, s.Pods)
	case s.Rate <= 0:
		return layout{}, fmt.Errorf("replacement rate %g/s: want more than 0", s.Rate)
	case s.Nodes > 65000:
		return layout{}, fmt.Errorf("%d nodes: at most 65000 fit 172.31.0.0/16", s.Nodes)
	}
	// A node holds its share of pods, and for a while each replacement
	// beside the pod it replaces.
	need := ceilDiv(s.Pods, s.Nodes) + ceilDiv(s.Replacements, s.Nodes) + 16
	l := layout{Sizes: s, namespaces: ceilDiv(s.Services, servicesPerNamespace)}
	for l.bits = 30; l.bits >= 16; l.bits-- {
		if 1<<(32-l.bits)-2 >= need {
			break
		}
	}
	if l.bits < 16 || s.Nodes > 1<<(l.bits-16) {
		return layout{}, fmt.Errorf("%d nodes of %d pods each do not fit 10.244.0.0/16: use more nodes or fewer pods", s.Nodes, need)
	}
	return l, nil
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }

func (l layout) nodeName(i int) string { return fmt.Sprintf("node-%d", i) }

func (l layout) nodeIP(i int) netip.Addr {
	return addrAdd(netip.MustParseAddr("172.31.0.0"), uint32(i+1))
}

func (l layout) podCIDR(i int) netip.Prefix {
	return netip.PrefixFrom(addrAdd(netip.MustParseAddr("10.244.0.0"), uint32(i)<<(32-l.bits)), l.bits)
}

func addrAdd(a netip.Addr, n uint32) netip.Addr {
	b := a.As4()
	binary.BigEndian.PutUint32(b[:], binary.BigEndian.Uint32(b[:])+n)
	return netip.AddrFrom4(b)
}

func (l layout) namespace(svc int) string { return fmt.Sprintf("apps-%d", svc%l.namespaces) }
func (l layout) service(svc int) string   { return fmt.Sprintf("svc-%d", svc) }

// slotService and slotNode place pod slot j: Services in turn, and nodes
// shifted by one at each round of the Services, so that a Service's pods
// spread over many nodes.
func (l layout) slotService(j int) int { return j % l.Services }
func (l layout) slotNode(j int) int    { return (j + j/l.Services) % l.Nodes }

// podRef is the pod that holds a slot.
type podRef struct{ namespace, name string }

// podName names the seq-th pod of a Service as a ReplicaSet would.
func (l layout) podName(svc, seq int) string {
	return l.service(svc) + "-" + l.templateHash(svc) + "-" + stableString(fmt.Sprint("pod", seq), 5)
}

func (l layout) templateHash(svc int) string { return stableString(l.service(svc), 10) }

// stableString is n (at most 13) characters of the alphabet Kubernetes
// names objects with, derived from s.
func stableString(s string, n int) string {
	const alphabet = "bcdfghjklmnpqrstvwxz2456789"
	h := fnv.New64a()
	h.Write([]byte(s))
	v := h.Sum64()
	out := make([]byte, n)
	for i := range out {
		out[i] = alphabet[v%uint64(len(alphabet))]
		v /= uint64(len(alphabet))
	}
	return string(out)
}

// pod is the seq-th pod, for slot j: a Deployment's pod as the API server
// stores it once a scheduler bound it, the same in every run.
func (l layout) pod(j, seq int) *corev1.Pod {
	svc, node := l.slotService(j), l.slotNode(j)
	name, hash := l.service(svc), l.templateHash(svc)
	h := fnv.New128a()
	h.Write([]byte(name + "-" + hash))
	u := h.Sum(nil)
	rsUID := types.UID(fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16]))
	grace := int64(30)
	probe := func(period int32) *corev1.Probe {
		return &corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/healthz", Port: intstr.FromString("http")}},
			PeriodSeconds: period, TimeoutSeconds: 1, SuccessThreshold: 1, FailureThreshold: 3}
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: l.namespace(svc), Name: l.podName(svc, seq),
			Labels: map[string]string{"app": name, "app.kubernetes.io/name": name, "app.kubernetes.io/part-of": "shop", "pod-template-hash": hash},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: name + "-" + hash, UID: rsUID,
				Controller: new(true), BlockOwnerDeletion: new(true)}},
		},
		Spec: corev1.PodSpec{
			NodeName:                      l.nodeName(node),
			TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{
				Name:  "app",
				Image: "registry.example.com/shop/" + name + ":1.27.3",
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080, Protocol: corev1.ProtocolTCP}},
				Env: []corev1.EnvVar{
					{Name: "LOG_LEVEL", Value: "info"},
					{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
				},
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi")},
					Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse("256Mi")},
				},
				ReadinessProbe: probe(10),
				LivenessProbe:  probe(20),
			}},
		},
	}
}

// serviceObject is Service svc: ClusterIP, selecting its pods, one TCP
// port.
func (l layout) serviceObject(svc int) *corev1.Service {
	name := l.service(svc)
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: l.namespace(svc), Name: name, Labels: map[string]string{"app.kubernetes.io/name": name}},
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeClusterIP,
			Selector: map[string]string{"app": name},
			Ports:    []corev1.ServicePort{{Name: "http", Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: intstr.FromString("http")}},
		},
	}
}

// apiKubelet writes what the lab's kubelet stand-in
// (controlplane.Kubelet) writes for a pod, and in the same order, without
// running anything: no namespace, no workload. On start: the status
// Running and Ready with an address from the node's pod CIDR. On a
// graceful delete: the status not ready, then, once the grace period is
// over, the delete with grace period 0 and the pod's UID as precondition.
type apiKubelet struct {
	client kubernetes.Interface
	l      layout
	mu     sync.Mutex
	ipam   map[int]*nodeIPAM
}

// nodeIPAM hands out a node's pod CIDR in order, wrapping around, as
// host-local does.
type nodeIPAM struct {
	cidr netip.Prefix
	next netip.Addr
	used map[netip.Addr]bool
}

func newAPIKubelet(c kubernetes.Interface, l layout) *apiKubelet {
	return &apiKubelet{client: c, l: l, ipam: map[int]*nodeIPAM{}}
}

func (k *apiKubelet) allocate(node int) (netip.Addr, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	a := k.ipam[node]
	if a == nil {
		cidr := k.l.podCIDR(node)
		a = &nodeIPAM{cidr: cidr, next: cidr.Addr().Next(), used: map[netip.Addr]bool{}}
		k.ipam[node] = a
	}
	size := 1<<(32-a.cidr.Bits()) - 2
	for range size {
		ip := a.next
		if a.next = ip.Next(); !a.cidr.Contains(a.next) || a.next == lastAddr(a.cidr) {
			a.next = a.cidr.Addr().Next()
		}
		if !a.used[ip] {
			a.used[ip] = true
			return ip, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("pod CIDR %s of %s exhausted", a.cidr, k.l.nodeName(node))
}

func lastAddr(p netip.Prefix) netip.Addr {
	return addrAdd(p.Masked().Addr(), uint32(1)<<(32-p.Bits())-1)
}

func (k *apiKubelet) release(node int, ip string) {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if m := k.ipam[node]; m != nil {
		delete(m.used, a)
	}
}

// start reports p, bound to node, Running and Ready.
func (k *apiKubelet) start(ctx context.Context, p *corev1.Pod, node int) error {
	ip, err := k.allocate(node)
	if err != nil {
		return err
	}
	st := p.DeepCopy()
	now := metav1.Now()
	hostIP := k.l.nodeIP(node).String()
	st.Status.Phase = corev1.PodRunning
	st.Status.StartTime = &now
	st.Status.PodIP = ip.String()
	st.Status.PodIPs = []corev1.PodIP{{IP: ip.String()}}
	st.Status.HostIP = hostIP
	st.Status.HostIPs = []corev1.HostIP{{IP: hostIP}}
	setReady(st, true)
	if _, err := k.client.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, st, metav1.UpdateOptions{}); err != nil {
		k.release(node, ip.String())
		return fmt.Errorf("pod %s/%s status: %w", p.Namespace, p.Name, err)
	}
	return nil
}

// terminate follows a graceful delete: p is the pod the delete returned
// (with its deletion timestamp and grace period), deleted at deletedAt. It
// reports p not ready, waits out the grace period and deletes p for good.
func (k *apiKubelet) terminate(ctx context.Context, p *corev1.Pod, node int, deletedAt time.Time) error {
	st := p.DeepCopy()
	setReady(st, false)
	if _, err := k.client.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, st, metav1.UpdateOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("pod %s/%s not ready: %w", p.Namespace, p.Name, err)
	}
	grace := time.Duration(0)
	if p.DeletionGracePeriodSeconds != nil {
		grace = time.Duration(*p.DeletionGracePeriodSeconds) * time.Second
	}
	// The grace period itself, not a stand-in for a condition.
	timer := time.NewTimer(time.Until(deletedAt.Add(grace)))
	defer timer.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-timer.C:
	}
	uid := p.UID
	err := k.client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{
		GracePeriodSeconds: new(int64), Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		return fmt.Errorf("pod %s/%s: %w", p.Namespace, p.Name, err)
	}
	k.release(node, p.Status.PodIP)
	return nil
}

// setReady sets the Ready and ContainersReady conditions, as the stand-in
// does.
func setReady(p *corev1.Pod, ready bool) {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	now := metav1.Now()
	conds := []corev1.PodCondition{}
	for _, c := range p.Status.Conditions {
		if c.Type != corev1.PodReady && c.Type != corev1.ContainersReady {
			conds = append(conds, c)
		}
	}
	for _, t := range []corev1.PodConditionType{corev1.PodReady, corev1.ContainersReady} {
		conds = append(conds, corev1.PodCondition{Type: t, Status: status, LastTransitionTime: now})
	}
	p.Status.Conditions = conds
}

// parallel runs fn(0..n-1) on workers goroutines and returns the first
// error; the others stop taking work then.
func parallel(ctx context.Context, n, workers int, fn func(context.Context, int) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(workers, n) {
		wg.Go(func() {
			for i := range next {
				if err := fn(ctx, i); err != nil {
					cancel(err)
				}
			}
		})
	}
feed:
	for i := range n {
		select {
		case next <- i:
		case <-ctx.Done():
			break feed
		}
	}
	close(next)
	wg.Wait()
	if err := context.Cause(ctx); err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return ctx.Err()
}

// populate builds the cluster: the namespaces, every Node (register, which
// is controlplane's RegisterNode), every pod (created bound to its node,
// then started by k) and, last, the Services, so that the EndpointSlice
// controller writes each slice once, whole. It returns the pod holding
// each slot.
func (l layout) populate(ctx context.Context, c kubernetes.Interface, k *apiKubelet, workers int,
	register func(ctx context.Context, name string, ip netip.Addr, podCIDR netip.Prefix) error, progress func(string, ...any)) ([]podRef, error) {
	for i := range l.namespaces {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("apps-%d", i)}}
		if _, err := c.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil {
			return nil, fmt.Errorf("namespace %s: %w", ns.Name, err)
		}
	}
	if err := parallel(ctx, l.Nodes, workers, func(ctx context.Context, i int) error {
		return register(ctx, l.nodeName(i), l.nodeIP(i), l.podCIDR(i))
	}); err != nil {
		return nil, err
	}
	progress("%d Nodes registered", l.Nodes)
	slots := make([]podRef, l.Pods)
	var mu sync.Mutex
	done := 0
	if err := parallel(ctx, l.Pods, workers, func(ctx context.Context, j int) error {
		p := l.pod(j, j)
		created, err := c.CoreV1().Pods(p.Namespace).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("pod %s/%s: %w", p.Namespace, p.Name, err)
		}
		if err := k.start(ctx, created, l.slotNode(j)); err != nil {
			return err
		}
		slots[j] = podRef{namespace: p.Namespace, name: p.Name}
		mu.Lock()
		defer mu.Unlock()
		if done++; done%1000 == 0 {
			progress("%d of %d pods created and started", done, l.Pods)
		}
		return nil
	}); err != nil {
		return nil, err
	}
	if err := parallel(ctx, l.Services, workers, func(ctx context.Context, s int) error {
		svc := l.serviceObject(s)
		if _, err := c.CoreV1().Services(svc.Namespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("service %s/%s: %w", svc.Namespace, svc.Name, err)
		}
		return nil
	}); err != nil {
		return nil, err
	}
	progress("%d Services created", l.Services)
	return slots, nil
}

// churn replaces pods at l.Rate a second: replacement i takes slot i (mod
// the pods), so that consecutive replacements go to different nodes and
// Services. Each deletes the slot's pod (grace period churnGrace), which k
// then reports not ready, creates the new pod, which k starts, and k
// deletes the old pod for good once its grace period is over. churn
// returns when every replacement is done.
func (l layout) churn(ctx context.Context, c kubernetes.Interface, k *apiKubelet, slots []podRef, progress func(string, ...any)) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	tick := time.NewTicker(time.Duration(float64(time.Second) / l.Rate))
	defer tick.Stop()
	var wg sync.WaitGroup
	for i := range l.Replacements {
		if i > 0 {
			select {
			case <-ctx.Done():
			case <-tick.C:
			}
		}
		if ctx.Err() != nil {
			break
		}
		j := i % l.Pods
		old, next := slots[j], l.pod(j, l.Pods+i)
		slots[j] = podRef{namespace: next.Namespace, name: next.Name}
		wg.Go(func() {
			if err := l.replace(ctx, c, k, j, old, next); err != nil {
				cancel(fmt.Errorf("replacement %d: %w", i, err))
			}
		})
		if (i+1)%200 == 0 {
			progress("%d of %d replacements begun", i+1, l.Replacements)
		}
	}
	wg.Wait()
	if err := context.Cause(ctx); err != nil && ctx.Err() != nil {
		return err
	}
	return nil
}

func (l layout) replace(ctx context.Context, c kubernetes.Interface, k *apiKubelet, j int, old podRef, next *corev1.Pod) error {
	var deleted corev1.Pod
	grace := int64(churnGrace / time.Second)
	err := c.CoreV1().RESTClient().Delete().Namespace(old.namespace).Resource("pods").Name(old.name).
		Body(&metav1.DeleteOptions{GracePeriodSeconds: &grace}).Do(ctx).Into(&deleted)
	if err != nil {
		return fmt.Errorf("deleting pod %s/%s: %w", old.namespace, old.name, err)
	}
	deletedAt := time.Now()
	node := l.slotNode(j)
	gone := make(chan error, 1)
	go func() { gone <- k.terminate(ctx, &deleted, node, deletedAt) }()
	created, err := c.CoreV1().Pods(next.Namespace).Create(ctx, next, metav1.CreateOptions{})
	if err == nil {
		err = k.start(ctx, created, node)
	} else {
		err = fmt.Errorf("pod %s/%s: %w", next.Namespace, next.Name, err)
	}
	return errors.Join(err, <-gone)
}
