// Package whereabouts is the worked example of a cluster-wide ledger in
// docs/development.md: the IPPools of Whereabouts, an IPAM plugin that
// books pod addresses in custom resources. In the tree, its type would be
// snapshot/whereabouts.go, its source source/whereabouts/ and its rule
// rule/whereabouts_leaked_ip.go.
package whereabouts

import "net/netip"

// Pools are Whereabouts' IPPools: which pod each address of each range is
// booked for.
type Pools struct {
	Pools []Pool
}

// Pool is one IPPool.
type Pool struct {
	Name        string
	Range       netip.Prefix
	Allocations []Allocation
}

// Allocation is one booked address.
type Allocation struct {
	IP          netip.Addr
	ContainerID string
	// PodRef is "namespace/name".
	PodRef string
}
