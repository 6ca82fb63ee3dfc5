package snapshot

import (
	"net/netip"
	"slices"
)

// PodIndex keeps, as pod events arrive, the record of every pod and which
// pods hold each pod-network IP (Pod.HoldsPodIP), so that a long-running
// watcher of every pod (the controller) knows the shared IPs after each
// event without a pass over every pod, and hands the rules the pods
// without a copy (Pods). Pods are keyed by UID. It is not safe for
// concurrent use.
type PodIndex struct {
	// pods are the records, in no order and without gaps: a deleted
	// pod's place takes the last one.
	pods []Pod
	// at is each pod's place in pods, by UID.
	at map[string]int32
	// first is, for each pod-network IP (its 16-byte form), the place of
	// one pod that holds it, and more the places of the others, for the
	// IPs held by more than one pod: nearly every IP has one holder, and
	// neither map holds a pointer for the garbage collector to scan.
	first map[[16]byte]int32
	more  map[[16]byte][]int32
	// holding counts the pods that hold pod-network IPs.
	holding int
	// host counts, by IP, the unfinished hostNetwork pods that report it
	// (their node's address): they hold no pod-network IP, yet a request
	// to that address may reach any of them.
	host map[[16]byte]int32
}

// NewPodIndex returns an empty index.
func NewPodIndex() *PodIndex {
	return &PodIndex{at: map[string]int32{}, first: map[[16]byte]int32{}, more: map[[16]byte][]int32{}, host: map[[16]byte]int32{}}
}

// Len is the number of pods that hold pod-network IPs.
func (x *PodIndex) Len() int { return x.holding }

// Pods returns the record of every pod set and not deleted, whether it
// holds a pod-network IP or not, in no particular order. The slice is the
// index's own: it is valid, and must not be changed, until the next Set
// or Delete.
func (x *PodIndex) Pods() []Pod { return x.pods }

// Holders returns how many pods hold ip.
func (x *PodIndex) Holders(ip netip.Addr) int {
	k := ip.Unmap().As16()
	if _, ok := x.first[k]; !ok {
		return 0
	}
	return 1 + len(x.more[k])
}

// Reporting returns how many unfinished pods report ip, hostNetwork pods
// included: those a request sent to ip may reach. A credential goes only
// to an address one pod reports alone.
func (x *PodIndex) Reporting(ip netip.Addr) int {
	k := ip.Unmap().As16()
	return x.Holders(ip) + int(x.host[k])
}

// Set records a copy of p, added or changed. A pod that holds no
// pod-network IP (finished, hostNetwork, or not given one yet) is kept
// among Pods but holds no IP in the index.
func (x *PodIndex) Set(p *Pod) {
	if i, ok := x.at[p.UID]; ok {
		x.unindex(i)
		x.pods[i] = *p
		x.index(i)
		return
	}
	i := int32(len(x.pods))
	x.pods = append(x.pods, *p)
	x.at[p.UID] = i
	x.index(i)
}

// Delete removes the pod with the given UID.
func (x *PodIndex) Delete(uid string) {
	i, ok := x.at[uid]
	if !ok {
		return
	}
	x.unindex(i)
	delete(x.at, uid)
	last := int32(len(x.pods) - 1)
	if i != last {
		x.unindex(last)
		x.pods[i] = x.pods[last]
		x.at[x.pods[i].UID] = i
		x.index(i)
	}
	x.pods[last] = Pod{} // its strings are no longer kept
	x.pods = x.pods[:last]
}

// index records that the pod at place i holds its IPs.
func (x *PodIndex) index(i int32) {
	p := &x.pods[i]
	if p.HostNetwork && !p.Terminal() {
		eachIP(p, func(k [16]byte) { x.host[k]++ })
		return
	}
	if !p.HoldsPodIP() || len(p.IPs) == 0 {
		return
	}
	x.holding++
	eachIP(p, func(k [16]byte) {
		if _, ok := x.first[k]; !ok {
			x.first[k] = i
			return
		}
		x.more[k] = append(x.more[k], i)
	})
}

// unindex forgets that the pod at place i holds its IPs.
func (x *PodIndex) unindex(i int32) {
	p := &x.pods[i]
	if p.HostNetwork && !p.Terminal() {
		eachIP(p, func(k [16]byte) {
			if x.host[k]--; x.host[k] <= 0 {
				delete(x.host, k)
			}
		})
		return
	}
	if !p.HoldsPodIP() || len(p.IPs) == 0 {
		return
	}
	x.holding--
	eachIP(p, func(k [16]byte) {
		m := x.more[k]
		if x.first[k] == i {
			if len(m) == 0 {
				delete(x.first, k)
				return
			}
			x.first[k] = m[0]
			m = slices.Delete(m, 0, 1)
		} else if j := slices.Index(m, i); j >= 0 {
			m = slices.Delete(m, j, j+1)
		}
		if len(m) == 0 {
			delete(x.more, k)
		} else {
			x.more[k] = m
		}
	})
}

// eachIP calls fn with each of p's IPs, unmapped, once.
func eachIP(p *Pod, fn func(k [16]byte)) {
	for i, a := range p.IPs {
		a = a.Unmap()
		if i > 0 && slices.ContainsFunc(p.IPs[:i], func(b netip.Addr) bool { return b.Unmap() == a }) {
			continue
		}
		fn(a.As16())
	}
}

// Shared returns the pods of each pod-network IP that two or more pods
// hold, in a time proportional to the shared IPs. The pods are the
// index's own records, valid until the next Set or Delete.
func (x *PodIndex) Shared() map[netip.Addr][]*Pod {
	m := make(map[netip.Addr][]*Pod, len(x.more))
	for k, rest := range x.more {
		ps := make([]*Pod, 0, 1+len(rest))
		ps = append(ps, &x.pods[x.first[k]])
		for _, j := range rest {
			ps = append(ps, &x.pods[j])
		}
		m[netip.AddrFrom16(k).Unmap()] = ps
	}
	return m
}
