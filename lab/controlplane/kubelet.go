package controlplane

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/ghostwatch/ghostwatch/lab/netbed"
)

// IPAnnotation on a Pod asks the kubelet stand-in for this IP, as a CNI
// plugin handing a freed IP to the next pod would.
const IPAnnotation = "lab.ghostwatch.io/ip"

// Workload serves a pod's traffic inside its namespace; the returned stop
// ends it.
type Workload func(h *netbed.Host, pod *corev1.Pod) (stop func(), err error)

// Kubelet stands in for the kubelet on one node: for each Pod bound to it,
// it creates the pod's namespace and veth (netbed), assigns the IP, runs the
// workload and reports the Pod Running and Ready. When a Pod is deleted it
// reports it not ready, keeps it serving for its grace period (draining),
// then removes the namespace abruptly and deletes the Pod for good, as the
// kubelet does.
type Kubelet struct {
	node   *Node
	bed    *netbed.Bed
	client kubernetes.Interface
	work   Workload

	mu   sync.Mutex
	pods map[types.UID]*runningPod
	used map[netip.Addr]bool
	next netip.Addr
	errs []error
}

type runningPod struct {
	host        *netbed.Host
	ip          netip.Addr
	stop        func()
	terminating bool
	// deadline is when the grace period ends; timer removes the pod then.
	deadline time.Time
	timer    *time.Timer
}

// RunKubelet starts the stand-in on n until ctx ends.
func (n *Node) RunKubelet(ctx context.Context, bed *netbed.Bed, work Workload) *Kubelet {
	k := &Kubelet{node: n, bed: bed, client: n.cp.Admin, work: work,
		pods: map[types.UID]*runningPod{}, used: map[netip.Addr]bool{}, next: n.o.PodCIDR.Addr().Next()}
	lw := cache.NewListWatchFromClient(n.cp.Admin.CoreV1().RESTClient(), "pods", metav1.NamespaceAll,
		fields.OneTermEqualSelector("spec.nodeName", n.Name))
	inf := cache.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, cache.Indexers{})
	queue := make(chan *corev1.Pod, 256)
	enqueue := func(obj any) {
		if p, ok := obj.(*corev1.Pod); ok {
			queue <- p
		}
	}
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    enqueue,
		UpdateFunc: func(_, o any) { enqueue(o) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if p, ok := obj.(*corev1.Pod); ok {
				k.forget(p.UID)
			}
		},
	})
	go inf.Run(ctx.Done())
	go func() {
		for {
			select {
			case <-ctx.Done():
				k.mu.Lock()
				for uid := range k.pods {
					k.forgetLocked(uid)
				}
				k.mu.Unlock()
				return
			case p := <-queue:
				if err := k.sync(ctx, p); err != nil && ctx.Err() == nil {
					k.mu.Lock()
					k.errs = append(k.errs, fmt.Errorf("pod %s/%s: %w", p.Namespace, p.Name, err))
					k.mu.Unlock()
				}
			}
		}
	}()
	return k
}

// Errors are what the stand-in failed to do so far.
func (k *Kubelet) Errors() []error {
	k.mu.Lock()
	defer k.mu.Unlock()
	return append([]error(nil), k.errs...)
}

func (k *Kubelet) sync(ctx context.Context, p *corev1.Pod) error {
	k.mu.Lock()
	rp := k.pods[p.UID]
	k.mu.Unlock()
	switch {
	case p.DeletionTimestamp == nil && rp == nil && (p.Status.Phase == "" || p.Status.Phase == corev1.PodPending):
		return k.start(ctx, p)
	case p.DeletionTimestamp != nil && rp == nil:
		return k.remove(ctx, p)
	case p.DeletionTimestamp != nil:
		grace := time.Duration(0)
		if p.DeletionGracePeriodSeconds != nil {
			grace = time.Duration(*p.DeletionGracePeriodSeconds) * time.Second
		}
		deadline := time.Now().Add(grace)
		k.mu.Lock()
		first := !rp.terminating
		rp.terminating = true
		// A second delete may shorten the grace period, never lengthen it.
		later := !first && !deadline.Before(rp.deadline)
		if !later {
			rp.deadline = deadline
			if rp.timer != nil {
				rp.timer.Stop()
			}
			rp.timer = time.AfterFunc(grace, func() {
				if err := k.remove(ctx, p); err != nil && ctx.Err() == nil {
					k.mu.Lock()
					k.errs = append(k.errs, fmt.Errorf("pod %s/%s: %w", p.Namespace, p.Name, err))
					k.mu.Unlock()
				}
			})
		}
		k.mu.Unlock()
		if first {
			// Not ready, still serving: the pod drains.
			st := p.DeepCopy()
			setReady(st, false)
			if _, err := k.client.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, st, metav1.UpdateOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return err
			}
		}
	}
	return nil
}

