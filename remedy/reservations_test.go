package remedy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ghostwatch/ghostwatch/finding"
	"github.com/ghostwatch/ghostwatch/internal/poll"
	"github.com/ghostwatch/ghostwatch/snapshot"
)

// store makes a host root holding host-local's store of network kindnet
// under /run/cni-ipam-state, with the given files.
func store(t *testing.T, files map[string]string) (root, dir string) {
	t.Helper()
	root = t.TempDir()
	dir = filepath.Join(root, "run/cni-ipam-state/kindnet")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return root, dir
}

func reservation(ip string) *finding.ReservationTarget {
	return &finding.ReservationTarget{Store: "/run/cni-ipam-state/kindnet", IP: netip.MustParseAddr(ip),
		ContainerID: "5f1b2c3d", IfName: "eth0", Pod: snapshot.ObjectRef{Namespace: "default", Name: "web-0"}, PodUID: "u1"}
}

func TestReservationsWriteExactlyHostLocalsFormat(t *testing.T) {
	root, dir := store(t, map[string]string{"10.244.2.2": "aaaa\r\neth0", "last_reserved_ip.0": "10.244.2.2"})
	r := &Reservations{Root: root}
	tgt := reservation("10.244.2.3")
	if err := r.Verify(context.Background(), tgt); err != nil {
		t.Fatalf("Verify: %v", err)
	}
	if err := r.Act(context.Background(), tgt); err != nil {
		t.Fatalf("Act: %v", err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "10.244.2.3"))
	if err != nil || string(b) != "5f1b2c3d\r\neth0" {
		t.Errorf("reservation = %q, %v; want the container ID, CRLF and the interface, no newline", b, err)
	}
	if fi, _ := os.Stat(filepath.Join(dir, "10.244.2.3")); fi.Mode().Perm() != 0o600 {
		t.Errorf("mode %v, want 0600 as host-local writes", fi.Mode().Perm())
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "last_reserved_ip.0")); string(b) != "10.244.2.2" {
		t.Errorf("last_reserved_ip.0 = %q: where the next ADD starts moved", b)
	}
	// Done once: the address is booked now, and nothing is written over.
	if err := r.Verify(context.Background(), tgt); !errors.Is(err, ErrGone) {
		t.Errorf("Verify after the write: %v, want ErrGone", err)
	}
	other := reservation("10.244.2.2")
	if err := r.Act(context.Background(), other); !errors.Is(err, ErrGone) {
		t.Errorf("Act on a booked address: %v, want ErrGone", err)
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "10.244.2.2")); string(b) != "aaaa\r\neth0" {
		t.Errorf("a booked address's file changed: %q", b)
	}
}

