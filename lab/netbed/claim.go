package netbed

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// lockDir holds a lock file per prefix in use: lab-<prefix>.lock.
var lockDir = "/run/ghostwatch"

// geteuid is os.Geteuid; tests replace it.
var geteuid = os.Geteuid

// Claim is a process's hold on a namespace prefix: an flock(2) on
// /run/ghostwatch/lab-<prefix>.lock, which holds the process's pid, taken
// before any namespace is made and kept until Release. The kernel drops
// the lock when the process dies, however it dies: namespaces with the
// prefix and no lock held are a dead lab's leftovers.
type Claim struct {
	prefix string
	f      *os.File
}

// BusyError is returned while another process holds the prefix.
type BusyError struct {
	Prefix string
	// PID is the holder's, as its lock file says; 0 when unknown.
	PID int
}

func (e *BusyError) Error() string {
	pid := "pid unknown"
	if e.PID > 0 {
		pid = "pid " + strconv.Itoa(e.PID)
	}
	return fmt.Sprintf("another lab (%s) is running with prefix %s; wait for it or use --prefix", pid, e.Prefix)
}

// LeftoversError is returned when namespaces with the prefix exist and no
// running lab holds it.
type LeftoversError struct {
	Prefix string
	// Names are every namespace named <prefix>-* that no running lab owns.
	Names []string
}

func (e *LeftoversError) Error() string {
	return fmt.Sprintf("leftovers of a lab that is no longer running: %s; remove them with `ghostwatch-lab cleanup --prefix %s`",
		strings.Join(e.Names, ", "), e.Prefix)
}

// ClaimPrefix takes prefix for this process. It refuses when not root,
// with a *BusyError while another process holds the prefix, and with a
// *LeftoversError when namespaces named <prefix>-* exist that no running
// lab owns.
func ClaimPrefix(prefix string) (*Claim, error) {
	c, err := lockPrefix(prefix)
	if err != nil {
		return nil, err
	}
	names, err := leftovers(prefix)
	if err == nil && len(names) > 0 {
		err = &LeftoversError{Prefix: prefix, Names: names}
	}
	if err != nil {
		c.Release()
		return nil, err
	}
	return c, nil
}

// Bed starts an empty bed on the claimed prefix. Closing it keeps the
// claim, so that one lab can build and remove beds in turn.
func (c *Claim) Bed() *Bed { return &Bed{prefix: c.prefix} }

// Release gives the prefix up. It is safe to call more than once.
func (c *Claim) Release() error {
	if c == nil || c.f == nil {
		return nil
	}
	// Remove the file while holding the lock: whoever opened it meanwhile
	// sees, once it has the lock, that it is no longer the file at the
	// path, and starts over (lockPrefix).
	err := os.Remove(c.f.Name())
	if cerr := c.f.Close(); err == nil {
		err = cerr
	}
	c.f = nil
	return err
}

// Cleanup removes the namespaces named <prefix>-* that a lab no longer
// running left behind, holding the prefix meanwhile so that no lab starts
// on it. It refuses with a *BusyError while a lab holds the prefix, and
// leaves alone the namespaces of running labs whose longer prefix starts
// with this one's. Before removing a namespace it calls each of reap with
// its name, to remove what else the lab left there (a real node's
// processes, mounts and cgroups: realnode.Reap); a namespace whose reaping
// failed is kept. It returns the names it removed; none when there was
// nothing to do.
func Cleanup(prefix string, reap ...func(name string) error) (removed []string, err error) {
	c, err := lockPrefix(prefix)
	if err != nil {
		return nil, err
	}
	defer c.Release()
	names, err := leftovers(prefix)
	if err != nil {
		return nil, err
	}
	var errs []error
	for _, n := range names {
		if err := reapAll(n, reap); err != nil {
			errs = append(errs, fmt.Errorf("network namespace %s kept: %w", n, err))
			continue
		}
		if err := DeleteNamespace(n); err != nil && !errors.Is(err, os.ErrNotExist) {
			if errors.Is(err, unix.EPERM) {
				err = ErrNotRoot
			}
			errs = append(errs, fmt.Errorf("removing network namespace %s: %w", n, err))
			continue
		}
		removed = append(removed, n)
	}
	return removed, errors.Join(errs...)
}