func (k *Kubelet) start(ctx context.Context, p *corev1.Pod) error {
	ip, err := k.allocate(p)
	if err != nil {
		return err
	}
	h, err := k.bed.AddHost(p.Namespace+"-"+p.Name, k.node.Net, netip.PrefixFrom(ip, ip.BitLen()))
	if err != nil {
		k.release(ip)
		return err
	}
	rp := &runningPod{host: h, ip: ip}
	k.mu.Lock()
	k.pods[p.UID] = rp
	k.mu.Unlock()
	if k.work != nil {
		if rp.stop, err = k.work(h, p); err != nil {
			return err
		}
	}
	st := p.DeepCopy()
	now := metav1.Now()
	st.Status.Phase = corev1.PodRunning
	st.Status.StartTime = &now
	st.Status.PodIP = ip.String()
	st.Status.PodIPs = []corev1.PodIP{{IP: ip.String()}}
	st.Status.HostIP = k.node.IP.String()
	st.Status.HostIPs = []corev1.HostIP{{IP: k.node.IP.String()}}
	setReady(st, true)
	_, err = k.client.CoreV1().Pods(p.Namespace).UpdateStatus(ctx, st, metav1.UpdateOptions{})
	return err
}

// remove ends the pod abruptly (no FIN, no RST reaches its peers), as its
// containers dying would, deletes the Pod object for good, then tears the
// sandbox down, in the kubelet's order.
func (k *Kubelet) remove(ctx context.Context, p *corev1.Pod) error {
	k.mu.Lock()
	rp := k.pods[p.UID]
	k.mu.Unlock()
	var unplugErr error
	if rp != nil {
		unplugErr = rp.host.Unplug()
	}
	err := k.client.CoreV1().Pods(p.Namespace).Delete(ctx, p.Name, metav1.DeleteOptions{
		GracePeriodSeconds: new(int64), Preconditions: &metav1.Preconditions{UID: &p.UID}})
	if apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
		err = nil
	}
	k.mu.Lock()
	if unplugErr != nil && k.pods[p.UID] != rp {
		// The Pod's deletion (grace 0) reached the informer first, which
		// already tore the sandbox down: nothing was left to unplug.
		unplugErr = nil
	}
	k.mu.Unlock()
	k.forget(p.UID)
	return errors.Join(unplugErr, err)
}

func (k *Kubelet) forget(uid types.UID) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.forgetLocked(uid)
}

func (k *Kubelet) forgetLocked(uid types.UID) {
	rp := k.pods[uid]
	if rp == nil {
		return
	}
	delete(k.pods, uid)
	if rp.timer != nil {
		rp.timer.Stop()
	}
	if rp.stop != nil {
		rp.stop()
	}
	_ = k.bed.RemoveHost(rp.host)
	delete(k.used, rp.ip)
}

func (k *Kubelet) allocate(p *corev1.Pod) (netip.Addr, error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if s := p.Annotations[IPAnnotation]; s != "" {
		ip, err := netip.ParseAddr(s)
		if err != nil || !k.node.o.PodCIDR.Contains(ip) {
			return netip.Addr{}, fmt.Errorf("annotation %s=%q: want an address in %s", IPAnnotation, s, k.node.o.PodCIDR)
		}
		if k.used[ip] {
			return netip.Addr{}, fmt.Errorf("annotation %s=%q: the address is in use", IPAnnotation, s)
		}
		k.used[ip] = true
		return ip, nil
	}
	for ip := k.next; k.node.o.PodCIDR.Contains(ip); ip = ip.Next() {
		if !k.used[ip] {
			k.used[ip] = true
			k.next = ip.Next()
			return ip, nil
		}
	}
	return netip.Addr{}, fmt.Errorf("pod CIDR %s exhausted", k.node.o.PodCIDR)
}

// Holds reports whether the stand-in still holds ip for a pod: a pod
// asking for it (IPAnnotation) would be refused.
func (k *Kubelet) Holds(ip netip.Addr) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.used[ip]
}

func (k *Kubelet) release(ip netip.Addr) {
	k.mu.Lock()
	defer k.mu.Unlock()
	delete(k.used, ip)
}

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
