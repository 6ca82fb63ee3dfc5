package lab

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"slices"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"

	"github.com/ghostwatch/ghostwatch/deploy"
	"github.com/ghostwatch/ghostwatch/lab/controlplane"
	"github.com/ghostwatch/ghostwatch/lab/netbed"
)

// The lab's control planes.
const (
	// ControlPlaneMemory presents the lab's objects through an in-memory
	// API and programs the DNAT rules itself, as kube-proxy would.
	ControlPlaneMemory = "memory"
	// ControlPlaneReal runs etcd, kube-apiserver, the EndpointSlice
	// controller and kube-proxy (iptables mode) from the binaries
	// scripts/kube-binaries.sh builds.
	ControlPlaneReal = "real"
)

// realWorld is the lab on a real control plane: the node runs kube-proxy
// and a kubelet stand-in, the agent and the scans use the agent's RBAC
// identity.
type realWorld struct {
	cp      *controlplane.ControlPlane
	node    *controlplane.Node
	kubelet *controlplane.Kubelet
	agent   kubernetes.Interface
	stop    context.CancelFunc
}

// labPodCIDR holds the lab's pod addresses.
var labPodCIDR = netip.MustParsePrefix("10.244.1.0/24")

func newRealWorld(ctx context.Context, o Options, bed *netbed.Bed, sc scenario, tl *timeline) (_ *realWorld, err error) {
	// runScenario has resolved o.KubeBin.
	start := time.Now()
	cp, err := controlplane.Start(ctx, controlplane.Options{Bin: o.KubeBin})
	if err != nil {
		return nil, err
	}
	rw := &realWorld{cp: cp}
	defer func() {
		if err != nil {
			rw.close()
		}
	}()
	tl.logf("api", "etcd, kube-apiserver and the EndpointSlice controller running on 127.0.0.1 (%s)", time.Since(start).Round(100*time.Millisecond))
	if rw.node, err = cp.AddNode(ctx, bed, labNode, controlplane.NodeOptions{
		IP: nodeIP, PodCIDR: labPodCIDR, Mode: controlplane.ProxyIPTables,
		NetOptions: netbed.NodeOptions{ConntrackTimestamp: true},
	}); err != nil {
		return nil, err
	}
	tl.logf("node", "namespace %s, address %s, conntrack timestamps on; kube-proxy (iptables) running in it", rw.node.Net.Name(), nodeIP)
	kctx, cancel := context.WithCancel(ctx)
	rw.stop = cancel
	port := sc.targetPort
	rw.kubelet = rw.node.RunKubelet(kctx, bed, func(h *netbed.Host, pod *corev1.Pod) (func(), error) {
		ln, err := h.Listen("tcp", netip.AddrPortFrom(h.Addrs[0], port).String())
		if err != nil {
			return nil, err
		}
		go serve(ln, pod.Name)
		tl.logf("kubelet", "pod %s/%s running at %s, serving :%d", pod.Namespace, pod.Name, h.Addrs[0], port)
		return func() { ln.Close() }, nil
	})
	ms, err := deploy.AgentInstall()
	if err != nil {
		return nil, err
	}
	for _, m := range ms {
		if err := createObject(ctx, cp.Admin, m.Object); err != nil {
			return nil, fmt.Errorf("%s: %w", m.File, err)
		}
	}
	if rw.agent, err = kubernetes.NewForConfig(cp.Config(controlplane.UserAgent)); err != nil {
		return nil, err
	}
	if _, err := cp.Admin.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: sc.namespace}}, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	svc := labService(sc)
	if _, err := cp.Admin.CoreV1().Services(sc.namespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	return rw, nil
}

// labService is the Service the real control plane gets for sc.
func labService(sc scenario) *corev1.Service {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Namespace: sc.namespace, Name: sc.service},
		Spec: corev1.ServiceSpec{
			Selector:  map[string]string{"app": sc.app},
			ClusterIP: sc.clusterIP.String(),
			Ports: []corev1.ServicePort{{Name: "p0", Protocol: corev1.ProtocolTCP, Port: int32(sc.port),
				TargetPort: intstr.FromInt32(int32(sc.targetPort)), NodePort: int32(sc.nodePort)}},
		},
	}
	if sc.nodePort != 0 {
		// Keep the client's address: with the default policy kube-proxy
		// masquerades out of the backend's veth, and the kernel drops the
		// entries of a vanished device, so a backend on this one node would
		// leave no ghost (docs/e2e.md).
		svc.Spec.Type = corev1.ServiceTypeNodePort
		svc.Spec.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
	}
	return svc
}

func (rw *realWorld) close() {
	if rw.stop != nil {
		rw.stop()
	}
	if rw.node != nil {
		rw.node.Stop()
	}
	rw.cp.Stop()
}

// startPod creates the Pod (asking for ip) and waits until the EndpointSlice
// controller lists it ready. The pod may take 30s to drain when deleted.
func (rw *realWorld) startPod(ctx context.Context, sc scenario, name string, ip netip.Addr) error {
	grace := int64(30)
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: sc.namespace, Name: name, Labels: map[string]string{"app": sc.app},
			Annotations: map[string]string{controlplane.IPAnnotation: ip.String()}},
		Spec: corev1.PodSpec{NodeName: labNode, TerminationGracePeriodSeconds: &grace,
			Containers: []corev1.Container{{Name: sc.app, Image: "lab"}}},
	}
	if _, err := rw.cp.Admin.CoreV1().Pods(sc.namespace).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		return err
	}
	return rw.until(ctx, labPatience, "pod "+name+" ready in an EndpointSlice", func() (bool, error) {
		eps, err := rw.endpoints(ctx, sc)
		return slices.ContainsFunc(eps, func(ep discoveryv1.Endpoint) bool {
			return ep.TargetRef != nil && ep.TargetRef.Name == name && ep.Conditions.Ready != nil && *ep.Conditions.Ready
		}), err
	})
}

