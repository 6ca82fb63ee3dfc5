package snapshot

import (
	"encoding/binary"
	"net/netip"
	"time"
)

// Calico is Calico's IPAM ledger as its kubernetes datastore keeps it: the
// crd.projectcalico.org/v1 IPAMBlocks, IPAMHandles, BlockAffinities and
// IPPools, and what the KubeControllersConfiguration "default" says of the
// leak collector. It is read from the API server or from kubectl output;
// both paths convert through the same functions in source/calico.
//
// What Calico wrote is kept as written, not as it should be: an allocation
// booked under another node than its pod's, a handle whose block forgot
// it, a block whose lists disagree. Each object's Malformed lists what could
// not be read or does not hold together, so that nothing wrong in the
// ledger is silently dropped.
type Calico struct {
	// Blocks, Handles, Affinities and Pools are sorted by object name.
	Blocks     []IPAMBlock
	Handles    []IPAMHandle
	Affinities []BlockAffinity
	Pools      []IPPool
	// LeakGC is what the leak collector of calico-kube-controllers runs
	// with, read from the KubeControllersConfiguration named "default";
	// nil when none was read (kube-controllers makes it, with
	// DefaultLeakGracePeriod, when it first starts).
	LeakGC *LeakGC
}

// DefaultLeakGracePeriod is the leakGracePeriod kube-controllers writes
// into a KubeControllersConfiguration it creates.
const DefaultLeakGracePeriod = 15 * time.Minute

// WindowsReservedHandle is the handle of the addresses Calico reserves in
// every block on Windows nodes: in use, though no pod holds them.
const WindowsReservedHandle = "windows-reserved-ipam-handle"

// LeakGracePeriod is how long the leak collector waits before it frees an
// allocation it judged leaked while its node still exists: LeakGC's, or
// DefaultLeakGracePeriod when no configuration was read. Zero means it
// frees none of those.
func (c *Calico) LeakGracePeriod() time.Duration {
	if c.LeakGC == nil {
		return DefaultLeakGracePeriod
	}
	return c.LeakGC.GracePeriod
}

// LeakGC is the leak collector's configuration (kube-controllers' node
// controller, which runs it every half grace period and at every pod or
// node deletion).
type LeakGC struct {
	// GracePeriod is how long an allocation judged leaked while its
	// Kubernetes Node exists stays a candidate before the collector frees
	// it. Zero means never: leakGracePeriod 0s, the node controller not
	// running, or running without a leakGracePeriod. Whatever the grace, a
	// running node controller frees at once an allocation whose pod and
	// Node are both gone.
	GracePeriod time.Duration
	// From says where GracePeriod was read, or why it is zero, for
	// reports: status.runningConfig (what the running kube-controllers
	// last reported, with its ENABLED_CONTROLLERS applied) when present,
	// else spec.
	From string
	// Malformed lists what could not be read.
	Malformed []string
}

// IPAMBlock is one block of addresses: the address of ordinal i is the
// CIDR's first address plus i.
type IPAMBlock struct {
	Name string
	// CIDR is the block's network; invalid (IsValid false) when spec.cidr
	// cannot be read, and then no address of the block can be placed.
	CIDR netip.Prefix
	// Affinity is the node of a "host:<node>" affinity: the node whose
	// pods the block serves first. Empty when the block has none.
	Affinity string
	// OtherAffinity is spec.affinity when it is not "host:<node>" (Calico
	// 3.31 and later give "virtual:<name>" to LoadBalancer blocks).
	OtherAffinity string
	// Deleted is spec.deleted: Calico marks a block before deleting it,
	// and treats a marked block as gone.
	Deleted bool
	// SequenceNumber grows by one at every write of the block; it started
	// at the clock's Unix nanoseconds when the block was made.
	SequenceNumber uint64
	// Allocations are the allocated addresses, by ordinal.
	Allocations []Allocation
	// Cooldown are the addresses released but not yet free again (Calico
	// 3.34's IPAMConfiguration ipCooldownSeconds): no workload holds them
	// and none will be given them before the cooldown ends. They are not
	// allocations.
	Cooldown []Cooldown
	// Free are the ordinals spec.unallocated lists as free, each once, in
	// the list's order: Calico hands them out from its front and puts a
	// freed ordinal at its end.
	Free []int
	// Reissuable are the addresses the block both allocates and lists as
	// free: Calico may hand an address in use to another pod. Malformed
	// says it too.
	Reissuable []netip.Addr
	// Malformed lists what could not be read and what does not hold
	// together: the lists disagreeing with the CIDR or with each other,
	// an allocation pointing at no attribute, a value of the wrong type.
	Malformed []string
}

