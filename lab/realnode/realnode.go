// Package realnode runs a real Kubernetes node beside the lab's control
// plane: the kubelet built with it, containerd and runc from the
// distribution, and the CNI plugins a kind node chains (ptp, host-local,
// loopback, portmap), all in the node's network namespace, as kind's nodes
// are containers. Pods on it are real containers from images the lab
// writes and imports (lab/image): no registry, no Docker.
//
// The node's programs enter its network namespace alone (nsenter --net):
// they share the machine's mounts and cgroups, as a node's kubelet and
// runtime share the node's, so each node keeps its pods' cgroups under a
// root of its own and its runtime's and kubelet's state under its
// directory.
package realnode

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/vishvananda/netlink"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ghostwatch/ghostwatch/internal/testenv"
	"github.com/ghostwatch/ghostwatch/lab/cni"
	"github.com/ghostwatch/ghostwatch/lab/controlplane"
	"github.com/ghostwatch/ghostwatch/lab/netbed"
)

// Kubelet is the node agent's executable in the Kubernetes binaries'
// directory (controlplane.BinEnv; scripts/kube-binaries.sh builds it).
const Kubelet = "kubelet"

// Plugins are the CNI plugins the node's network configuration chains, in
// the CNI binaries' directory (scripts/cni-plugins.sh builds them).
var Plugins = []string{"ptp", "host-local", "loopback", "portmap"}

// Runtime are the container runtime's programs, from the distribution
// (Debian: containerd, runc), and nsenter (util-linux).
var Runtime = []string{"containerd", "containerd-shim-runc-v2", "runc", "ctr", "nsenter"}

// Crictl is the CRI client's executable (sigs.k8s.io/cri-tools), in the
// directory CrictlEnv names; CrictlScript builds it into the cache.
const (
	Crictl       = "crictl"
	CrictlEnv    = "GHOSTWATCH_CRICTL_BIN"
	CrictlScript = "scripts/crictl-binary.sh"
)

// ErrNoCrictl is FindCrictl's error when CrictlEnv is unset and the cache
// holds none.
var ErrNoCrictl = errors.New("crictl is not built: run " + CrictlScript + " and set " + CrictlEnv + " to the directory it prints")

// FindCrictl is the directory holding crictl: CrictlEnv's, else the
// cache's.
func FindCrictl() (string, error) {
	return testenv.BinDir(CrictlEnv, CrictlScript, ErrNoCrictl, Crictl)
}

// SandboxImage is the image of every pod's sandbox (containerd's
// sandbox_image): the lab's, imported with the node's images.
const SandboxImage = "lab.ghostwatch.io/pause:1"

// ErrNoRuntime wraps the error of a machine without the container runtime.
var ErrNoRuntime = errors.New("the container runtime is not installed")

// Check reports what a real node lacks: the kubelet in kubeBin, a plugin in
// cniBin, crictl in crictlBin, or a runtime program on PATH, each with what
// provides it.
func Check(kubeBin, cniBin, crictlBin string) error {
	if err := testenv.HasExecutables("the Kubernetes binaries' directory "+kubeBin, kubeBin, controlplane.Script, Kubelet); err != nil {
		return err
	}
	if err := testenv.HasExecutables("crictl's directory "+crictlBin, crictlBin, CrictlScript, Crictl); err != nil {
		return err
	}
	if err := testenv.HasExecutables("the CNI plugins' directory "+cniBin, cniBin, cni.Script, Plugins...); err != nil {
		return err
	}
	for _, p := range Runtime {
		if _, err := exec.LookPath(p); err != nil {
			return fmt.Errorf("%w: %s is not on PATH; install Debian's containerd and runc (apt-get install containerd runc)", ErrNoRuntime, p)
		}
	}
	return nil
}

// Options configure Start.
type Options struct {
	// IP is the node's InternalIP; PodCIDR the range host-local hands pod
	// IPs from (the Node's spec.podCIDR too).
	IP      netip.Addr
	PodCIDR netip.Prefix
	// Mode is kube-proxy's mode (default iptables).
	Mode controlplane.ProxyMode
	// KubeBin, CNIBin and CrictlBin are the binaries' directories (Check).
	KubeBin, CNIBin, CrictlBin string
	// Images are OCI archives (lab/image) to import before the kubelet
	// starts; one must hold SandboxImage.
	Images []string
}

