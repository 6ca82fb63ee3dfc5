// Package nodefs reads a node's files under a host root (the node's / as
// mounted into ghostwatch, or a copy of it): small regular files, bounded
// in size and in time, and the CNI configuration files in the order the
// kubelet reads them. The sources of a node's ledgers (host-local's store,
// Calico's node name) share it.
//
// A host root is the node's: a symbolic link in it points into the node's
// tree, not ghostwatch's, and a named pipe or a device would block a read
// forever. Every path under a host root is resolved inside it, each
// component in turn (openat2's RESOLVE_IN_ROOT where the kernel has it, a
// walk of the same rules where it does not): a link's absolute target
// starts from the host root and ".." never climbs above it, so that no
// link, in the last component or in a parent directory, leads out of it.
// ReadIn, Stat and ReadDir follow links that way, as the node would;
// ReadFileIn and Lstat do not follow the last component. Files read are
// regular files only; every call gives up on a file that does not answer
// within ReadTimeout. ReadFile reads a path of this process, refusing a
// link as its last component.
package nodefs

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"syscall"
	"time"
)

// CNIConfDir is where the kubelet reads CNI configurations.
const CNIConfDir = "/etc/cni/net.d"

// MaxFile bounds what a file read may hold: a reservation, a node name or a CNI
// configuration is bytes to kilobytes.
const MaxFile = 1 << 20

// ReadTimeout bounds the reading of one file: a file on a mount that no
// longer answers (a hung NFS export) fails rather than hang the reader.
const ReadTimeout = 5 * time.Second

// ReadFile reads the regular file at p (a path of this process), refusing
// a symbolic link, anything but a regular file (a named pipe, a device, a
// socket, a directory), and a file larger than MaxFile.
func ReadFile(p string) ([]byte, error) {
	return readRegular(p)
}

// readRegular reads the regular file p, without following a link or
// blocking on a pipe, within ReadTimeout.
func readRegular(p string) ([]byte, error) {
	return bounded(func() ([]byte, error) { return readNow(p) })
}

func readNow(p string) ([]byte, error) {
	fi, err := os.Lstat(p)
	if err != nil {
		return nil, err
	}
	if err := regular(fi); err != nil {
		return nil, err
	}
	// O_NONBLOCK: a pipe put in the file's place between the check and
	// the open does not block the open; O_NOFOLLOW: nor does a link.
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	if fi, err = f.Stat(); err != nil {
		return nil, err
	}
	if err := regular(fi); err != nil {
		return nil, err
	}
	return readBounded(f)
}

// regular returns nil for a regular file, and says what else it is.
func regular(fi fs.FileInfo) error {
	m := fi.Mode()
	switch {
	case m.IsRegular():
		return nil
	case m&fs.ModeSymlink != 0:
		return errors.New("a symbolic link: not followed")
	case m.IsDir():
		return errors.New("a directory, not a file")
	case m&fs.ModeNamedPipe != 0:
		return errors.New("a named pipe, not a regular file: not read")
	case m&fs.ModeSocket != 0:
		return errors.New("a socket, not a regular file: not read")
	case m&fs.ModeDevice != 0:
		return errors.New("a device, not a regular file: not read")
	}
	return fmt.Errorf("not a regular file (%s): not read", m.Type())
}

// networkName is CNI's rule for a network's name (libcni's
// ValidateNetworkName): the name is a directory's under host-local's data
// directory, so nothing else can name one.
var networkName = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.\-]*$`)

// ValidNetworkName reports whether CNI accepts name as a network's name.
func ValidNetworkName(name string) bool {
	return networkName.MatchString(name)
}

// CNIConfigs lists the CNI configuration files under root (*.conf,
// *.conflist, *.json), as the node names them, sorted: the kubelet uses
// the first that holds a network. None when the directory is missing.
func CNIConfigs(root string) ([]string, error) {
	entries, err := ReadDir(root, CNIConfDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the CNI configurations in %s: %w", CNIConfDir, err)
	}
	var out []string
	for _, e := range entries {
		switch filepath.Ext(e.Name()) {
		case ".conf", ".conflist", ".json":
			if !e.IsDir() {
				out = append(out, path.Join(CNIConfDir, e.Name()))
			}
		}
	}
	slices.Sort(out)
	return out, nil
}
