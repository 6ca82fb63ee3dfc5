package cni

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// CNIVersion is the specification version of the configurations HostLocal
// writes.
const CNIVersion = "1.0.0"

// DefaultDataDir is where host-local keeps its stores when the
// configuration names no dataDir.
const DefaultDataDir = "/var/lib/cni/networks"

// The files of a Store besides the reservations.
const (
	// LockFile is what host-local flocks around every allocation and
	// release.
	LockFile = "lock"
	// LastReservedPrefix, followed by a range set's index, names the file
	// holding the last address host-local reserved in that range set.
	LastReservedPrefix = "last_reserved_ip."
)

// HostLocal is a network whose addresses host-local hands out. Its
// configuration is what a runtime passes: the network's name and, under
// "ipam", host-local's own settings. host-local reads nothing else, not
// even the ipam type.
type HostLocal struct {
	Name    string // the network; its store is DataDir/Name
	DataDir string // "" is DefaultDataDir
	// Ranges are the range sets: every ADD takes one address from each, in
	// this order.
	Ranges [][]Range
}

// Range is one range of a range set. The zero addresses leave host-local's
// defaults: the subnet's first address after the network address for the
// start and the gateway, its last address for the end (IPv4: the one
// before the broadcast address).
type Range struct {
	Subnet     netip.Prefix `json:"subnet"`
	RangeStart netip.Addr   `json:"rangeStart,omitzero"`
	RangeEnd   netip.Addr   `json:"rangeEnd,omitzero"`
	Gateway    netip.Addr   `json:"gateway,omitzero"`
}

// Config returns the network configuration: a CNIVersion configuration
// named Name with host-local as its IPAM.
func (h HostLocal) Config() ([]byte, error) {
	type ipam struct {
		Type    string    `json:"type"`
		DataDir string    `json:"dataDir,omitempty"`
		Ranges  [][]Range `json:"ranges"`
	}
	return json.Marshal(struct {
		CNIVersion string `json:"cniVersion"`
		Name       string `json:"name"`
		IPAM       ipam   `json:"ipam"`
	}{CNIVersion, h.Name, ipam{HostLocalBinary, h.DataDir, h.Ranges}})
}

// Store returns the network's store.
func (h HostLocal) Store() Store {
	dir := h.DataDir
	if dir == "" {
		dir = DefaultDataDir
	}
	return Store{Dir: filepath.Join(dir, h.Name)}
}

// Store is host-local's store of one network: a file per reserved address,
// named by it and holding the container ID, "\r\n" and the interface name;
// LastReservedPrefix files; and LockFile.
type Store struct {
	Dir string
}

// Lock takes the lock host-local takes around every allocation and release,
// blocking until it holds it: an exclusive flock on Dir/lock, opened as
// host-local opens it (created read-only with mode 0750 when missing, as
// Dir is with 0755). While it is held no host-local call on this store can
// read or change a reservation.
func (s Store) Lock() (*Locked, error) {
	if err := os.MkdirAll(s.Dir, 0o755); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(filepath.Join(s.Dir, LockFile), os.O_RDONLY|os.O_CREATE, 0o750)
	if err != nil {
		return nil, err
	}
	for {
		err = unix.Flock(int(f.Fd()), unix.LOCK_EX)
		if !errors.Is(err, unix.EINTR) {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("flock %s: %w", f.Name(), err)
	}
	return &Locked{dir: s.Dir, f: f}, nil
}

// Locked is a Store whose lock this process holds.
type Locked struct {
	dir string
	f   *os.File
}

// Reserve books ip for the container's interface as host-local does: a
// file named by the address, created only when absent (O_EXCL), holding
// containerID + "\r\n" + ifName. An address already booked is an error
// wrapping fs.ErrExist, and its file is left as it was. Unlike host-local it
// leaves the LastReservedPrefix files alone, so that where the next ADD
// starts does not move.
func (l *Locked) Reserve(ip netip.Addr, containerID, ifName string) error {
	if l.f == nil {
		return errors.New("reserve in " + l.dir + ": the lock is released")
	}
	if !ip.IsValid() || ip.Zone() != "" {
		return fmt.Errorf("reserve %q in %s: not an address host-local books", ip, l.dir)
	}
	if containerID == "" || ifName == "" {
		return fmt.Errorf("reserve %s in %s: the container ID and the interface name are required", ip, l.dir)
	}
	name := filepath.Join(l.dir, ip.Unmap().String())
	f, err := os.OpenFile(name, os.O_RDWR|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(containerID + "\r\n" + ifName); err != nil {
		f.Close()
		os.Remove(name)
		return err
	}
	if err := f.Close(); err != nil {
		os.Remove(name)
		return err
	}
	return nil
}

// Unlock releases the lock.
func (l *Locked) Unlock() error {
	if l.f == nil {
		return nil
	}
	err := l.f.Close() // closing the only descriptor releases the flock
	l.f = nil
	return err
}
