package realnode

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Reap removes what a real node left when the program that ran it was
// killed (SIGKILL, the OOM killer) before Stop: every process in the
// node's network namespace ns (its containerd, shims, kubelet and
// kube-proxy) and in its cgroups (its pods' containers), the mounts under
// its directory (a path component named ns: the kubelet's volumes,
// containerd's root filesystems), its pods' network namespaces, its
// cgroups, and the container log links left dangling. It leaves the
// node's namespace itself to its caller (netbed.Cleanup). It needs root.
func Reap(ns string) error {
	var st unix.Stat_t
	if err := unix.Stat(filepath.Join("/run/netns", ns), &st); err != nil {
		return fmt.Errorf("network namespace %s: %w", ns, err)
	}
	var errs []error
	pods := inCgroup("/" + ns)
	// The pods' namespaces, named under /run/netns by the runtime, are
	// known by their processes' until these are killed.
	podNets := map[uint64]bool{}
	for _, pid := range pods {
		var pst unix.Stat_t
		if unix.Stat("/proc/"+strconv.Itoa(pid)+"/ns/net", &pst) == nil && pst.Ino != st.Ino {
			podNets[pst.Ino] = true
		}
	}
	pids := append(inNetns(st.Ino), pods...)
	for _, pid := range pids {
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, fmt.Errorf("killing process %d of %s: %w", pid, ns, err))
		}
	}
	// A killed process leaves its cgroup, and its mounts stop being busy,
	// once the kernel has reaped it.
	deadline := time.Now().Add(10 * time.Second)
	for slices.ContainsFunc(pids, alive) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	for _, p := range mountsNamed(ns) {
		if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("unmounting %s: %w", p, err))
		}
	}
	if entries, err := os.ReadDir("/run/netns"); err == nil {
		for _, e := range entries {
			p := filepath.Join("/run/netns", e.Name())
			var pst unix.Stat_t
			if !strings.HasPrefix(e.Name(), "cni-") || unix.Stat(p, &pst) != nil || !podNets[pst.Ino] {
				continue
			}
			if err := unix.Unmount(p, unix.MNT_DETACH); err != nil {
				errs = append(errs, fmt.Errorf("unmounting the pod network namespace %s: %w", p, err))
				continue
			}
			_ = os.Remove(p)
		}
	}
	removeCgroup("/" + ns)
	for _, h := range cgroupHierarchies() {
		if _, err := os.Stat(filepath.Join(h, ns)); err == nil {
			errs = append(errs, fmt.Errorf("cgroup %s still holds a process", filepath.Join(h, ns)))
		}
	}
	removeDanglingLogLinks()
	return errors.Join(errs...)
}

// alive says whether process pid still exists (a zombie counts as gone).
func alive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	// The state follows the command's closing parenthesis.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] != 'Z'
}

// inNetns are the processes whose network namespace has inode ino.
func inNetns(ino uint64) []int {
	entries, _ := os.ReadDir("/proc")
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		var st unix.Stat_t
		if unix.Stat("/proc/"+e.Name()+"/ns/net", &st) == nil && st.Ino == ino {
			pids = append(pids, pid)
		}
	}
	return pids
}

// inCgroup are the processes in root or under it, in any hierarchy.
func inCgroup(root string) []int {
	var pids []int
	for _, h := range cgroupHierarchies() {
		_ = filepath.WalkDir(filepath.Join(h, root), func(p string, d os.DirEntry, err error) error {
			if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
				return nil
			}
			b, _ := os.ReadFile(p)
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil && !slices.Contains(pids, pid) {
					pids = append(pids, pid)
				}
			}
			return nil
		})
	}
	return pids
}

// mountsNamed are the mount points with a path component named name,
// deepest first.
func mountsNamed(name string) []string {
	points := mountPoints(func(p string) bool { return slices.Contains(strings.Split(p, "/"), name) })
	slices.SortFunc(points, func(a, b string) int { return len(b) - len(a) })
	return points
}

// removeDanglingLogLinks removes the container log links whose log is
// gone.
func removeDanglingLogLinks() {
	entries, _ := os.ReadDir(containerLogLinks)
	for _, e := range entries {
		p := filepath.Join(containerLogLinks, e.Name())
		if _, err := os.Stat(p); errors.Is(err, os.ErrNotExist) {
			_ = os.Remove(p)
		}
	}
}