// terminatePod deletes the Pod with its grace period: it drains.
func (rw *realWorld) terminatePod(ctx context.Context, sc scenario, name string) error {
	if err := rw.cp.Admin.CoreV1().Pods(sc.namespace).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		return err
	}
	return rw.until(ctx, labPatience, "pod "+name+" terminating in its EndpointSlice", func() (bool, error) {
		eps, err := rw.endpoints(ctx, sc)
		return slices.ContainsFunc(eps, func(ep discoveryv1.Endpoint) bool {
			return ep.TargetRef != nil && ep.TargetRef.Name == name && ep.Conditions.Terminating != nil && *ep.Conditions.Terminating
		}), err
	})
}

// killPod ends a draining pod now (grace 0, as when its process exits)
// and waits until the kubelet stand-in has deleted it.
func (rw *realWorld) killPod(ctx context.Context, sc scenario, name string) error {
	err := rw.cp.Admin.CoreV1().Pods(sc.namespace).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)})
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	return rw.until(ctx, labPatience, "pod "+name+" gone", func() (bool, error) {
		_, err := rw.cp.Admin.CoreV1().Pods(sc.namespace).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		return false, err
	})
}

// routed waits until kube-proxy's rules send new connections to exactly
// backends (by their DNAT targets in the node's nat table).
func (rw *realWorld) routed(ctx context.Context, sc scenario, backends []netip.Addr) error {
	want := make([]string, 0, len(backends))
	for _, b := range backends {
		want = append(want, netip.AddrPortFrom(b, sc.targetPort).String())
	}
	slices.Sort(want)
	return rw.until(ctx, labPatience, fmt.Sprintf("kube-proxy routing to %v", want), func() (bool, error) {
		out, err := exec.CommandContext(ctx, "ip", "netns", "exec", rw.node.Net.Name(), "iptables-save", "-t", "nat").Output()
		if err != nil {
			return false, fmt.Errorf("iptables-save in the node: %w", err)
		}
		var got []string
		for _, line := range strings.Split(string(out), "\n") {
			if !strings.Contains(line, `"`+sc.namespace+"/"+sc.service) {
				continue
			}
			if _, after, ok := strings.Cut(line, "--to-destination "); ok {
				got = append(got, strings.Fields(after)[0])
			}
		}
		slices.Sort(got)
		got = slices.Compact(got)
		return slices.Equal(got, want), nil
	})
}

func (rw *realWorld) endpoints(ctx context.Context, sc scenario) ([]discoveryv1.Endpoint, error) {
	list, err := rw.cp.Admin.DiscoveryV1().EndpointSlices(sc.namespace).List(ctx,
		metav1.ListOptions{LabelSelector: discoveryv1.LabelServiceName + "=" + sc.service})
	if err != nil {
		return nil, err
	}
	var out []discoveryv1.Endpoint
	for _, s := range list.Items {
		out = append(out, s.Endpoints...)
	}
	return out, nil
}

// until polls cond every 20ms until it holds, fails, or the deadline
// passes; a control-plane process that died, or a kubelet error, ends it.
func (rw *realWorld) until(ctx context.Context, deadline time.Duration, what string, cond func() (bool, error)) error {
	end := time.Now().Add(deadline)
	for {
		ok, err := cond()
		if err != nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		if ok {
			return nil
		}
		if err := errors.Join(append([]error{rw.cp.Check(), rw.node.Check()}, rw.kubelet.Errors()...)...); err != nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		if time.Now().After(end) {
			return fmt.Errorf("no %s after %s", what, deadline)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// createObject creates one of the kinds deploy/agent and deploy/controller
// hold; the API server validates it.
func createObject(ctx context.Context, c kubernetes.Interface, obj runtime.Object) error {
	var err error
	switch o := obj.(type) {
	case *corev1.Namespace:
		_, err = c.CoreV1().Namespaces().Create(ctx, o, metav1.CreateOptions{})
	case *corev1.ServiceAccount:
		_, err = c.CoreV1().ServiceAccounts(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
	case *rbacv1.ClusterRole:
		_, err = c.RbacV1().ClusterRoles().Create(ctx, o, metav1.CreateOptions{})
	case *rbacv1.ClusterRoleBinding:
		_, err = c.RbacV1().ClusterRoleBindings().Create(ctx, o, metav1.CreateOptions{})
	case *appsv1.DaemonSet:
		_, err = c.AppsV1().DaemonSets(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
	case *appsv1.Deployment:
		_, err = c.AppsV1().Deployments(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
	case *rbacv1.Role:
		_, err = c.RbacV1().Roles(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
	case *rbacv1.RoleBinding:
		_, err = c.RbacV1().RoleBindings(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
	case *corev1.Service:
		_, err = c.CoreV1().Services(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
	case *policyv1.PodDisruptionBudget:
		_, err = c.PolicyV1().PodDisruptionBudgets(o.Namespace).Create(ctx, o, metav1.CreateOptions{})
	default:
		err = fmt.Errorf("cannot create a %T", obj)
	}
	return err
}
