package controlplane

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	"github.com/ghostwatch/ghostwatch/lab/netbed"
)

// ProxyMode is kube-proxy's --proxy-mode.
type ProxyMode string

// The modes the harness runs.
const (
	ProxyIPTables ProxyMode = "iptables"
	ProxyNFTables ProxyMode = "nftables"
)

// ClusterCIDR holds every pod IP the harness assigns.
const ClusterCIDR = "10.244.0.0/16"

// NodeOptions configure AddNode.
type NodeOptions struct {
	// IP is the node's InternalIP, on its loopback; NodePorts are served
	// there.
	IP netip.Addr
	// PodCIDR is where the kubelet stand-in takes pod IPs from.
	PodCIDR netip.Prefix
	// Mode is kube-proxy's mode (default iptables).
	Mode ProxyMode
	// NetOptions are passed to netbed (sysctls, conntrack timestamps).
	NetOptions netbed.NodeOptions
	// Registered says the Node object exists already (RegisterNode, with
	// this IP and PodCIDR): AddNode leaves it as it is. A caller registers
	// the node first when pods bound to it must be in their EndpointSlices
	// before kube-proxy starts (the EndpointSlice controller skips a pod
	// whose Node it cannot find).
	Registered bool
	// ProxyServer, when set, is called once the node's namespace exists
	// and before kube-proxy starts; it returns the URL kube-proxy reaches
	// the API server at (a forwarder of the caller's in the namespace, for
	// instance, presenting ServingCertificate). By default kube-proxy uses
	// the node's forwarder at Server, as every other client does.
	ProxyServer func(*netbed.Node) (string, error)
}

// Node is a node network namespace registered as a Node, with a real
// kube-proxy in it and the API server reachable at 127.0.0.1 through a
// forwarder, so that every kubeconfig works on both sides.
type Node struct {
	Name string
	IP   netip.Addr
	Net  *netbed.Node
	cp   *ControlPlane
	o    NodeOptions

	proxy *process
	fwd   net.Listener
	// inCluster serves InClusterAddr under Options.Workloads.
	inCluster net.Listener
	wg        sync.WaitGroup
}

// AddNode creates the namespace (through bed), the Node object (unless
// o.Registered) and the forwarder, starts kube-proxy in it and waits until
// kube-proxy reports healthy.
func (cp *ControlPlane) AddNode(ctx context.Context, bed *netbed.Bed, name string, o NodeOptions) (_ *Node, err error) {
	if o.Mode == "" {
		o.Mode = ProxyIPTables
	}
	no := o.NetOptions
	no.Addrs = append(no.Addrs, netip.PrefixFrom(o.IP, o.IP.BitLen()))
	if cp.workloads {
		no.Addrs = append(no.Addrs, netip.PrefixFrom(InClusterAddr, InClusterAddr.BitLen()))
	}
	nn, err := bed.AddNode(name, no)
	if err != nil {
		return nil, err
	}
	n := &Node{Name: name, IP: o.IP, Net: nn, cp: cp, o: o}
	defer func() {
		if err != nil {
			n.Stop()
		}
	}()
	if n.fwd, err = nn.Listen("tcp", "127.0.0.1:"+strconv.Itoa(cp.Port)); err != nil {
		return nil, fmt.Errorf("node %s: forwarder to the API server: %w", name, err)
	}
	n.wg.Add(1)
	go n.forward(n.fwd)
	if cp.workloads {
		// The kubernetes Service's endpoint, for pods and host-network
		// pods alike.
		if n.inCluster, err = nn.Listen("tcp", netip.AddrPortFrom(InClusterAddr, uint16(cp.Port)).String()); err != nil {
			return nil, fmt.Errorf("node %s: forwarder to the API server at %s: %w", name, InClusterAddr, err)
		}
		n.wg.Add(1)
		go n.forward(n.inCluster)
	}

	if !o.Registered {
		if err := cp.RegisterNode(ctx, name, o.IP, o.PodCIDR); err != nil {
			return nil, err
		}
	}

	var kubeconfig string
	if o.ProxyServer == nil {
		kubeconfig, err = cp.WriteKubeconfig(UserKubeProxy)
	} else {
		var server string
		if server, err = o.ProxyServer(nn); err != nil {
			return nil, fmt.Errorf("node %s: kube-proxy's server: %w", name, err)
		}
		kubeconfig, err = cp.WriteKubeconfigFor(UserKubeProxy, server)
	}
	if err != nil {
		return nil, err
	}
	n.proxy, err = startProcess(cp.Dir, "kube-proxy-"+name, nil, "ip", "netns", "exec", nn.Name(),
		filepath.Join(cp.bin, "kube-proxy"),
		"--kubeconfig="+kubeconfig, "--hostname-override="+name, "--proxy-mode="+string(o.Mode),
		"--cluster-cidr="+ClusterCIDR,
		// Leave the global and per-namespace conntrack settings alone.
		"--conntrack-max-per-core=0", "--conntrack-tcp-timeout-established=0", "--conntrack-tcp-timeout-close-wait=0",
		"--metrics-bind-address=127.0.0.1:10249", "--healthz-bind-address=127.0.0.1:10256", "--v=2")
	if err != nil {
		return nil, err
	}
	hc := nn.HTTPClient(2 * time.Second)
	if err := n.proxy.waitFor(ctx, 2*time.Minute, "healthy", func(ctx context.Context) error {
		return get(ctx, hc, "http://127.0.0.1:10256/healthz", "", nil)
	}); err != nil {
		return nil, err
	}
	return n, nil
}

