package hostlocal

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/ghostwatch/ghostwatch/source/nodefs"
)

// maxWatched bounds the directories watched: the configurations', the
// data directories, their parents and the networks' stores are a handful
// on a node.
const maxWatched = 256

// watchMask are the events of a directory that change what Collect
// reads: an entry made, removed, renamed or written, and the directory
// itself removed or moved.
const watchMask = unix.IN_CREATE | unix.IN_DELETE | unix.IN_MOVED_FROM | unix.IN_MOVED_TO |
	unix.IN_CLOSE_WRITE | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_ONLYDIR

// Start watches until ctx ends. It fails only when ctx has.
func (w *Watch) Start(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	fd, err := unix.InotifyInit1(unix.IN_NONBLOCK | unix.IN_CLOEXEC)
	if err != nil {
		w.warn(fmt.Errorf("inotify: %w (fs.inotify.max_user_instances?)", err))
		return nil
	}
	// Non-blocking, the file's reads wait in the runtime's poller, and
	// closing it ends a read under way.
	f := os.NewFile(uintptr(fd), "inotify")
	context.AfterFunc(ctx, func() { f.Close() })
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		w.warn(err)
		return nil
	}
	w.warn(w.arm(rc))
	go w.read(f, rc)
	return nil
}

// read takes the events until f is closed: after each batch it watches the
// directories made since, and says the ledger changed.
func (w *Watch) read(f *os.File, rc syscall.RawConn) {
	buf := make([]byte, 64<<10)
	for {
		n, err := f.Read(buf)
		if err != nil {
			if !errors.Is(err, os.ErrClosed) {
				w.warn(fmt.Errorf("reading inotify events: %w", err))
			}
			return
		}
		if n == 0 {
			continue
		}
		w.note(buf[:n])
		// What the events say is read again by Collect; a queue
		// overflow (IN_Q_OVERFLOW) says the same: something changed.
		w.warn(w.arm(rc))
		w.mu.Lock()
		w.changed = true
		fn := w.fn
		w.mu.Unlock()
		if fn != nil {
			fn()
		}
	}
}

// arm watches every directory Collect reads that exists now, through
// rc, the inotify descriptor (which stays valid while in use even if the
// watch ends meanwhile). Watching a directory twice is watching it once.
func (w *Watch) arm(rc syscall.RawConn) error {
	root := w.Root
	if root == "" {
		root = "/"
	}
	dirs := []string{ConfDir, DefaultDataDir, path.Dir(DefaultDataDir)}
	if confs, err := readConfigs(root); err == nil {
		for _, c := range confs.nets {
			dirs = append(dirs, c.dataDir, path.Dir(c.dataDir))
		}
	}
	for _, dd := range slices.Clone(dirs[1:]) {
		entries, err := nodefs.ReadDir(root, dd)
		if err != nil {
			continue
		}
		for _, e := range entries {
			if e.IsDir() && nodefs.ValidNetworkName(e.Name()) {
				dirs = append(dirs, path.Join(dd, e.Name()))
			}
		}
	}
	slices.Sort(dirs)
	dirs = slices.Compact(dirs)
	var errs []error
	if len(dirs) > maxWatched {
		errs = append(errs, fmt.Errorf("%d directories to watch, more than %d: the rest are read at audits only", len(dirs), maxWatched))
		dirs = dirs[:maxWatched]
	}
	for _, d := range dirs {
		var err error
		if rc.Control(func(fd uintptr) { err = watchDir(int(fd), root, d) }) != nil {
			return nil // the watch has ended
		}
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// watchDir watches dir, opened under root, through its descriptor.
func watchDir(fd int, root, dir string) error {
	f, err := nodefs.OpenDirIn(root, dir)
	if err != nil {
		return fmt.Errorf("watching %s: %w", dir, err)
	}
	defer f.Close()
	if _, err := unix.InotifyAddWatch(fd, "/proc/self/fd/"+strconv.Itoa(int(f.Fd())), watchMask); err != nil {
		return fmt.Errorf("watching %s: %w", dir, err)
	}
	return nil
}

// note keeps the names the events of b carry, the last maxNoted of them.
func (w *Watch) note(b []byte) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for len(b) >= unix.SizeofInotifyEvent {
		l := int(binary.NativeEndian.Uint32(b[12:16]))
		if unix.SizeofInotifyEvent+l > len(b) {
			return
		}
		if name := strings.TrimRight(string(b[unix.SizeofInotifyEvent:unix.SizeofInotifyEvent+l]), "\x00"); name != "" {
			w.noted = append(w.noted, name)
			if len(w.noted) > maxNoted {
				w.noted = w.noted[len(w.noted)-maxNoted:]
			}
		}
		b = b[unix.SizeofInotifyEvent+l:]
	}
}
