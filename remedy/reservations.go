package remedy

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/ghostwatch/ghostwatch/finding"
	"github.com/ghostwatch/ghostwatch/source/nodefs"
)

// Reservations writes host-local reservations (finding.ReservationTarget)
// as host-local itself does: under the exclusive flock host-local takes on
// the store's lock file around every allocation and release, so that no
// ADD can pick the address meanwhile; a file named by the address, created
// only when absent (O_EXCL), holding the container ID, "\r\n" and the
// interface name. It never overwrites, truncates or removes a file it did
// not create, and never moves last_reserved_ip: where host-local's next
// ADD starts is left as it was.
type Reservations struct {
	// Root is the node's / as this process sees it ("" means "/").
	Root string
}

// Kind returns finding.ReservationKind.
func (*Reservations) Kind() string { return finding.ReservationKind }

// Verify checks the reservation is still missing and can be written: the
// store (or, when it was wiped whole, its data directory) exists, and no
// file names the address.
func (r *Reservations) Verify(_ context.Context, t finding.Target) error {
	rt, dir, err := r.target(t)
	if err != nil {
		return err
	}
	if _, err := os.Stat(dir); errors.Is(err, fs.ErrNotExist) {
		if err := aboveStore(dir, rt); err != nil {
			return err
		}
	} else if err != nil {
		return fmt.Errorf("reading the store %s: %w", rt.Store, err)
	}
	return absent(dir, rt)
}

// aboveStore checks that the parent of the store's data directory exists:
// the store, or its whole data directory, may be gone (wiped, and host-local
// makes them again at its next ADD), but a missing parent means the path
// is not mounted here, and nothing is made.
func aboveStore(dir string, rt *finding.ReservationTarget) error {
	if _, err := os.Stat(filepath.Dir(filepath.Dir(dir))); err != nil {
		return fmt.Errorf("the store %s cannot be read here: %w", rt.Store, err)
	}
	return nil
}

// absent returns nil when no file books rt's address, an error wrapping
// ErrGone when one does.
func absent(dir string, rt *finding.ReservationTarget) error {
	b, err := os.ReadFile(filepath.Join(dir, rt.IP.String()))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return fmt.Errorf("reading %s/%s: %w", rt.Store, rt.IP, err)
	}
	return fmt.Errorf("%w: %s/%s exists (%q): the address is booked", ErrGone, rt.Store, rt.IP, strings.ReplaceAll(string(b), "\r\n", " "))
}

// Act writes the reservation under host-local's lock. A store wiped whole,
// or its whole data directory, is made again first, as host-local's next
// ADD would make them.
func (r *Reservations) Act(ctx context.Context, t finding.Target) error {
	rt, dir, err := r.target(t)
	if err != nil {
		return err
	}
	if err := aboveStore(dir, rt); err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("making the store %s: %w", rt.Store, readOnlyHint(err))
	}
	if fi, err := os.Lstat(dir); err != nil || !fi.IsDir() {
		return fmt.Errorf("the store %s is not a directory (a symbolic link is not followed): nothing written", rt.Store)
	}
	unlock, err := lockStore(ctx, dir)
	if err != nil {
		return fmt.Errorf("taking host-local's lock of %s: %w", rt.Store, readOnlyHint(err))
	}
	defer unlock()
	if err := absent(dir, rt); err != nil {
		return err
	}
	name := filepath.Join(dir, rt.IP.String())
	f, err := os.OpenFile(name, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("%w: %s/%s was booked meanwhile", ErrGone, rt.Store, rt.IP)
	}
	if err != nil {
		return fmt.Errorf("writing %s/%s: %w", rt.Store, rt.IP, readOnlyHint(err))
	}
	_, werr := f.WriteString(rt.ContainerID + "\r\n" + rt.IfName)
	cerr := f.Close()
	if err := errors.Join(werr, cerr); err != nil {
		// The file is this call's: remove it rather than leave a torn one.
		os.Remove(name)
		return fmt.Errorf("writing %s/%s: %w", rt.Store, rt.IP, err)
	}
	return nil
}

func (r *Reservations) target(t finding.Target) (*finding.ReservationTarget, string, error) {
	rt, ok := t.(*finding.ReservationTarget)
	if !ok {
		return nil, "", fmt.Errorf("not a host-local reservation: %s", t.Kind())
	}
	switch {
	case !rt.IP.IsValid() || rt.IP.Zone() != "" || rt.IP.Is4In6():
		return nil, "", fmt.Errorf("%q is not an address host-local books", rt.IP)
	case rt.ContainerID == "" || rt.IfName == "" || strings.ContainsAny(rt.ContainerID+rt.IfName, "\r\n"):
		return nil, "", fmt.Errorf("the reservation of %s names no valid container and interface", rt.IP)
	case !filepath.IsAbs(rt.Store) || filepath.Clean(rt.Store) != rt.Store:
		return nil, "", fmt.Errorf("the store %q is not a clean absolute path", rt.Store)
	case !nodefs.ValidNetworkName(filepath.Base(rt.Store)):
		return nil, "", fmt.Errorf("the store %q is not a host-local network's directory: CNI refuses %q as a network's name", rt.Store, filepath.Base(rt.Store))
	}
	root := r.Root
	if root == "" {
		root = "/"
	}
	return rt, filepath.Join(root, rt.Store), nil
}

// lockStore takes the exclusive flock host-local takes on dir/lock, opened
// as host-local opens it. It waits for the lock until ctx ends; the
// returned function releases it.
func lockStore(ctx context.Context, dir string) (func(), error) {
	f, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_RDONLY|os.O_CREATE, 0o750)
	if err != nil {
		return nil, err
	}
	got := make(chan error, 1)
	go func() {
		for {
			err := unix.Flock(int(f.Fd()), unix.LOCK_EX)
			if !errors.Is(err, unix.EINTR) {
				got <- err
				return
			}
		}
	}()
	select {
	case err := <-got:
		if err != nil {
			f.Close()
			return nil, err
		}
		return func() { f.Close() }, nil
	case <-ctx.Done():
		// The waiting flock ends when the lock is free: release it then.
		go func() {
			<-got
			f.Close()
		}()
		return nil, ctx.Err()
	}
}

// readOnlyHint explains a read-only store: the DaemonSet mounts it so
// unless the remedy is turned on with a read-write mount of it.
func readOnlyHint(err error) error {
	if errors.Is(err, unix.EROFS) {
		return fmt.Errorf("%w (hostlocal-reserve needs the store mounted read-write; deploy/agent mounts it read-only)", err)
	}
	return err
}
