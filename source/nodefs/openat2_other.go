//go:build !linux

package nodefs

import "golang.org/x/sys/unix"

// oPath: without O_PATH, a file to describe is opened for reading, and
// never read.
const oPath = unix.O_RDONLY

// statFlags open a file to describe it: for reading, never blocking on a
// named pipe.
const statFlags = unix.O_RDONLY | unix.O_CLOEXEC | unix.O_NONBLOCK | unix.O_NOCTTY

// openat2InRoot: only Linux has openat2; the walk resolves alike.
func openat2InRoot(int, string, int) (int, error) { return -1, unix.ENOSYS }
