package realnode

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/ghostwatch/ghostwatch/internal/poll"
	"github.com/ghostwatch/ghostwatch/internal/testenv"
	"github.com/ghostwatch/ghostwatch/lab/netbed"
)

// What a killed real node leaves, made by hand: a process in the node's
// namespace (its containerd), a pod's process in the node's cgroup and in
// a namespace of its own named as the runtime names it, and a mount under
// a directory named after the node's namespace. Reap removes it all.
func TestReap(t *testing.T) {
	testenv.RequireRoot(t, "reaping kills processes, unmounts and removes cgroups")
	b := make([]byte, 2)
	rand.Read(b)
	bed, err := netbed.New("gwr-" + hex.EncodeToString(b))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { bed.Close() })
	node, err := bed.AddNode("node-1", netbed.NodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ns := node.Name()
	start := func(argv ...string) *exec.Cmd {
		t.Helper()
		cmd := exec.Command(argv[0], argv[1:]...)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		return cmd
	}
	runtime := start("nsenter", "--net="+node.Path(), "--", "sleep", "600")

	podNet := "cni-" + ns
	if out, err := exec.Command("ip", "netns", "add", podNet).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", podNet).Run() })
	for _, c := range []string{"/" + ns, "/" + ns + "/pod"} {
		if err := makeCgroup(c); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() { removeCgroup("/" + ns) })
	pod := start("ip", "netns", "exec", podNet, "sleep", "600")
	for _, h := range cgroupHierarchies() {
		if err := os.WriteFile(filepath.Join(h, ns, "pod", "cgroup.procs"), []byte(strconv.Itoa(pod.Process.Pid)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// The pod's process is in its namespace once ip has entered it.
	var podSt unix.Stat_t
	if err := unix.Stat(filepath.Join("/run/netns", podNet), &podSt); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, poll.Patience, "the pod's process in its namespace", func() bool {
		var st unix.Stat_t
		return unix.Stat("/proc/"+strconv.Itoa(pod.Process.Pid)+"/ns/net", &st) == nil && st.Ino == podSt.Ino
	})
	dir := filepath.Join(t.TempDir(), ns, "kubelet", "pods", "x", "volume")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })

	if err := Reap(ns); err != nil {
		t.Fatal(err)
	}
	for name, cmd := range map[string]*exec.Cmd{"the runtime": runtime, "the pod": pod} {
		if alive(cmd.Process.Pid) {
			t.Errorf("%s (process %d) outlived the reaping", name, cmd.Process.Pid)
		}
	}
	if m := mountsNamed(ns); len(m) > 0 {
		t.Errorf("mounts left: %v", m)
	}
	if _, err := os.Stat(filepath.Join("/run/netns", podNet)); err == nil {
		t.Errorf("the pod's namespace %s is left", podNet)
	}
	for _, h := range cgroupHierarchies() {
		if _, err := os.Stat(filepath.Join(h, ns)); err == nil {
			t.Errorf("cgroup %s is left", filepath.Join(h, ns))
		}
	}
	if _, err := os.Stat(node.Path()); err != nil {
		t.Errorf("the node's own namespace is its caller's to remove, and is gone: %v", err)
	}
}