// Node is a real node: the controlplane.Node (its namespace, Node object,
// forwarder and kube-proxy) with containerd and the kubelet in it.
type Node struct {
	*controlplane.Node
	// Dir holds the node's state: containerd's root and state, the
	// kubelet's root, the CNI configuration, and host-local's store
	// (HostLocalDir).
	Dir string
	// HostLocalDir is host-local's store of the node's network: one file
	// per IP it handed out, as /var/lib/cni/networks/kindnet on a node.
	HostLocalDir string

	cp         *controlplane.ControlPlane
	crictl     string
	sock       string
	cgroupRoot string
	containerd *controlplane.Process
	kubelet    *controlplane.Process
	// kubeletArgv starts the kubelet again (StartKubelet); kubeletStarts
	// counts its starts, for its logs' names.
	kubeletArgv    []string
	kubeletStarts  int
	kubeletStopped bool
}

// Network is the name of the node's CNI network (kind's).
const Network = "kindnet"

// Start creates the node (controlplane.AddNode), starts containerd in it,
// imports o.Images, starts the kubelet, and returns once the kubelet has
// registered the node Ready.
func Start(ctx context.Context, cp *controlplane.ControlPlane, bed *netbed.Bed, name string, o Options) (_ *Node, err error) {
	if err := Check(o.KubeBin, o.CNIBin, o.CrictlBin); err != nil {
		return nil, err
	}
	cn, err := cp.AddNode(ctx, bed, name, controlplane.NodeOptions{IP: o.IP, PodCIDR: o.PodCIDR, Mode: o.Mode})
	if err != nil {
		return nil, err
	}
	// Named after the node's namespace, as its cgroup root is: Reap finds
	// what a killed node left by that name.
	n := &Node{Node: cn, cp: cp, Dir: filepath.Join(cp.Dir, cn.Net.Name()), crictl: filepath.Join(o.CrictlBin, Crictl)}
	defer func() {
		if err != nil {
			n.Stop()
		}
	}()
	n.HostLocalDir = filepath.Join(n.Dir, "cni", "networks", Network)
	n.sock = filepath.Join(n.Dir, "containerd", "containerd.sock")
	for _, d := range []string{"containerd", "cni/conf", "cni/networks", "kubelet", "manifests"} {
		if err := os.MkdirAll(filepath.Join(n.Dir, d), 0o700); err != nil {
			return nil, err
		}
	}
	// The node reaches ClusterIPs as a kind node does through its default
	// route: a packet it sends needs a route before kube-proxy's rules
	// translate it to a pod.
	if err := n.Net.Do(func() error {
		lo, err := netlink.LinkByName("lo")
		if err != nil {
			return err
		}
		p := cp.ServiceCIDR
		return netlink.RouteAdd(&netlink.Route{LinkIndex: lo.Attrs().Index, Dst: &net.IPNet{IP: p.Addr().AsSlice(), Mask: net.CIDRMask(p.Bits(), p.Addr().BitLen())}})
	}); err != nil {
		return nil, fmt.Errorf("node %s: route to the Service range %s: %w", name, cp.ServiceCIDR, err)
	}
	if err := n.writeCNI(o); err != nil {
		return nil, err
	}
	if err := n.startContainerd(ctx, o); err != nil {
		return nil, err
	}
	for _, img := range o.Images {
		if err := n.ctr(ctx, "images", "import", img); err != nil {
			return nil, fmt.Errorf("node %s: importing %s: %w", name, img, err)
		}
	}
	if err := n.startKubelet(ctx, o); err != nil {
		return nil, err
	}
	return n, nil
}

// CNIConfDir is where the node keeps its CNI network configurations (its
// /etc/cni/net.d).
func (n *Node) CNIConfDir() string { return filepath.Join(n.Dir, "cni", "conf") }

// enter is the command line that runs argv in the node's network
// namespace alone.
func (n *Node) enter(argv ...string) []string {
	return append([]string{"nsenter", "--net=" + n.Net.Path(), "--"}, argv...)
}