// lockPrefix takes the prefix's lock file, or says who holds it.
func lockPrefix(prefix string) (*Claim, error) {
	if geteuid() != 0 {
		return nil, ErrNotRoot
	}
	if strings.ContainsAny(prefix, "/ ") || prefix == "" || len(prefix) > 8 {
		return nil, fmt.Errorf("namespace prefix %q: want 1 to 8 characters without '/' or spaces", prefix)
	}
	if err := os.MkdirAll(lockDir, 0o755); err != nil {
		return nil, fmt.Errorf("the lab's lock directory: %w", err)
	}
	path := lockPath(prefix)
	for {
		f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
		if err != nil {
			return nil, fmt.Errorf("the lab's lock file: %w", err)
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
			defer f.Close()
			if errors.Is(err, unix.EWOULDBLOCK) {
				return nil, &BusyError{Prefix: prefix, PID: holder(f)}
			}
			return nil, fmt.Errorf("locking %s: %w", path, err)
		}
		// The previous holder may have removed the file between our open
		// and our lock: the lock is then on a file no one else sees.
		var held, now unix.Stat_t
		if unix.Fstat(int(f.Fd()), &held) == nil && unix.Stat(path, &now) == nil && held.Dev == now.Dev && held.Ino == now.Ino {
			if err := f.Truncate(0); err == nil {
				_, err = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
			}
			if err != nil {
				f.Close()
				return nil, fmt.Errorf("writing %s: %w", path, err)
			}
			return &Claim{prefix: prefix, f: f}, nil
		}
		f.Close()
	}
}

func lockPath(prefix string) string { return filepath.Join(lockDir, "lab-"+prefix+".lock") }

// holder reads the pid a locked file holds. Its holder writes it right
// after taking the lock: an empty file is read again for a little while.
func holder(f *os.File) int {
	for range 20 {
		b := make([]byte, 32)
		n, _ := f.ReadAt(b, 0)
		if pid, err := strconv.Atoi(strings.TrimSpace(string(b[:n]))); err == nil {
			return pid
		}
		time.Sleep(5 * time.Millisecond)
	}
	return 0
}

// leftovers lists the namespaces named <prefix>-*, except those of running
// labs with a longer prefix (prefix "gw" must not take "gw-lab-node" of a
// running lab "gw-lab"). The caller holds prefix.
func leftovers(prefix string) ([]string, error) {
	all, err := Namespaces(prefix)
	if err != nil || len(all) == 0 {
		return nil, err
	}
	live := runningPrefixes(prefix)
	var names []string
	for _, n := range all {
		if !slices.ContainsFunc(live, func(p string) bool { return strings.HasPrefix(n, p+"-") }) {
			names = append(names, n)
		}
	}
	return names, nil
}

// Namespaces lists the named network namespaces called <prefix>-*, running
// labs' included.
func Namespaces(prefix string) ([]string, error) {
	entries, err := os.ReadDir(netnsDir)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("listing network namespaces: %w", err)
	}
	var names []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), prefix+"-") {
			names = append(names, e.Name())
		}
	}
	return names, nil
}

// runningPrefixes are the prefixes longer than prefix, starting with it,
// whose lock a running lab holds. A lock is probed by taking it shared for
// an instant.
func runningPrefixes(prefix string) []string {
	live := []string{}
	files, _ := filepath.Glob(filepath.Join(lockDir, "lab-"+prefix+"-*.lock"))
	for _, path := range files {
		p := strings.TrimSuffix(strings.TrimPrefix(filepath.Base(path), "lab-"), ".lock")
		f, err := os.Open(path)
		if err != nil {
			continue
		}
		if err := unix.Flock(int(f.Fd()), unix.LOCK_SH|unix.LOCK_NB); errors.Is(err, unix.EWOULDBLOCK) {
			live = append(live, p)
		}
		f.Close()
	}
	return live
}

func reapAll(name string, reap []func(string) error) error {
	var errs []error
	for _, r := range reap {
		errs = append(errs, r(name))
	}
	return errors.Join(errs...)
}