// RegisterNode creates the Node object name, as its kubelet would: the
// hostname label, podCIDR, and a status with its InternalIP and Hostname
// addresses and the Ready condition. AddNode calls it unless
// NodeOptions.Registered; a caller registers Nodes that have no namespace
// with it too.
func (cp *ControlPlane) RegisterNode(ctx context.Context, name string, ip netip.Addr, podCIDR netip.Prefix) error {
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"kubernetes.io/hostname": name}},
		Spec:       corev1.NodeSpec{PodCIDR: podCIDR.String(), PodCIDRs: []string{podCIDR.String()}},
	}
	created, err := cp.Admin.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("node %s: %w", name, err)
	}
	// A controller (the node lifecycle controller, under
	// Options.Workloads) may write the Node between the two requests.
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		created.Status = corev1.NodeStatus{
			Addresses:  []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: ip.String()}, {Type: corev1.NodeHostName, Address: name}},
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue, LastHeartbeatTime: metav1.Now(), Reason: "KubeletReady"}},
		}
		_, err := cp.Admin.CoreV1().Nodes().UpdateStatus(ctx, created, metav1.UpdateOptions{})
		if apierrors.IsConflict(err) {
			if latest, gerr := cp.Admin.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{}); gerr == nil {
				created = latest
			}
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("node %s status: %w", name, err)
	}
	return nil
}

// forward copies each connection to 127.0.0.1:port in the node to the API
// server on the host's loopback.
func (n *Node) forward(ln net.Listener) {
	defer n.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			defer c.Close()
			up, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(n.cp.Port))
			if err != nil {
				return
			}
			defer up.Close()
			Splice(c, up)
		}()
	}
}

// ProxyLog is the path of this node's kube-proxy log.
func (n *Node) ProxyLog() string {
	if n.proxy == nil {
		return ""
	}
	return n.proxy.log
}

// ProxyPID is the process ID of this node's kube-proxy (0 before it
// started), for reading its /proc entries: `ip netns exec` replaces itself
// with kube-proxy, so the ID is kube-proxy's own.
func (n *Node) ProxyPID() int {
	if n.proxy == nil {
		return 0
	}
	return n.proxy.cmd.Process.Pid
}

// Check reports whether kube-proxy has exited.
func (n *Node) Check() error {
	if n.proxy == nil {
		return errors.New("kube-proxy not started")
	}
	if done, err := n.proxy.exited(); done {
		return fmt.Errorf("kube-proxy on %s exited (%v); its log (%s) ends:\n%s", n.Name, err, n.proxy.log, n.proxy.tail())
	}
	return nil
}

// Stop stops kube-proxy and the forwarder. The namespace belongs to the
// bed, which removes it.
func (n *Node) Stop() {
	if n.proxy != nil {
		n.proxy.stop(10 * time.Second)
	}
	if n.fwd != nil {
		n.fwd.Close()
	}
	if n.inCluster != nil {
		n.inCluster.Close()
	}
}

// Splice copies c to up and up to c until both ends have finished: what
// c sends reaches up, whose write side is closed after it, and c is closed
// once up has said all it will.
func Splice(c, up net.Conn) {
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(up, c)
		if tc, ok := up.(*net.TCPConn); ok {
			_ = tc.CloseWrite()
		}
		close(done)
	}()
	_, _ = io.Copy(c, up)
	c.Close()
	<-done
}