// writeCNI writes the node's network: ptp to each pod, host-local handing
// out o.PodCIDR with its store in HostLocalDir, portmap for hostPorts, as
// kind's kindnet configures a node.
func (n *Node) writeCNI(o Options) error {
	gw := o.PodCIDR.Masked().Addr().Next()
	conf := fmt.Sprintf(`{
  "cniVersion": "1.0.0",
  "name": %q,
  "plugins": [
    {
      "type": "ptp",
      "ipMasq": false,
      "mtu": 1500,
      "ipam": {
        "type": "host-local",
        "dataDir": %q,
        "ranges": [[{"subnet": %q, "gateway": %q}]],
        "routes": [{"dst": "0.0.0.0/0"}]
      }
    },
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
`, Network, filepath.Dir(n.HostLocalDir), o.PodCIDR.Masked().String(), gw.String())
	return os.WriteFile(filepath.Join(n.CNIConfDir(), "10-"+Network+".conflist"), []byte(conf), 0o600)
}

func (n *Node) startContainerd(ctx context.Context, o Options) error {
	dir := filepath.Join(n.Dir, "containerd")
	// restrict_oom_score_adj: a machine that withholds CAP_SYS_RESOURCE
	// refuses the sandbox's oom_score_adj of -998, and runc then fails
	// ("can't get final child's PID from pipe"); the option clamps it to
	// the runtime's own.
	config := fmt.Sprintf(`version = 2
root = %q
state = %q
disabled_plugins = ["io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", "io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs"]
[grpc]
  address = %q
[ttrpc]
  address = %q
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = %q
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %q
    conf_dir = %q
`, filepath.Join(dir, "root"), filepath.Join(dir, "state"), n.sock, n.sock+".ttrpc",
		SandboxImage, o.CNIBin, n.CNIConfDir())
	path := filepath.Join(dir, "config.toml")
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		return err
	}
	p, err := n.cp.Run("containerd-"+n.Name, nil, n.enter("containerd", "--config", path)...)
	if err != nil {
		return err
	}
	n.containerd = p
	return p.WaitFor(ctx, time.Minute, "serving", func(ctx context.Context) error {
		return n.ctr(ctx, "version")
	})
}