// Seed 003 wiped the data directory whole: the store is made again, as
// host-local's next ADD would make it. Without the data directory's
// parent, nothing is written.
func TestReservationsInAWipedStore(t *testing.T) {
	root, dir := store(t, nil)
	if err := os.RemoveAll(filepath.Dir(dir)); err != nil {
		t.Fatal(err)
	}
	r := &Reservations{Root: root}
	if err := r.Act(context.Background(), reservation("10.244.2.3")); err != nil {
		t.Fatalf("Act: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "10.244.2.3")); err != nil || string(b) != "5f1b2c3d\r\neth0" {
		t.Errorf("reservation = %q, %v", b, err)
	}
	if err := os.RemoveAll(filepath.Join(root, "run")); err != nil {
		t.Fatal(err)
	}
	if err := r.Act(context.Background(), reservation("10.244.2.4")); err == nil || !strings.Contains(err.Error(), "cannot be read here") {
		t.Errorf("Act without the data directory's parent: %v", err)
	}
	if _, err := os.Stat(filepath.Join(root, "run")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Act made directories above the store's: %v", err)
	}
}

func TestReservationsRefuseWhatIsNotAReservation(t *testing.T) {
	root, dir := store(t, nil)
	r := &Reservations{Root: root}
	bad := func(mod func(*finding.ReservationTarget)) *finding.ReservationTarget {
		t := reservation("10.244.2.3")
		mod(t)
		return t
	}
	for name, tgt := range map[string]finding.Target{
		"an IPv6 address with a zone": bad(func(t *finding.ReservationTarget) { t.IP = netip.MustParseAddr("fe80::1%eth0") }),
		"an IPv4-mapped address":      bad(func(t *finding.ReservationTarget) { t.IP = netip.MustParseAddr("::ffff:10.244.2.3") }),
		"no container":                bad(func(t *finding.ReservationTarget) { t.ContainerID = "" }),
		"a line break in the ID":      bad(func(t *finding.ReservationTarget) { t.ContainerID = "a\r\neth9" }),
		"a relative store":            bad(func(t *finding.ReservationTarget) { t.Store = "run/cni-ipam-state/kindnet" }),
		"a store that climbs":         bad(func(t *finding.ReservationTarget) { t.Store = "/run/../etc/kindnet" }),
		"a store CNI cannot name":     bad(func(t *finding.ReservationTarget) { t.Store = "/run/cni-ipam-state/-x" }),
		"a flow":                      &finding.FlowTarget{},
	} {
		if err := r.Act(context.Background(), tgt); err == nil {
			t.Errorf("%s: written", name)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Errorf("files written: %v", entries)
	}
}

// A store that is a symbolic link is not written through: on the node
// it points elsewhere than under the host root.
func TestReservationsRefuseALinkedStore(t *testing.T) {
	root, dir := store(t, nil)
	elsewhere := filepath.Join(root, "elsewhere")
	if err := os.MkdirAll(elsewhere, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(elsewhere, dir); err != nil {
		t.Fatal(err)
	}
	err := (&Reservations{Root: root}).Act(context.Background(), reservation("10.244.2.3"))
	if err == nil || !strings.Contains(err.Error(), "is not a directory (a symbolic link is not followed)") {
		t.Errorf("Act through a linked store: %v", err)
	}
	if entries, _ := os.ReadDir(elsewhere); len(entries) != 0 {
		t.Errorf("written through the link: %v", entries)
	}
}

// The write waits for host-local's lock, as a concurrent ADD holds it, and
// gives up when its context ends, writing nothing.
func TestReservationsWaitForHostLocalsLock(t *testing.T) {
	root, dir := store(t, map[string]string{"lock": ""})
	lock, err := os.Open(filepath.Join(dir, "lock"))
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	r := &Reservations{Root: root}
	done := make(chan error, 1)
	go func() { done <- r.Act(context.Background(), reservation("10.244.2.3")) }()
	waitForWaiter(t, filepath.Join(dir, "lock"))
	select {
	case err := <-done:
		t.Fatalf("Act returned (%v) while host-local's lock was held", err)
	default:
	}
	if _, err := os.Stat(filepath.Join(dir, "10.244.2.3")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("written under another's lock: %v", err)
	}
	lock.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Act: %v", err)
		}
	case <-time.After(poll.Patience):
		t.Fatalf("Act did not return within %v of the lock's release", poll.Patience)
	}

	// Held again: a context that ends stops the wait, and nothing is written.
	lock2, err := os.Open(filepath.Join(dir, "lock"))
	if err != nil {
		t.Fatal(err)
	}
	defer lock2.Close()
	if err := syscall.Flock(int(lock2.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { done <- r.Act(ctx, reservation("10.244.2.4")) }()
	waitForWaiter(t, filepath.Join(dir, "lock"))
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Errorf("Act with its context canceled: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "10.244.2.4")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("written after giving up: %v", err)
	}
}

// waitForWaiter waits until /proc/locks lists a process blocked on the
// flock of path.
func waitForWaiter(t *testing.T, path string) {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	suffix := fmt.Sprintf(":%d", st.Ino)
	poll.Until(t, poll.Patience, "a process blocked on the flock of "+path, func() bool {
		f, err := os.Open("/proc/locks")
		if err != nil {
			t.Skipf("no /proc/locks: %v", err)
		}
		defer f.Close()
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) > 6 && fields[1] == "->" && fields[2] == "FLOCK" && strings.HasSuffix(fields[6], suffix) {
				return true
			}
		}
		return false
	})
}

// A directory above the store linked out of the host root (run -> an
// absolute path of this machine's) is resolved inside the root, as the
// node resolves it: the write lands in the node's tree, never in this
// machine's, and an entry named by the address that is a link is not
// written through either.
func TestReservationsStayInsideTheRoot(t *testing.T) {
	root := t.TempDir()
	outside := t.TempDir()
	// On this machine, outside/cni-ipam-state/kindnet is a store too.
	if err := os.MkdirAll(filepath.Join(outside, "cni-ipam-state/kindnet"), 0o755); err != nil {
		t.Fatal(err)
	}
	// On the node, /run is a link to /node-run, which holds the store.
	if err := os.MkdirAll(filepath.Join(root, "node-run/cni-ipam-state/kindnet"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(root, "run")); err != nil {
		t.Fatal(err)
	}
	r := &Reservations{Root: root}
	err := r.Act(context.Background(), reservation("10.244.2.3"))
	if entries, _ := os.ReadDir(filepath.Join(outside, "cni-ipam-state/kindnet")); len(entries) != 0 {
		t.Fatalf("written out of the host root, through %s: %v (Act: %v)", outside, entries, err)
	}
	// The link's target, read inside the root, is not there: no store to
	// write in, and nothing is made above it.
	if err == nil || !strings.Contains(err.Error(), "cannot be read here") {
		t.Errorf("Act through a parent linked out of the root: %v", err)
	}
	// A link inside the root is followed as the node follows it.
	if err := os.Remove(filepath.Join(root, "run")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/node-run", filepath.Join(root, "run")); err != nil {
		t.Fatal(err)
	}
	if err := r.Act(context.Background(), reservation("10.244.2.3")); err != nil {
		t.Fatalf("Act through a parent linked inside the root: %v", err)
	}
	if b, err := os.ReadFile(filepath.Join(root, "node-run/cni-ipam-state/kindnet/10.244.2.3")); err != nil || string(b) != "5f1b2c3d\r\neth0" {
		t.Errorf("the reservation inside the root: %q, %v", b, err)
	}
	// An entry named by the address that is a link is not written
	// through.
	if err := os.Symlink(filepath.Join(outside, "x"), filepath.Join(root, "node-run/cni-ipam-state/kindnet/10.244.2.4")); err != nil {
		t.Fatal(err)
	}
	if err := r.Act(context.Background(), reservation("10.244.2.4")); err == nil || !strings.Contains(err.Error(), "is a symbolic link") {
		t.Errorf("Act over a linked entry: %v", err)
	}
	if _, err := os.Stat(filepath.Join(outside, "x")); err == nil {
		t.Error("written through the entry's link")
	}
}
