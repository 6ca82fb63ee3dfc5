package lab

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/ghostwatch/ghostwatch/lab/controlplane"
)

// The end-to-end harness has no kubelet and no container runtime: runPod
// stands in for both. It runs a rendered workload's container the way they
// would, from what the manifest says and nothing else: the image's
// entrypoint (/ghostwatch, alone on a root file system of its own, read-only
// when the manifest asks), the container's args with $(VAR) expanded, its
// env with the downward API's fields resolved for the pod, a token of its
// ServiceAccount (a TokenRequest, at the path client-go's in-cluster
// configuration reads, with the API server's CA and address as the kubelet
// gives them), its hostPath and ConfigMap volumes at their mount paths,
// read-only where the manifest says, its user, its capabilities (the
// bounding set cut to what it adds) and no new privileges. A hostPath is
// taken under hostRoot, the node's file system in the test.

// podExecEnv carries a podExec to the test binary re-executed as the
// container's init: it enters the root and drops what the container may
// not keep, then executes the entrypoint.
const podExecEnv = "GHOSTWATCH_LAB_POD_EXEC"

type podExec struct {
	Root       string
	Argv, Env  []string
	UID, GID   int
	KeepCaps   []int
	NoNewPrivs bool
}

// execPod is the container's init, in the re-executed test binary (see
// TestMain). Capabilities and the root are a thread's and a process's:
// everything runs on one locked thread, which then executes the
// entrypoint. It returns only on failure.
func execPod(spec string) error {
	runtime.LockOSThread()
	var p podExec
	if err := json.Unmarshal([]byte(spec), &p); err != nil {
		return err
	}
	if err := unix.Chroot(p.Root); err != nil {
		return fmt.Errorf("chroot %s: %w", p.Root, err)
	}
	if err := unix.Chdir("/"); err != nil {
		return err
	}
	for c := 0; c < 64; c++ {
		if slices.Contains(p.KeepCaps, c) {
			continue
		}
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil && err != unix.EINVAL {
			return fmt.Errorf("dropping capability %d: %w", c, err)
		}
	}
	if p.NoNewPrivs {
		if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
			return err
		}
	}
	if p.UID != 0 || p.GID != 0 {
		if err := syscall.Setgroups(nil); err != nil {
			return err
		}
		if err := syscall.Setgid(p.GID); err != nil {
			return err
		}
		if err := syscall.Setuid(p.UID); err != nil {
			return err
		}
	}
	return unix.Exec(p.Argv[0], p.Argv, p.Env)
}

// capNumbers are the capabilities a manifest may add, by number.
var capNumbers = map[corev1.Capability]int{"NET_ADMIN": unix.CAP_NET_ADMIN, "NET_RAW": unix.CAP_NET_RAW, "SYS_ADMIN": unix.CAP_SYS_ADMIN}

// runningPod is a container runPod started.
type runningPod struct {
	Name string
	Logs *bytes.Buffer
	node *controlplane.Node
	c    corev1.Container
	addr netip.Addr // where its probes reach it in the node's namespace
}

