//go:build !linux

package remedy

import (
	"fmt"
	"net/netip"
)

func sendSYN(local netip.AddrPort, client netip.Addr, port uint16) error {
	return fmt.Errorf("%w: only on Linux", ErrNotNudged)
}
