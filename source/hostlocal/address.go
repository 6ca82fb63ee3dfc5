package hostlocal

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"time"

	"github.com/ghostwatch/ghostwatch/internal/addrpath"
	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source"
)

// AddressPath is where AddressHandler answers: AddressPath + an address.
const AddressPath = "/v1/hostlocal/"

// AtAddress is what a node's host-local stores say of one address: each
// network whose ranges hold it, and whether it is reserved there, for
// which container.
type AtAddress struct {
	Node     string           `json:"node"`
	Networks []NetworkAddress `json:"networks"`
}

// NetworkAddress is one network's record of the address.
type NetworkAddress struct {
	Network string `json:"network"`
	Dir     string `json:"dir"`
	// Missing says the network's directory does not exist: never made, or
	// wiped.
	Missing     bool      `json:"missing,omitempty"`
	Reserved    bool      `json:"reserved"`
	ContainerID string    `json:"containerId,omitempty"`
	IfName      string    `json:"ifName,omitempty"`
	Since       time.Time `json:"since,omitzero"`
}

// At reads the stores under root and returns what they say of ip: the
// networks whose ranges hold it or that reserve it.
func At(ctx context.Context, root string, ip netip.Addr) (AtAddress, error) {
	var s snapshot.Snapshot
	at := AtAddress{Networks: []NetworkAddress{}}
	if err := (&Source{Root: root}).Collect(ctx, &s); errors.Is(err, source.ErrUnsupported) {
		return at, nil // no host-local on this node
	} else if err != nil {
		return AtAddress{}, err
	}
	if s.HostLocal == nil {
		return at, nil
	}
	for _, n := range s.HostLocal.Networks {
		na := NetworkAddress{Network: n.Name, Dir: n.Dir, Missing: n.Missing}
		in := false
		for _, set := range n.RangeSets {
			for _, r := range set {
				in = in || r.Subnet.Contains(ip)
			}
		}
		for _, r := range n.Reservations {
			if r.IP == ip {
				in, na.Reserved, na.ContainerID, na.IfName, na.Since = true, true, r.ContainerID, r.IfName, r.Modified.UTC()
			}
		}
		if in {
			at.Networks = append(at.Networks, na)
		}
	}
	return at, nil
}

// AddressHandler answers GET AddressPath+ADDRESS with what node's stores
// under root say of the address, read afresh, as JSON.
func AddressHandler(node, root string) http.Handler {
	return addrpath.Handler(AddressPath, func(ctx context.Context, ip netip.Addr) (any, error) {
		at, err := At(ctx, root, ip)
		if err != nil {
			return nil, fmt.Errorf("host-local: %w", err)
		}
		at.Node = node
		return at, nil
	})
}
