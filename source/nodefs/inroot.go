package nodefs

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// MaxLinks bounds the symbolic links one path may lead through, as the
// kernel's ELOOP does (MAXSYMLINKS).
const MaxLinks = 40

// statOnly asks openIn for a file to describe, not to read: opened
// with O_PATH where there is one, so that even a device is not opened.
const statOnly = -1

// resolver names how paths are resolved inside a host root: the kernel's
// openat2 with RESOLVE_IN_ROOT where it has it, otherwise one component
// at a time.
type resolver int

const (
	resolveAuto resolver = iota
	resolveWalk
)

// resolve is how this process resolves; tests set it to resolveWalk to
// exercise the walk on a kernel that has openat2.
var resolve = resolveAuto

// openIn opens nodePath (a path as the node sees it) under root ("" is
// "/") with flags (or statOnly), resolving every component inside root as
// the node would resolve it on its own /: a symbolic link's absolute
// target starts from root, and ".." never climbs above it. The last
// component is followed only when follow is true; otherwise a link there
// is described itself (statOnly) or refused (ELOOP). A file to read is
// opened with O_NONBLOCK, so that a named pipe does not block the open.
func openIn(root, nodePath string, flags int, follow bool) (*os.File, error) {
	rel := strings.TrimLeft(nodePath, "/")
	if rel == "" {
		rel = "."
	}
	if root == "" {
		root = "/"
	}
	rfd, err := unix.Open(root, oPath|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: root, Err: err}
	}
	defer unix.Close(rfd)
	if flags == statOnly {
		flags = statFlags
	} else {
		flags |= unix.O_CLOEXEC | unix.O_NONBLOCK | unix.O_NOCTTY
	}
	if !follow {
		flags |= unix.O_NOFOLLOW
	}
	fd := -1
	if resolve == resolveAuto {
		fd, err = openat2InRoot(rfd, rel, flags)
		if err == unix.ENOSYS || err == unix.EPERM || err == unix.EAGAIN {
			// No openat2 (a kernel before 5.6), a seccomp profile that
			// refuses it, or renames that kept racing it: the walk
			// resolves the same way.
			fd, err = walkIn(rfd, rel, flags, follow)
		}
	} else {
		fd, err = walkIn(rfd, rel, flags, follow)
	}
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: nodePath, Err: err}
	}
	return os.NewFile(uintptr(fd), path.Base("/"+rel)), nil
}

// walkIn resolves rel under the directory rfd one component at a time,
// as openat2's RESOLVE_IN_ROOT does: every directory is opened relative
// to the one before it without following a link (O_NOFOLLOW, so a
// component replaced by a link meanwhile fails rather than leads out), a
// link is read and its target resolved in its place (an absolute one from
// rfd), and ".." goes back to the directory resolved before, never above
// rfd.
func walkIn(rfd int, rel string, flags int, follow bool) (int, error) {
	// dirs are the directories resolved below rfd, innermost last.
	var dirs []int
	defer func() {
		for _, d := range dirs {
			unix.Close(d)
		}
	}()
	cur := func() int {
		if len(dirs) == 0 {
			return rfd
		}
		return dirs[len(dirs)-1]
	}
	parts := strings.Split(rel, "/")
	links := 0
	for len(parts) > 0 {
		name := parts[0]
		parts = parts[1:]
		switch name {
		case "", ".":
			if len(parts) == 0 {
				return unix.Openat(cur(), ".", flags&^unix.O_NOFOLLOW, 0)
			}
			continue
		case "..":
			if len(dirs) > 0 {
				unix.Close(dirs[len(dirs)-1])
				dirs = dirs[:len(dirs)-1]
			}
			if len(parts) == 0 {
				return unix.Openat(cur(), ".", flags&^unix.O_NOFOLLOW, 0)
			}
			continue
		}
		last := len(parts) == 0
		var st unix.Stat_t
		if err := unix.Fstatat(cur(), name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return -1, err
		}
		if st.Mode&unix.S_IFMT == unix.S_IFLNK && (!last || follow) {
			if links++; links > MaxLinks {
				return -1, unix.ELOOP
			}
			target, err := readlinkat(cur(), name)
			if err != nil {
				return -1, err
			}
			if strings.HasPrefix(target, "/") {
				for _, d := range dirs {
					unix.Close(d)
				}
				dirs = dirs[:0]
			}
			parts = append(strings.Split(target, "/"), parts...)
			continue
		}
		if last {
			return unix.Openat(cur(), name, flags|unix.O_NOFOLLOW, 0)
		}
		d, err := unix.Openat(cur(), name, oPath|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return -1, err
		}
		dirs = append(dirs, d)
	}
	return unix.Openat(cur(), ".", flags&^unix.O_NOFOLLOW, 0)
}

