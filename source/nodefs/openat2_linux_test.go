package nodefs

import (
	"testing"

	"golang.org/x/sys/unix"
)

// The kernel here has openat2: the first resolver is the kernel's, not
// the walk under another name.
func TestOpenat2IsUsedWhereTheKernelHasIt(t *testing.T) {
	lt := newLinkTree(t)
	lt.file(t, "f", false)
	rfd, err := unix.Open(lt.root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(rfd)
	fd, err := openat2InRoot(rfd, "f", unix.O_RDONLY|unix.O_CLOEXEC)
	if err == unix.ENOSYS {
		t.Skip("this kernel has no openat2: the walk alone resolves here")
	}
	if err != nil {
		t.Fatalf("openat2: %v", err)
	}
	unix.Close(fd)
}