// ctr runs ctr against the node's containerd, in the k8s.io namespace the
// kubelet's pods live in.
func (n *Node) ctr(ctx context.Context, args ...string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ctr", append([]string{"--address", n.sock, "--namespace", "k8s.io"}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("ctr %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

func (n *Node) startKubelet(ctx context.Context, o Options) error {
	// Pods' cgroups under a root of the node's own: two kubelets under one
	// root would each remove the other's pods' cgroups as orphans.
	n.cgroupRoot = "/" + n.Net.Name()
	if err := makeCgroup(n.cgroupRoot); err != nil {
		return err
	}
	resolv := filepath.Join(n.Dir, "resolv.conf")
	if err := os.WriteFile(resolv, nil, 0o644); err != nil {
		return err
	}
	config := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: %s
port: 10250
readOnlyPort: 0
healthzBindAddress: 127.0.0.1
healthzPort: 10248
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
authorization:
  mode: Webhook
cgroupDriver: cgroupfs
cgroupRoot: %s
containerRuntimeEndpoint: unix://%s
failSwapOn: false
staticPodPath: %s
resolvConf: %s
podCIDR: %s
fileCheckFrequency: 5s
imageGCHighThresholdPercent: 100
imageGCLowThresholdPercent: 99
evictionHard:
  memory.available: 100Mi
  nodefs.available: "1%%"
  imagefs.available: "1%%"
localStorageCapacityIsolation: false
serializeImagePulls: false
podLogsDir: %s
`, o.IP, n.cgroupRoot, n.sock, filepath.Join(n.Dir, "manifests"), resolv, o.PodCIDR.Masked(), n.podLogs())
	path := filepath.Join(n.Dir, "kubelet.yaml")
	if err := os.WriteFile(path, []byte(config), 0o600); err != nil {
		return err
	}
	kubeconfig, err := n.cp.WriteKubeconfig(controlplane.UserKubelet)
	if err != nil {
		return err
	}
	root := filepath.Join(n.Dir, "kubelet")
	n.kubeletArgv = n.enter(filepath.Join(o.KubeBin, Kubelet),
		"--config="+path, "--kubeconfig="+kubeconfig, "--hostname-override="+n.Name,
		"--node-ip="+o.IP.String(), "--root-dir="+root, "--cert-dir="+filepath.Join(root, "pki"), "--v=2")
	return n.runKubelet(ctx)
}

// runKubelet starts the kubelet and waits until it is healthy and has
// reported the node Ready.
func (n *Node) runKubelet(ctx context.Context) error {
	name := "kubelet-" + n.Name
	if n.kubeletStarts++; n.kubeletStarts > 1 {
		name += "-" + strconv.Itoa(n.kubeletStarts)
	}
	p, err := n.cp.Run(name, nil, n.kubeletArgv...)
	if err != nil {
		return err
	}
	n.kubelet, n.kubeletStopped = p, false
	hc := n.Net.HTTPClient(2 * time.Second)
	return p.WaitFor(ctx, 2*time.Minute, "healthy and the node Ready", func(ctx context.Context) error {
		resp, err := hc.Get("http://127.0.0.1:10248/healthz")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return fmt.Errorf("healthz: %s", resp.Status)
		}
		node, err := n.cp.Admin.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, c := range node.Status.Conditions {
			if c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue && c.Reason == "KubeletReady" {
				return nil
			}
		}
		return errors.New("the kubelet has not reported the node Ready")
	})
}

// StopKubelet stops the kubelet (SIGTERM), as an operator stops its
// service: the pods' containers run on.
func (n *Node) StopKubelet() {
	if n.kubelet != nil {
		n.kubeletStopped = true
		n.kubelet.Stop(10 * time.Second)
	}
}

// StartKubelet starts the kubelet StopKubelet stopped, with the same
// configuration, and waits until it is healthy and the node Ready.
func (n *Node) StartKubelet(ctx context.Context) error {
	if n.kubelet != nil && n.kubelet.Check() == nil {
		return errors.New("the kubelet is running: stop it first")
	}
	return n.runKubelet(ctx)
}

// Check reports a node program that exited (the kubelet but when
// StopKubelet stopped it).
func (n *Node) Check() error {
	for _, p := range []*controlplane.Process{n.containerd, n.kubelet} {
		if p == nil || p == n.kubelet && n.kubeletStopped {
			continue
		}
		if err := p.Check(); err != nil {
			return err
		}
	}
	return n.Node.Check()
}

// Stop stops the kubelet, then has the runtime stop and remove every pod
// sandbox (crictl rmp: each container killed, its network deleted through
// CNI, its namespace removed), as an operator tears a node down; then stops
// containerd, kills any task left, unmounts what is left under Dir and
// removes the node's cgroups, log links and namespace.
func (n *Node) Stop() {
	if n.kubelet != nil {
		n.kubelet.Stop(10 * time.Second)
	}
	if n.containerd != nil && n.containerd.Check() == nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		_ = n.crictlRun(ctx, "rmp", "--all", "--force")
		n.killTasks(ctx)
		cancel()
		n.containerd.Stop(10 * time.Second)
	}
	unmountUnder(n.Dir)
	removeLogLinks(n.podLogs())
	if n.cgroupRoot != "" {
		removeCgroup(n.cgroupRoot)
	}
	n.Node.Stop()
}

// crictlRun runs crictl against the node's containerd.
func (n *Node) crictlRun(ctx context.Context, args ...string) error {
	out, err := exec.CommandContext(ctx, n.crictl, append([]string{"--runtime-endpoint", "unix://" + n.sock, "--timeout", "30s"}, args...)...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("crictl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// HandedOut are the IPs host-local's store records as handed out.
func (n *Node) HandedOut() []netip.Addr {
	entries, _ := os.ReadDir(n.HostLocalDir)
	var out []netip.Addr
	for _, e := range entries {
		if ip, err := netip.ParseAddr(e.Name()); err == nil {
			out = append(out, ip)
		}
	}
	return out
}

// tasks are the IDs of the container tasks containerd runs.
func (n *Node) tasks(ctx context.Context) ([]string, error) {
	out, err := exec.CommandContext(ctx, "ctr", "--address", n.sock, "--namespace", "k8s.io", "tasks", "ls", "-q").Output()
	if err != nil {
		return nil, err
	}
	return strings.Fields(string(out)), nil
}

// killTasks kills and deletes every container task containerd still runs.
func (n *Node) killTasks(ctx context.Context) {
	ids, _ := n.tasks(ctx)
	for _, id := range ids {
		_ = n.ctr(ctx, "tasks", "kill", "--signal", "SIGKILL", id)
		_ = n.ctr(ctx, "tasks", "delete", "--force", id)
	}
}

// LogTail is the last n lines of the log of every container of the pods
// of namespace ns the node ran, each headed by its file.
func (n *Node) LogTail(ns string, lines int) string {
	files, _ := filepath.Glob(filepath.Join(n.podLogs(), ns+"_*", "*", "*.log"))
	var out strings.Builder
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		l := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
		fmt.Fprintf(&out, "== %s\n%s\n", strings.TrimPrefix(f, n.podLogs()+"/"), strings.Join(l[max(0, len(l)-lines):], "\n"))
	}
	return out.String()
}

// podLogs is the kubelet's podLogsDir, under Dir.
func (n *Node) podLogs() string { return filepath.Join(n.Dir, "logs", "pods") }

// containerLogLinks is where every kubelet links its containers' logs,
// whatever its podLogsDir.
const containerLogLinks = "/var/log/containers"

// removeLogLinks removes the links in containerLogLinks to logs under dir:
// the kubelet's own, which it leaves when stopped before its pods are
// collected.
func removeLogLinks(dir string) {
	entries, _ := os.ReadDir(containerLogLinks)
	for _, e := range entries {
		p := filepath.Join(containerLogLinks, e.Name())
		if target, err := os.Readlink(p); err == nil && strings.HasPrefix(target, dir+"/") {
			_ = os.Remove(p)
		}
	}
}

// cgroupHierarchies are the cgroup v1 hierarchies mounted under
// /sys/fs/cgroup, or the one unified hierarchy.
func cgroupHierarchies() []string {
	const base = "/sys/fs/cgroup"
	if _, err := os.Stat(filepath.Join(base, "cgroup.controllers")); err == nil {
		return []string{base}
	}
	entries, _ := os.ReadDir(base)
	var out []string
	for _, e := range entries {
		p := filepath.Join(base, e.Name())
		if fi, err := os.Lstat(p); err == nil && fi.IsDir() && e.Name() != "unified" {
			out = append(out, p)
		}
	}
	return out
}

// makeCgroup creates root in every hierarchy (the kubelet refuses a
// cgroupRoot that does not exist), copying cpuset's CPUs and memory nodes
// from the parent, without which no task may join it.
func makeCgroup(root string) error {
	for _, h := range cgroupHierarchies() {
		dir := filepath.Join(h, root)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("cgroup %s: %w", dir, err)
		}
		if filepath.Base(h) == "cpuset" {
			for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
				b, err := os.ReadFile(filepath.Join(h, f))
				if err != nil {
					return err
				}
				if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
					return fmt.Errorf("cgroup %s: %w", filepath.Join(dir, f), err)
				}
			}
		}
	}
	return nil
}

// removeCgroup removes root and every cgroup under it, deepest first, in
// every hierarchy; a cgroup that still holds a task stays.
func removeCgroup(root string) {
	for _, h := range cgroupHierarchies() {
		var dirs []string
		_ = filepath.WalkDir(filepath.Join(h, root), func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		slices.Reverse(dirs)
		for _, d := range dirs {
			_ = os.Remove(d)
		}
	}
}

// unmountUnder unmounts every mount point under dir, deepest first: the
// kubelet's volumes and containerd's rootfs mounts a crash left.
func unmountUnder(dir string) {
	points := mountsUnder(dir)
	slices.SortFunc(points, func(a, b string) int { return len(b) - len(a) })
	for _, p := range points {
		_ = exec.Command("umount", "-l", p).Run()
	}
}

// mountsUnder are the mount points at or under dir.
func mountsUnder(dir string) []string {
	return mountPoints(func(p string) bool { return p == dir || strings.HasPrefix(p, dir+"/") })
}

// mountPoints are this process's mount points that keep accepts.
func mountPoints(keep func(string) bool) []string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	var points []string
	for line := range strings.Lines(string(b)) {
		f := strings.Fields(line)
		if len(f) < 5 {
			continue
		}
		if p := unescapeMount(f[4]); keep(p) {
			points = append(points, p)
		}
	}
	return points
}

// unescapeMount undoes mountinfo's octal escapes (\040 for a space).
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var out strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				out.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		out.WriteByte(s[i])
	}
	return out.String()
}
