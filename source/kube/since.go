package kube

import (
	"net/netip"
	"sync"
	"time"

	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/ghostwatch/ghostwatch/snapshot"
)

// endpointSince remembers, for each address the EndpointSlices list, since
// when it has been listed for the same pod (the targetRef's uid, "" for
// none): this process saw it listed then, and the pod held the address
// then or earlier. A node agent, which does not watch every pod, tells from
// it whether a flow may be older than the pod its backend belongs to now,
// and so whether the pod must be looked up; once looked up, the pod's own
// start is learned, and a flow that started after it needs no lookup
// again.
type endpointSince struct {
	mu   sync.Mutex
	seen map[netip.Addr]sinceEntry
}

type sinceEntry struct {
	uid string
	at  time.Time
}

// update records a slice's change: each address it lists now for a pod
// it was not seen listed for is seen from now on; each address it listed
// before and lists no more is forgotten (another slice listing it records
// it again, later, which only makes the time later: safe).
func (e *endpointSince) update(old, cur any, now time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	listed := map[netip.Addr]bool{}
	for _, ep := range sliceEndpoints(cur) {
		listed[ep.Address] = true
		if s, ok := e.seen[ep.Address]; !ok || s.uid != ep.PodUID {
			e.seen[ep.Address] = sinceEntry{uid: ep.PodUID, at: now}
		}
	}
	for _, ep := range sliceEndpoints(old) {
		if !listed[ep.Address] {
			delete(e.seen, ep.Address)
		}
	}
}

// fill sets each endpoint's Since: when it was first seen listed for its
// pod, or now for one the handlers have not recorded yet.
func (e *endpointSince) fill(eps []snapshot.Endpoint, now time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for i := range eps {
		ep := &eps[i]
		if s, ok := e.seen[ep.Address]; ok && s.uid == ep.PodUID {
			ep.Since = s.at
		} else {
			ep.Since = now
		}
	}
}

// learn records that the pod uid held a since at: the earlier of that and
// when it was first seen listed stands.
func (e *endpointSince) learn(a netip.Addr, uid string, at time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if s, ok := e.seen[a]; ok && s.uid == uid && at.Before(s.at) {
		e.seen[a] = sinceEntry{uid: uid, at: at}
	}
}

// sliceEndpoints converts the EndpointSlice an event carries, if any.
func sliceEndpoints(obj any) []snapshot.Endpoint {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	es, ok := obj.(*discoveryv1.EndpointSlice)
	if !ok || es == nil {
		return nil
	}
	return Endpoints(es)
}