// runPod runs the first container of spec as pod ns/name on node, in the
// node's network namespace, until the test ends (then SIGINT, and it must
// exit 0). The pod is not created in the API server: only its identity,
// files and environment are made, as the kubelet would make them.
func (e *realEnv) runPod(t *testing.T, node *controlplane.Node, ns, name string, spec corev1.PodSpec, hostRoot string) *runningPod {
	t.Helper()
	ctx := context.Background()
	c := spec.Containers[0]
	if len(c.Command) != 0 {
		t.Fatalf("%s: a command replaces the image's entrypoint: %v", name, c.Command)
	}
	root, err := os.MkdirTemp("", "ghostwatch-pod-")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	var mounted []string
	t.Cleanup(func() {
		// Detaching the root detaches every mount below it; only then is
		// removing the directory safe.
		if len(mounted) > 0 {
			if err := unix.Unmount(root, unix.MNT_DETACH); err != nil {
				t.Errorf("unmounting %s: %v (left in place)", root, err)
				return
			}
		}
		os.RemoveAll(root)
	})
	bind := func(src, dst string, flags uintptr, ro bool) {
		t.Helper()
		if err := unix.Mount(src, dst, "", unix.MS_BIND|flags, ""); err != nil {
			t.Fatalf("bind %s on %s: %v", src, dst, err)
		}
		mounted = append(mounted, dst)
		if ro {
			if err := unix.Mount("", dst, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY|flags, ""); err != nil {
				t.Fatalf("read-only %s: %v", dst, err)
			}
		}
	}
	write := func(path string, data []byte) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// The image: /ghostwatch and nothing else. A real container has
	// /proc; the token where the kubelet projects it.
	write(filepath.Join(root, "ghostwatch"), nil)
	if err := os.Mkdir(filepath.Join(root, "proc"), 0o755); err != nil {
		t.Fatal(err)
	}
	tok, err := e.api.CoreV1().ServiceAccounts(ns).CreateToken(ctx, spec.ServiceAccountName,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: new(int64(3600))}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("a token of ServiceAccount %s/%s: %v", ns, spec.ServiceAccountName, err)
	}
	sa := filepath.Join(root, "var/run/secrets/kubernetes.io/serviceaccount")
	write(filepath.Join(sa, "token"), []byte(tok.Status.Token))
	write(filepath.Join(sa, "ca.crt"), e.cp.Config(controlplane.UserAdmin).CAData)
	write(filepath.Join(sa, "namespace"), []byte(ns))

	type volumeMount struct {
		src, dst string
		ro       bool
	}
	var mounts []volumeMount
	for _, m := range c.VolumeMounts {
		i := slices.IndexFunc(spec.Volumes, func(v corev1.Volume) bool { return v.Name == m.Name })
		if i < 0 {
			t.Fatalf("%s: volume %s mounted but not declared", name, m.Name)
		}
		v := spec.Volumes[i]
		var src string
		switch {
		case v.HostPath != nil:
			src = filepath.Join(hostRoot, v.HostPath.Path)
			if err := os.MkdirAll(src, 0o755); err != nil {
				t.Fatal(err)
			}
		case v.ConfigMap != nil:
			cm, err := e.api.CoreV1().ConfigMaps(ns).Get(ctx, v.ConfigMap.Name, metav1.GetOptions{})
			if err != nil {
				t.Fatalf("%s: ConfigMap %s: %v", name, v.ConfigMap.Name, err)
			}
			src = t.TempDir()
			for k, d := range cm.Data {
				write(filepath.Join(src, k), []byte(d))
			}
		default:
			t.Fatalf("%s: volume %s: only hostPath and ConfigMap volumes are run here", name, v.Name)
		}
		dst := filepath.Join(root, m.MountPath)
		if err := os.MkdirAll(dst, 0o755); err != nil {
			t.Fatal(err)
		}
		mounts = append(mounts, volumeMount{src, dst, m.ReadOnly})
	}
	sc := c.SecurityContext
	bind(root, root, 0, false)
	bind(ghostwatchBinary(t), filepath.Join(root, "ghostwatch"), 0, true)
	bind("/proc", filepath.Join(root, "proc"), unix.MS_REC, false)
	for _, m := range mounts {
		bind(m.src, m.dst, 0, m.ro)
	}
	if sc != nil && sc.ReadOnlyRootFilesystem != nil && *sc.ReadOnlyRootFilesystem {
		if err := unix.Mount("", root, "", unix.MS_BIND|unix.MS_REMOUNT|unix.MS_RDONLY, ""); err != nil {
			t.Fatalf("read-only root: %v", err)
		}
	}

	env := map[string]string{
		"KUBERNETES_SERVICE_HOST": "127.0.0.1", // the node's forwarder to the API server
		"KUBERNETES_SERVICE_PORT": strconv.Itoa(e.cp.Port),
	}
	var order []string
	for _, v := range c.Env {
		val := v.Value
		if f := v.ValueFrom; f != nil {
			if f.FieldRef == nil {
				t.Fatalf("%s: env %s: only the downward API's fields are run here", name, v.Name)
			}
			switch f.FieldRef.FieldPath {
			case "metadata.name":
				val = name
			case "metadata.namespace":
				val = ns
			case "spec.nodeName":
				val = node.Name
			case "status.hostIP":
				val = node.IP.String()
			default:
				t.Fatalf("%s: env %s: field %s", name, v.Name, f.FieldRef.FieldPath)
			}
		}
		env[v.Name] = val
		order = append(order, v.Name)
	}
	// The kubelet expands $(VAR) in args from the container's env.
	ref := regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)
	argv := []string{"/ghostwatch"}
	for _, a := range c.Args {
		argv = append(argv, ref.ReplaceAllStringFunc(a, func(m string) string {
			if v, ok := env[m[2:len(m)-1]]; ok {
				return v
			}
			return m
		}))
	}
	p := podExec{Root: root, Argv: argv, NoNewPrivs: true}
	for k, v := range env {
		p.Env = append(p.Env, k+"="+v)
	}
	slices.Sort(p.Env)
	if sc != nil {
		if sc.RunAsUser != nil {
			p.UID = int(*sc.RunAsUser)
			p.GID = p.UID
		}
		if sc.RunAsGroup != nil {
			p.GID = int(*sc.RunAsGroup)
		}
		if sc.AllowPrivilegeEscalation != nil {
			p.NoNewPrivs = !*sc.AllowPrivilegeEscalation
		}
		if sc.Capabilities != nil {
			if !slices.Contains(sc.Capabilities.Drop, "ALL") {
				t.Fatalf("%s: capabilities %+v: only drop ALL, then add, is run here", name, sc.Capabilities)
			}
			for _, a := range sc.Capabilities.Add {
				n, ok := capNumbers[a]
				if !ok {
					t.Fatalf("%s: capability %s", name, a)
				}
				p.KeepCaps = append(p.KeepCaps, n)
			}
		}
	}
	if p.UID != 0 {
		// The files the kubelet writes are readable by the container's
		// user (its fsGroup, in a cluster).
		for _, dir := range []string{sa, filepath.Dir(sa), filepath.Dir(filepath.Dir(sa))} {
			os.Chmod(dir, 0o755)
		}
	}
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(self)
	cmd.Env = []string{podExecEnv + "=" + string(b)}
	logs, done := startUntilCleanup(t, name, cmd, func() error {
		// The child is made on this thread, in the node's namespace.
		return node.Net.Do(cmd.Start)
	})
	rp := &runningPod{Name: name, Logs: logs, node: node, c: c, addr: netip.MustParseAddr("127.0.0.1")}
	if spec.HostNetwork {
		rp.addr = node.IP
	}
	e.eventually(t, time.Minute, name+" ready by its readiness probe", func() bool {
		select {
		case err := <-done:
			done <- err // for the cleanup, which waits for it
			t.Fatalf("%s exited: %v; its log:\n%s", name, err, logs.String())
		default:
		}
		code, _, err := rp.probe(c.ReadinessProbe)
		return err == nil && code == http.StatusOK
	})
	return rp
}

