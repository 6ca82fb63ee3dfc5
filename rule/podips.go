package rule

import (
	"net/netip"
	"slices"

	"github.com/ghostwatch/ghostwatch/finding"
	"github.com/ghostwatch/ghostwatch/snapshot"
)

// PodIPs keeps, as pod events arrive, which pods hold each pod-network IP,
// so that a long-running watcher of every pod (the controller) knows the
// duplicated IPs after each event without a pass over every pod. Pods are
// keyed by UID. It is not safe for concurrent use.
type PodIPs struct {
	// pods are the pods that hold pod-network IPs, by UID.
	pods map[string]*snapshot.Pod
	// holders maps each IP (its 16-byte form) to its pods.
	holders map[[16]byte][]*snapshot.Pod
	// dups are the IPs with more than one holder.
	dups map[[16]byte]struct{}
}

// NewPodIPs returns an empty index.
func NewPodIPs() *PodIPs {
	return &PodIPs{pods: map[string]*snapshot.Pod{}, holders: map[[16]byte][]*snapshot.Pod{}, dups: map[[16]byte]struct{}{}}
}

// Len is the number of pods that hold pod-network IPs.
func (x *PodIPs) Len() int { return len(x.pods) }

// Set records p, added or changed; a pod that no longer holds pod-network
// IPs (finished, or hostNetwork) is removed. The index keeps p: the caller
// must not change it afterwards.
func (x *PodIPs) Set(p *snapshot.Pod) {
	x.Delete(p.UID)
	if !holdsPodIP(p) || len(p.IPs) == 0 {
		return
	}
	x.pods[p.UID] = p
	for i, a := range p.IPs {
		a = a.Unmap()
		if i > 0 && slices.ContainsFunc(p.IPs[:i], func(b netip.Addr) bool { return b.Unmap() == a }) {
			continue
		}
		k := a.As16()
		hs := append(x.holders[k], p)
		x.holders[k] = hs
		if len(hs) > 1 {
			x.dups[k] = struct{}{}
		}
	}
}

// Delete removes the pod with the given UID.
func (x *PodIPs) Delete(uid string) {
	p := x.pods[uid]
	if p == nil {
		return
	}
	delete(x.pods, uid)
	for _, a := range p.IPs {
		k := a.Unmap().As16()
		hs := x.holders[k]
		i := slices.Index(hs, p)
		if i < 0 {
			continue
		}
		hs = slices.Delete(hs, i, i+1)
		switch len(hs) {
		case 0:
			delete(x.holders, k)
		default:
			x.holders[k] = hs
		}
		if len(hs) < 2 {
			delete(x.dups, k)
		}
	}
}

// Duplicates returns the findings of duplicate-pod-ip, as Evaluate would
// on the same pods, in a time proportional to the duplicated IPs.
func (x *PodIPs) Duplicates() []finding.Finding {
	m := make(map[netip.Addr][]*snapshot.Pod, len(x.dups))
	for k := range x.dups {
		m[netip.AddrFrom16(k).Unmap()] = x.holders[k]
	}
	return DuplicatesOf(m)
}
