package nodefs

import "golang.org/x/sys/unix"

// oPath opens a file to describe it, or to resolve paths under it, without
// opening it for reading (a device's open may act on it).
const oPath = unix.O_PATH

// statFlags open a file to describe it: O_PATH takes no other flag but
// these (openat2 checks).
const statFlags = unix.O_PATH | unix.O_CLOEXEC

// openat2InRoot opens rel under the directory rfd with the kernel's
// openat2, every component resolved inside rfd (RESOLVE_IN_ROOT) and no
// /proc magic link followed (RESOLVE_NO_MAGICLINKS). It fails with ENOSYS
// on a kernel without openat2 (before 5.6), and with EAGAIN when renames
// elsewhere kept racing the resolution.
func openat2InRoot(rfd int, rel string, flags int) (int, error) {
	how := &unix.OpenHow{Flags: uint64(flags), Resolve: unix.RESOLVE_IN_ROOT | unix.RESOLVE_NO_MAGICLINKS}
	for range 8 {
		fd, err := unix.Openat2(rfd, rel, how)
		if err != unix.EAGAIN {
			return fd, err
		}
	}
	return -1, unix.EAGAIN
}
