//go:build linux

package conntrack

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// CheckNetAdmin returns an error wrapping ErrPermission when the calling
// thread lacks CAP_NET_ADMIN in its effective set, the capability reading
// and deleting conntrack entries needs. It asks the kernel for the
// capability sets and touches no table, so a long-running process can
// refuse to start before it does anything.
func CheckNetAdmin() error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("conntrack: reading this process's capabilities: %w", err)
	}
	const bit = unix.CAP_NET_ADMIN
	if data[bit/32].Effective&(1<<(bit%32)) == 0 {
		return fmt.Errorf("conntrack: %w, which this process does not have (run as root, or grant it with securityContext.capabilities.add: [NET_ADMIN])", ErrPermission)
	}
	return nil
}