// Allocation is one allocated address of a block, with what its attribute
// records. The strings are as Calico stored them; empty when absent.
type Allocation struct {
	Ordinal int
	IP      netip.Addr
	// HandleID names the IPAMHandle that holds the address: the CNI
	// plugin's is "k8s-pod-network.<container ID>".
	HandleID string
	// Node is secondary.node: the node the CNI plugin believed it ran on
	// when it booked the address (its configuration's nodename, else its
	// nodename file, else the hostname), which may not be the node the
	// pod runs on. calicoctl falls back to the block's affinity when it is
	// empty.
	Node      string
	Pod       string
	Namespace string
	// Type is secondary.type for the node's own addresses
	// (ipipTunnelAddress, vxlanTunnelAddress, vxlanV6TunnelAddress,
	// wireguardTunnelAddress, ...); empty for a pod's.
	Type string
	// Service is secondary.service: the LoadBalancer Service of an
	// address Calico assigned to one.
	Service string
	// Timestamp is secondary.timestamp, when the CNI plugin booked the
	// address; zero when absent or unreadable.
	Timestamp time.Time
	// SequenceNumber is the block's sequence number when the address was
	// allocated (spec.sequenceNumberForAllocation); the collector releases
	// an address only with the number it judged, so a reused address is
	// never freed by a stale judgement. Zero when not recorded.
	SequenceNumber uint64
}

// Cooldown is an address released into Calico's cooldown.
type Cooldown struct {
	Ordinal int
	IP      netip.Addr
	// ReleasedAt is when it was released; zero when unreadable.
	ReleasedAt time.Time
}

// IPAMHandle is one handle: the addresses one owner (a pod's sandbox, a
// node's tunnel) holds, counted per block. Calico names the object by the
// handle ID lowercased.
type IPAMHandle struct {
	Name string
	// ID is spec.handleID, as blocks name it.
	ID string
	// Blocks are spec.block, sorted by CIDR.
	Blocks  []HandleBlock
	Deleted bool
	// Malformed lists what could not be read.
	Malformed []string
}

// HandleBlock is how many addresses a handle holds in one block.
type HandleBlock struct {
	CIDR  netip.Prefix
	Count int
}

// BlockAffinity is a node's claim on a block.
type BlockAffinity struct {
	Name string
	CIDR netip.Prefix
	Node string
	// State is "confirmed", "pending" or "pendingDeletion"; Calico treats
	// a pending claim as none.
	State string
	// Type is "host" (also when absent) or "virtual".
	Type string
	// Deleted is spec.deleted, a string in crd.projectcalico.org/v1.
	Deleted bool
	// Malformed lists what could not be read.
	Malformed []string
}

// IPPool is a range Calico allocates blocks from.
type IPPool struct {
	Name string
	CIDR netip.Prefix
	// BlockSize is the prefix length of the pool's blocks; 0 when absent
	// (Calico's clients store 26 for IPv4, 122 for IPv6 when none is
	// given).
	BlockSize int
	// Disabled pools hand out no new address; calicoctl's "active pools"
	// are the others.
	Disabled     bool
	NodeSelector string
	// AllowedUses is spec.allowedUses (Workload, Tunnel, LoadBalancer);
	// Calico's clients store Workload and Tunnel when none is given.
	AllowedUses []string
	// Malformed lists what could not be read.
	Malformed []string
}

// BlockAddr is the address of ordinal n of the block p: n places after its
// first address, n being less than the block's size.
func BlockAddr(p netip.Prefix, n int) netip.Addr {
	a := p.Masked().Addr()
	if a.Is4() {
		b := a.As4()
		binary.BigEndian.PutUint32(b[:], binary.BigEndian.Uint32(b[:])+uint32(n))
		return netip.AddrFrom4(b)
	}
	b := a.As16()
	hi, lo := binary.BigEndian.Uint64(b[:8]), binary.BigEndian.Uint64(b[8:])
	lo2 := lo + uint64(n)
	if lo2 < lo {
		hi++
	}
	binary.BigEndian.PutUint64(b[:8], hi)
	binary.BigEndian.PutUint64(b[8:], lo2)
	return netip.AddrFrom16(b)
}

// BlockOrdinal is the ordinal of ip in the block p, which holds it. Calico's
// blocks hold at most 4096 addresses, so the ordinal lies in the low 64
// bits.
func BlockOrdinal(p netip.Prefix, ip netip.Addr) int {
	a, b := p.Masked().Addr().As16(), ip.As16()
	return int(binary.BigEndian.Uint64(b[8:]) - binary.BigEndian.Uint64(a[8:]))
}
