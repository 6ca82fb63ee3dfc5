package snapshot

import (
	"net/netip"
	"time"
)

// HostLocal is the ledger of the CNI host-local IPAM plugin on one node: a
// directory per network, a file per reserved address.
type HostLocal struct {
	// Networks are the networks found, by name: every directory under the
	// data directories, and every network a CNI configuration of the node
	// gives to host-local.
	Networks []HostLocalNetwork
	// Cached are the results the runtime's CNI library cached for each ADD
	// until its DEL (/var/lib/cni/results): they name the sandbox whose
	// ADD got an address, which the API does not.
	Cached []CachedResult
	// CacheSkipped counts the files of the cache that are not results.
	CacheSkipped int
	// Unjudged says what of the node's configurations is not read, and
	// why (a network's name CNI refuses).
	Unjudged []string
}

// CachedResult is one cached ADD result.
type CachedResult struct {
	File        string
	Network     string
	ContainerID string
	IfName      string
	// PodNamespace, PodName and PodUID are the K8S_POD_* arguments the
	// runtime passed.
	PodNamespace, PodName, PodUID string
	IPs                           []netip.Addr
}

// HostLocalNetwork is one host-local network on the node.
type HostLocalNetwork struct {
	// Name is the CNI network's name: its directory's name.
	Name string
	// Dir is the network's directory as the node sees it
	// (/var/lib/cni/networks/<name> unless the configuration's dataDir
	// says otherwise).
	Dir string
	// Missing is true when the directory does not exist: no address was
	// ever reserved there, or the store was wiped.
	Missing bool
	// Reservations are the files named by an address, in address order.
	Reservations []Reservation
	// LastReserved holds last_reserved_ip.<i> by range set index i: where
	// the next allocation from range set i starts looking.
	LastReserved map[int]netip.Addr
	// RangeSets are the address ranges host-local allocates from, one set
	// per family as the configuration lists them; nil when no
	// configuration of the node names the network.
	RangeSets []RangeSet
	// Config is the configuration file the range sets come from.
	Config string
	// Unjudged says why the network is not judged, when it is not: a
	// store no configuration names, on a node whose network does not
	// hand addresses out from it (a leftover).
	Unjudged string
	// Ignored counts the entries of the directory that are neither a
	// reservation, a last_reserved_ip file nor the lock, with an example.
	Ignored        int
	IgnoredExample string
}

// Reservation is one address host-local handed out: a file named by the
// address, holding the container ID and, since CNI plugins v0.8.0, "\r\n"
// and the interface name.
type Reservation struct {
	IP          netip.Addr
	ContainerID string
	// IfName is empty in the format before v0.8.0.
	IfName string
	// Modified is the file's modification time: when it was written.
	Modified time.Time
}

// RangeSet is one set of ranges host-local walks for one address of a
// container (one per family).
type RangeSet []IPRange

// IPRange is one range of a range set, with host-local's defaults applied:
// Start and End are both handed out; Gateway never is.
type IPRange struct {
	Subnet  netip.Prefix
	Start   netip.Addr
	End     netip.Addr
	Gateway netip.Addr
}

// DefaultRange is the range host-local gives subnet p when its
// configuration sets nothing else: from the subnet's address plus one to
// its last address (minus one for IPv4: the broadcast address), the
// gateway being the subnet's address plus one. False when p is too small
// for host-local to allocate from (narrower than /30 for IPv4, /126 for
// IPv6).
func DefaultRange(p netip.Prefix) (IPRange, bool) {
	p = p.Masked()
	if (p.Addr().Is4() && p.Bits() > 30) || (p.Addr().Is6() && p.Bits() > 126) {
		return IPRange{}, false
	}
	b := p.Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 1 << (7 - i%8)
	}
	last, _ := netip.AddrFromSlice(b)
	r := IPRange{Subnet: p, Start: p.Addr().Next(), End: last, Gateway: p.Addr().Next()}
	if p.Addr().Is4() {
		r.End = last.Prev()
	}
	return r, true
}

// Contains reports whether a is in one of the set's ranges.
func (rs RangeSet) Contains(a netip.Addr) bool {
	for _, r := range rs {
		if r.Contains(a) {
			return true
		}
	}
	return false
}

// Contains reports whether a lies between the range's Start and End.
func (r IPRange) Contains(a netip.Addr) bool {
	a = a.Unmap()
	return r.Subnet.Contains(a) && r.Start.Compare(a) <= 0 && a.Compare(r.End) <= 0
}

// CalicoNode is where Calico's CNI plugin on one node takes the node name
// it books pod addresses under.
type CalicoNode struct {
	// Config is the CNI configuration file with the calico plugin;
	// ConfigInUse is true when it is the file the kubelet uses (the first
	// by name).
	Config      string
	ConfigInUse bool
	// ConfNodename is its "nodename": when set, the plugin uses it.
	ConfNodename string
	// NodenameFile is the file the plugin reads otherwise, and
	// FileNodename its content, as is (the plugin does not trim it).
	NodenameFile string
	FileExists   bool
	FileNodename string
	FileModified time.Time
}
