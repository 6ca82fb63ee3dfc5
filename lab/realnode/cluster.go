package realnode

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ghostwatch/ghostwatch/lab/cni"
	"github.com/ghostwatch/ghostwatch/lab/controlplane"
	"github.com/ghostwatch/ghostwatch/lab/netbed"
)

// ClusterOptions configure StartCluster.
type ClusterOptions struct {
	// Nodes is how many real nodes to start, 1 (default) or 2: node-1
	// (172.18.0.2, pods in 10.244.1.0/24) and node-2 (172.18.0.3, pods in
	// 10.244.2.0/24), linked as two machines are.
	Nodes int
	// Release imports ghostwatch's release image (BuildReleaseImage), for
	// its chart.
	Release bool
	// Mode is the nodes' kube-proxy mode (default iptables).
	Mode controlplane.ProxyMode
	// Prefix names the cluster's network namespaces (<Prefix>-node-1, ...;
	// at most 8 characters). Default: ClusterPrefix and 4 random hex
	// digits, so that `ghostwatch-lab cleanup --prefix gwn` removes what a
	// killed cluster left, and nothing of a running one.
	Prefix string
	// KubeBin, CNIBin and CrictlBin are the binaries' directories; each
	// empty one is found as the tests find it (the cache, or its
	// variable).
	KubeBin, CNIBin, CrictlBin string
	// Logf, when set, says what is being done.
	Logf func(format string, args ...any)
}

// ClusterPrefix starts the default names of a cluster's namespaces.
const ClusterPrefix = "gwn"

// Cluster is a control plane with its workload controllers and real
// nodes: what `ghostwatch-lab cluster` stands up and the real node's tests
// play the incidents on.
type Cluster struct {
	CP  *controlplane.ControlPlane
	Bed *netbed.Bed
	// Nodes are node-1 and, with Nodes 2, node-2.
	Nodes []*Node
	// Link is the network between the two nodes; nil with one.
	Link *netbed.Link

	images string
}

// ErrNotRoot is StartCluster's error when not run as root.
var ErrNotRoot = errors.New("a real node creates network namespaces and runs containers: run as root")

// StartCluster builds the lab's images (and the release image), starts
// the control plane and the nodes, and returns once every node is Ready
// and the default ServiceAccount exists. On error, what it started is
// stopped.
func StartCluster(ctx context.Context, o ClusterOptions) (_ *Cluster, err error) {
	if os.Geteuid() != 0 {
		return nil, ErrNotRoot
	}
	if o.Nodes == 0 {
		o.Nodes = 1
	}
	if o.Nodes != 1 && o.Nodes != 2 {
		return nil, fmt.Errorf("%d nodes: want 1 or 2", o.Nodes)
	}
	logf := o.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	if err := o.find(); err != nil {
		return nil, err
	}
	if err := Check(o.KubeBin, o.CNIBin, o.CrictlBin); err != nil {
		return nil, err
	}
	if o.Prefix == "" {
		b := make([]byte, 2)
		rand.Read(b)
		o.Prefix = ClusterPrefix + "-" + hex.EncodeToString(b)
	}
	c := &Cluster{}
	defer func() {
		if err != nil {
			c.Stop()
		}
	}()
	if c.images, err = os.MkdirTemp("", "ghostwatch-images-"); err != nil {
		return nil, err
	}
	start := time.Now()
	logf("building the lab's images (labpod, the pause image)")
	images, err := BuildImages(ctx, c.images)
	if err != nil {
		return nil, err
	}
	archives := []string{images}
	if o.Release {
		logf("building ghostwatch's release image")
		img, err := BuildReleaseImage(ctx, c.images)
		if err != nil {
			return nil, err
		}
		archives = append(archives, img)
	}
	if c.Bed, err = netbed.New(o.Prefix); err != nil {
		return nil, err
	}
	logf("starting the control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler)")
	if c.CP, err = controlplane.Start(ctx, controlplane.Options{Bin: o.KubeBin, Workloads: true}); err != nil {
		return nil, err
	}
	for i := range o.Nodes {
		name := fmt.Sprintf("node-%d", i+1)
		logf("starting %s (containerd, the kubelet, kube-proxy) and importing the images", name)
		n, err := Start(ctx, c.CP, c.Bed, name, Options{
			IP:      netip.AddrFrom4([4]byte{172, 18, 0, byte(2 + i)}),
			PodCIDR: netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 244, byte(1 + i), 0}), 24),
			Mode:    o.Mode,
			KubeBin: o.KubeBin, CNIBin: o.CNIBin, CrictlBin: o.CrictlBin, Images: archives,
		})
		if err != nil {
			return nil, err
		}
		c.Nodes = append(c.Nodes, n)
	}
	if o.Nodes == 2 {
		// The network between the machines: each node routes the other's
		// pod range and address through the link.
		a, z := c.Nodes[0], c.Nodes[1]
		c.Link, err = c.Bed.ConnectNodes(
			a.Net, netbed.Uplink{Addr: netip.MustParsePrefix("172.19.0.1/30"), Routes: []netip.Prefix{netip.MustParsePrefix("10.244.2.0/24"), netip.PrefixFrom(z.IP, 32)}},
			z.Net, netbed.Uplink{Addr: netip.MustParsePrefix("172.19.0.2/30"), Routes: []netip.Prefix{netip.MustParsePrefix("10.244.1.0/24"), netip.PrefixFrom(a.IP, 32)}},
		)
		if err != nil {
			return nil, err
		}
	}
	// Pods in default need its ServiceAccount, which a controller makes.
	deadline := time.Now().Add(2 * time.Minute)
	for {
		_, err := c.CP.Admin.CoreV1().ServiceAccounts("default").Get(ctx, "default", metav1.GetOptions{})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("the ServiceAccount default/default is not made after 2 minutes: %w", err)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	logf("ready in %s", time.Since(start).Round(100*time.Millisecond))
	return c, nil
}

// find fills the binaries' directories left empty.
func (o *ClusterOptions) find() error {
	var err error
	if o.KubeBin == "" {
		if o.KubeBin, err = controlplane.FindBinaries(); err != nil {
			return err
		}
	}
	if o.CNIBin == "" {
		plugin, err := cni.FindHostLocal()
		if err != nil {
			return err
		}
		o.CNIBin = filepath.Dir(plugin)
	}
	if o.CrictlBin == "" {
		if o.CrictlBin, err = FindCrictl(); err != nil {
			return err
		}
	}
	return nil
}

// Stop stops the nodes (each pod through the runtime), the control plane
// and the network, and removes the images built. It is safe on a cluster
// StartCluster gave up on.
func (c *Cluster) Stop() {
	for i := len(c.Nodes) - 1; i >= 0; i-- {
		c.Nodes[i].Stop()
	}
	if c.CP != nil {
		c.CP.Stop()
	}
	if c.Bed != nil {
		c.Bed.Close()
	}
	if c.images != "" {
		os.RemoveAll(c.images)
	}
}
