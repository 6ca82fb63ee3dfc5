package netbed

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// fakeDirs points the lock and namespace directories at temporary ones,
// with the named namespaces in it as plain files (DeleteNamespace removes
// those as it removes unmounted bind points), and lets the test run as
// if root.
func fakeDirs(t *testing.T, namespaces ...string) {
	t.Helper()
	oldLock, oldNetns, oldEuid := lockDir, netnsDir, geteuid
	t.Cleanup(func() { lockDir, netnsDir, geteuid = oldLock, oldNetns, oldEuid })
	lockDir, netnsDir = filepath.Join(t.TempDir(), "run"), t.TempDir()
	geteuid = func() int { return 0 }
	for _, n := range namespaces {
		if err := os.WriteFile(filepath.Join(netnsDir, n), nil, 0o444); err != nil {
			t.Fatal(err)
		}
	}
}

func namespaces(t *testing.T) []string {
	t.Helper()
	entries, err := os.ReadDir(netnsDir)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, e := range entries {
		out = append(out, e.Name())
	}
	return out
}

// Namespaces of a lab that runs are its own; those of a lab that holds no
// lock any more are leftovers, every one listed, and lab cleanup removes
// them, and only them.
func TestClaimTellsARunningLabFromLeftovers(t *testing.T) {
	fakeDirs(t, "p-node", "p-client", "p2-node", "other")
	// A lab running with prefix p: its lock is held, here by this process
	// through another open file, which flock(2) tells apart.
	running, err := lockPrefix("p")
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(filepath.Join(lockDir, "lab-p.lock"))
	if strings.TrimSpace(string(b)) != strconv.Itoa(os.Getpid()) {
		t.Errorf("lock file holds %q, want this pid %d", b, os.Getpid())
	}
	want := "another lab (pid " + strconv.Itoa(os.Getpid()) + ") is running with prefix p; wait for it or use --prefix"
	var busy *BusyError
	if _, err := ClaimPrefix("p"); !errors.As(err, &busy) || err.Error() != want {
		t.Errorf("claiming p while a lab runs: %v, want %q", err, want)
	}
	if removed, err := Cleanup("p"); !errors.As(err, &busy) || len(removed) > 0 {
		t.Errorf("cleanup while a lab runs: removed %v, %v; want a refusal", removed, err)
	}
	if got := namespaces(t); len(got) != 4 {
		t.Errorf("namespaces after a refused cleanup: %v", got)
	}

	// The lab dies: the kernel drops its lock.
	if err := running.Release(); err != nil {
		t.Fatal(err)
	}
	want = "leftovers of a lab that is no longer running: p-client, p-node; remove them with `ghostwatch-lab cleanup --prefix p`"
	var left *LeftoversError
	if _, err := ClaimPrefix("p"); !errors.As(err, &left) || err.Error() != want {
		t.Errorf("claiming p over leftovers: %v, want %q", err, want)
	}
	removed, err := Cleanup("p")
	if err != nil || !slices.Equal(removed, []string{"p-client", "p-node"}) {
		t.Errorf("cleanup removed %v, %v; want p-client, p-node", removed, err)
	}
	if got := namespaces(t); !slices.Equal(got, []string{"other", "p2-node"}) {
		t.Errorf("namespaces after cleanup: %v, want other, p2-node", got)
	}
	if removed, err := Cleanup("p"); err != nil || len(removed) > 0 {
		t.Errorf("second cleanup: removed %v, %v; want nothing to do", removed, err)
	}
	c, err := ClaimPrefix("p")
	if err != nil {
		t.Fatalf("claiming p once clean: %v", err)
	}
	if err := c.Release(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(lockDir, "lab-p.lock")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the lock file outlived its release: %v", err)
	}
}

// Cleaning up prefix gw spares the namespaces of a running lab gw-lab,
// which are named gw-* too.
func TestCleanupSparesARunningLabWithALongerPrefix(t *testing.T) {
	fakeDirs(t, "gw-lab-node", "gw-node")
	running, err := lockPrefix("gw-lab")
	if err != nil {
		t.Fatal(err)
	}
	defer running.Release()
	removed, err := Cleanup("gw")
	if err != nil || !slices.Equal(removed, []string{"gw-node"}) {
		t.Errorf("cleanup removed %v, %v; want gw-node only", removed, err)
	}
	if got := namespaces(t); !slices.Equal(got, []string{"gw-lab-node"}) {
		t.Errorf("namespaces after cleanup: %v, want gw-lab-node", got)
	}
}
