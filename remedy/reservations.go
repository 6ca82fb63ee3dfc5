package remedy

import (
	"context"
	"errors"
	"fmt"
	"io"
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
	rt, root, err := r.target(t)
	if err != nil {
		return err
	}
	top, err := aboveStore(root, rt)
	if err != nil {
		return err
	}
	defer top.Close()
	store, err := openStore(top, rt, false)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil
	case err != nil:
		return err
	}
	defer store.Close()
	return absent(store, rt)
}

// aboveStore opens the parent of the store's data directory, every
// component resolved inside the host root (nodefs.OpenDirIn): the store,
// or its whole data directory, may be gone (wiped, and host-local makes
// them again at its next ADD), but a missing parent means the path is not
// mounted here, and nothing is made. What is read and written below it is
// reached relative to it, never through a path again, so that no link on
// the way leads out of the root.
func aboveStore(root string, rt *finding.ReservationTarget) (*os.File, error) {
	f, err := nodefs.OpenDirIn(root, filepath.Dir(filepath.Dir(rt.Store)))
	if err != nil {
		return nil, fmt.Errorf("the store %s cannot be read here: %w", rt.Store, err)
	}
	return f, nil
}

// openStore opens the store's directory below top, the parent of its data
// directory; with make, it makes the data directory and the store first
// when they are missing, as host-local's next ADD would. Neither may be a
// symbolic link: host-local's own directories are directories.
func openStore(top *os.File, rt *finding.ReservationTarget, make bool) (*os.File, error) {
	dir := top
	for i, name := range []string{filepath.Base(filepath.Dir(rt.Store)), filepath.Base(rt.Store)} {
		if make {
			if err := unix.Mkdirat(int(dir.Fd()), name, 0o755); err != nil && !errors.Is(err, unix.EEXIST) {
				return nil, fmt.Errorf("making the store %s: %w", rt.Store, readOnlyHint(err))
			}
		}
		fd, err := unix.Openat(int(dir.Fd()), name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if i > 0 {
			dir.Close()
		}
		switch {
		case errors.Is(err, unix.ENOENT):
			return nil, fmt.Errorf("the store %s: %w", rt.Store, fs.ErrNotExist)
		case errors.Is(err, unix.ELOOP), errors.Is(err, unix.ENOTDIR):
			return nil, fmt.Errorf("the store %s is not a directory (a symbolic link is not followed): nothing written", rt.Store)
		case err != nil:
			return nil, fmt.Errorf("opening the store %s: %w", rt.Store, err)
		}
		dir = os.NewFile(uintptr(fd), name)
	}
	return dir, nil
}

// absent returns nil when no file of store books rt's address, an error
// wrapping ErrGone when one does.
func absent(store *os.File, rt *finding.ReservationTarget) error {
	fd, err := unix.Openat(int(store.Fd()), rt.IP.String(), unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	switch {
	case errors.Is(err, unix.ENOENT):
		return nil
	case errors.Is(err, unix.ELOOP):
		return fmt.Errorf("%s/%s is a symbolic link, not host-local's: nothing written", rt.Store, rt.IP)
	case err != nil:
		return fmt.Errorf("reading %s/%s: %w", rt.Store, rt.IP, err)
	}
	f := os.NewFile(uintptr(fd), rt.IP.String())
	defer f.Close()
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		return fmt.Errorf("%s/%s is not a regular file: nothing written", rt.Store, rt.IP)
	}
	b, _ := io.ReadAll(io.LimitReader(f, 1024))
	return fmt.Errorf("%w: %s/%s exists (%q): the address is booked", ErrGone, rt.Store, rt.IP, strings.ReplaceAll(string(b), "\r\n", " "))
}

// Act writes the reservation under host-local's lock. A store wiped whole,
// or its whole data directory, is made again first, as host-local's next
// ADD would make them.
func (r *Reservations) Act(ctx context.Context, t finding.Target) error {
	rt, root, err := r.target(t)
	if err != nil {
		return err
	}
	top, err := aboveStore(root, rt)
	if err != nil {
		return err
	}
	defer top.Close()
	store, err := openStore(top, rt, true)
	if err != nil {
		return err
	}
	defer store.Close()
	unlock, err := lockStore(ctx, store)
	if err != nil {
		return fmt.Errorf("taking host-local's lock of %s: %w", rt.Store, readOnlyHint(err))
	}
	defer unlock()
	if err := absent(store, rt); err != nil {
		return err
	}
	name := rt.IP.String()
	fd, err := unix.Openat(int(store.Fd()), name, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("%w: %s/%s was booked meanwhile", ErrGone, rt.Store, rt.IP)
	}
	if err != nil {
		return fmt.Errorf("writing %s/%s: %w", rt.Store, rt.IP, readOnlyHint(err))
	}
	f := os.NewFile(uintptr(fd), name)
	_, werr := f.WriteString(rt.ContainerID + "\r\n" + rt.IfName)
	cerr := f.Close()
	if err := errors.Join(werr, cerr); err != nil {
		// The file is this call's: remove it rather than leave a torn one.
		unix.Unlinkat(int(store.Fd()), name, 0)
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
	return rt, root, nil
}

// lockStore takes the exclusive flock host-local takes on the store's lock
// file, opened as host-local opens it (but never through a link). It waits
// for the lock until ctx ends; the returned function releases it.
func lockStore(ctx context.Context, store *os.File) (func(), error) {
	fd, err := unix.Openat(int(store.Fd()), "lock", unix.O_RDONLY|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o750)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), "lock")
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