// probe runs an HTTP probe of the container's as the kubelet would: a
// named port is the container's port of that name.
func (p *runningPod) probe(pr *corev1.Probe) (int, string, error) {
	if pr == nil || pr.HTTPGet == nil {
		return 0, "", fmt.Errorf("%s: no HTTP probe", p.Name)
	}
	port := pr.HTTPGet.Port.IntValue()
	if port == 0 {
		i := slices.IndexFunc(p.c.Ports, func(cp corev1.ContainerPort) bool { return cp.Name == pr.HTTPGet.Port.StrVal })
		if i < 0 {
			return 0, "", fmt.Errorf("%s: probe port %s is no port of the container", p.Name, pr.HTTPGet.Port.StrVal)
		}
		port = int(p.c.Ports[i].ContainerPort)
	}
	return p.get(netip.AddrPortFrom(p.addr, uint16(port)), pr.HTTPGet.Path)
}

// metrics reads /metrics on the container's port named metrics.
func (p *runningPod) metrics(t *testing.T) string {
	t.Helper()
	_, body, err := p.probe(&corev1.Probe{ProbeHandler: corev1.ProbeHandler{HTTPGet: &corev1.HTTPGetAction{Path: "/metrics", Port: intstr.FromString("metrics")}}})
	if err != nil {
		t.Fatal(err)
	}
	return body
}

func (p *runningPod) get(at netip.AddrPort, path string) (int, string, error) {
	resp, err := p.node.Net.HTTPClient(2 * time.Second).Get("http://" + at.String() + path)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(b)), err
}