// readlinkat reads the target of the link name in directory dir.
func readlinkat(dir int, name string) (string, error) {
	for size := 256; ; size *= 2 {
		buf := make([]byte, size)
		n, err := unix.Readlinkat(dir, name, buf)
		if err != nil {
			return "", err
		}
		if n < size {
			return string(buf[:n]), nil
		}
		if size >= 1<<16 {
			return "", unix.ENAMETOOLONG
		}
	}
}

// bounded runs f, giving up after ReadTimeout: a file on a mount that no
// longer answers (a hung NFS export) fails rather than hang the caller.
func bounded[T any](f func() (T, error)) (T, error) {
	type result struct {
		v   T
		err error
	}
	done := make(chan result, 1)
	go func() {
		v, err := f()
		done <- result{v, err}
	}()
	t := time.NewTimer(ReadTimeout)
	defer t.Stop()
	select {
	case r := <-done:
		return r.v, r.err
	case <-t.C:
		var zero T
		return zero, fmt.Errorf("no answer within %s (a mount that no longer answers?)", ReadTimeout)
	}
}

// Lstat returns what nodePath under root is, every component but the last
// resolved inside root, the last not followed: a symbolic link is
// described, not its target.
func Lstat(root, nodePath string) (fs.FileInfo, error) {
	return bounded(func() (fs.FileInfo, error) { return statIn(root, nodePath, false) })
}

// Stat returns what nodePath under root is, every component, the last
// included, resolved inside root.
func Stat(root, nodePath string) (fs.FileInfo, error) {
	return bounded(func() (fs.FileInfo, error) { return statIn(root, nodePath, true) })
}

func statIn(root, nodePath string, follow bool) (fs.FileInfo, error) {
	f, err := openIn(root, nodePath, statOnly, follow)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return f.Stat()
}

// ReadDir lists the directory at nodePath under root, every component
// (the last included) resolved inside root, sorted by name. Each entry's
// type is its own (a link is a link), and its Info is read relative to the
// directory opened, never through its path again.
func ReadDir(root, nodePath string) ([]fs.DirEntry, error) {
	return bounded(func() ([]fs.DirEntry, error) {
		f, err := openIn(root, nodePath, unix.O_RDONLY|unix.O_DIRECTORY, true)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		// Readdir, not ReadDir: it describes each entry relative to the
		// directory opened (fstatat), where a DirEntry's Info would look
		// it up by its path.
		infos, err := f.Readdir(-1)
		if err != nil {
			return nil, &fs.PathError{Op: "readdir", Path: nodePath, Err: errors.Unwrap(err)}
		}
		entries := make([]fs.DirEntry, len(infos))
		for i, fi := range infos {
			entries[i] = fs.FileInfoToDirEntry(fi)
		}
		slices.SortFunc(entries, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
		return entries, nil
	})
}

// ReadIn reads the file at nodePath (a path as the node sees it) under
// root: every component, the last included, is resolved inside root as the
// node would resolve it (an absolute link's target from the node's /, ".."
// never above it), at most MaxLinks links. The file read must be a
// regular file of at most MaxFile bytes.
func ReadIn(root, nodePath string) ([]byte, error) {
	return bounded(func() ([]byte, error) { return readIn(root, nodePath, true) })
}

// ReadFileIn reads the regular file at nodePath under root, as ReadIn
// does, except that its last component is not followed: a symbolic link
// there is refused, as ReadFile refuses it.
func ReadFileIn(root, nodePath string) ([]byte, error) {
	return bounded(func() ([]byte, error) { return readIn(root, nodePath, false) })
}

func readIn(root, nodePath string, follow bool) ([]byte, error) {
	// What it is, before it is opened for reading: opening a device may
	// act on it.
	p, err := openIn(root, nodePath, statOnly, follow)
	if err != nil {
		return nil, err
	}
	defer p.Close()
	fi, err := p.Stat()
	if err != nil {
		return nil, err
	}
	if err := regular(fi); err != nil {
		return nil, err
	}
	f, err := openIn(root, nodePath, unix.O_RDONLY, follow)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	got, err := f.Stat()
	if err != nil {
		return nil, err
	}
	// The same file as the one looked at, not one put in its place.
	if !os.SameFile(fi, got) {
		return nil, errors.New("replaced while being read: not read")
	}
	return readBounded(f)
}

// readBounded reads f, refusing more than MaxFile bytes.
func readBounded(f *os.File) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(f, MaxFile+1))
	if err != nil {
		return nil, err
	}
	if len(b) > MaxFile {
		return nil, fmt.Errorf("larger than %d bytes", MaxFile)
	}
	return b, nil
}

// OpenDirIn opens the directory at nodePath under root, every component
// (the last included) resolved inside root, for a writer that then acts
// relative to it (openat, mkdirat) and so cannot be led out of the root by
// a link anywhere on the path.
func OpenDirIn(root, nodePath string) (*os.File, error) {
	return bounded(func() (*os.File, error) { return openIn(root, nodePath, unix.O_RDONLY|unix.O_DIRECTORY, true) })
}
