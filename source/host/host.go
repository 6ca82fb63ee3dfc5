package host

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"

	"github.com/ghostwatch/ghostwatch/snapshot"
)

// Name is the source's name in reports.
const Name = "host"

// Addresses is the source of the node's local addresses
// (snapshot.Snapshot.LocalAddresses).
type Addresses struct {
	// Read returns the addresses; nil means Local, the calling process's
	// network namespace.
	Read func() ([]netip.Addr, error)
}

// Name returns Name.
func (*Addresses) Name() string { return Name }

// Collect reads the addresses, sorted and without duplicates.
func (a *Addresses) Collect(_ context.Context, s *snapshot.Snapshot) error {
	read := a.Read
	if read == nil {
		read = Local
	}
	as, err := read()
	if err != nil {
		return err
	}
	out := make([]netip.Addr, 0, len(as))
	for _, x := range as {
		out = append(out, x.Unmap())
	}
	slices.SortFunc(out, netip.Addr.Compare)
	s.LocalAddresses = slices.Compact(out)
	return nil
}

// Describe says how many addresses were read.
func (a *Addresses) Describe(s *snapshot.Snapshot) string {
	n := len(s.LocalAddresses)
	if n == 1 {
		return "1 local address (NodePort frontends)"
	}
	return fmt.Sprintf("%d local addresses (NodePort frontends)", n)
}

// Local returns the addresses of every interface of the calling process's
// network namespace.
func Local() ([]netip.Addr, error) {
	as, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("reading this host's addresses (its NodePort frontends): %w", err)
	}
	var out []netip.Addr
	for _, a := range as {
		if p, err := netip.ParsePrefix(a.String()); err == nil {
			out = append(out, p.Addr().Unmap())
		}
	}
	return out, nil
}
