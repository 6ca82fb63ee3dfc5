package live

import (
	"net/netip"
	"slices"
	"sync"
	"time"

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
	mu sync.Mutex
	// seen is keyed by the address's 16-byte form: no pointer for the
	// garbage collector to follow in a map of every endpoint.
	seen map[[16]byte]sinceEntry
	// gen counts the changes to the slices and to seen; flat holds the
	// endpoints of every slice, dated and sorted, as of flatGen: a
	// snapshot shares it until the next change rather than copying every
	// endpoint of the cluster's Services at every audit.
	gen, flatGen uint64
	flat         []snapshot.Endpoint
}

type sinceEntry struct {
	uid string
	at  int64 // Unix ns
}

// update records a slice's change: each address it lists now for a pod
// it was not seen listed for is seen from now on; each address it listed
// before and lists no more is forgotten (another slice listing it records
// it again, later, which only makes the time later: safe).
func (e *endpointSince) update(old, cur any, now time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.gen++
	listed := map[[16]byte]bool{}
	for _, ep := range sliceEndpoints(cur) {
		a := ep.Address.As16()
		listed[a] = true
		if s, ok := e.seen[a]; !ok || s.uid != ep.PodUID {
			e.seen[a] = sinceEntry{uid: ep.PodUID, at: now.UnixNano()}
		}
	}
	for _, ep := range sliceEndpoints(old) {
		if a := ep.Address.As16(); !listed[a] {
			delete(e.seen, a)
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
		if s, ok := e.seen[ep.Address.As16()]; ok && s.uid == ep.PodUID {
			ep.Since = time.Unix(0, s.at).UTC()
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
	k := a.As16()
	if s, ok := e.seen[k]; ok && s.uid == uid && at.UnixNano() < s.at {
		e.seen[k] = sinceEntry{uid: uid, at: at.UnixNano()}
		e.gen++
	}
}

// generation returns the count of changes so far: endpoints built from
// the informer's store after it was taken may be kept under it.
func (e *endpointSince) generation() uint64 {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.gen
}

// cached returns the endpoints kept under gen, if nothing changed since.
// They are shared: readers must not modify them.
func (e *endpointSince) cached(gen uint64) ([]snapshot.Endpoint, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.flat == nil || e.flatGen != gen || e.gen != gen {
		return nil, false
	}
	return e.flat, true
}

// keep keeps eps under gen, unless something changed since gen was taken.
func (e *endpointSince) keep(gen uint64, eps []snapshot.Endpoint) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.gen == gen {
		e.flat, e.flatGen = slices.Clip(eps), gen
	}
}

// sliceEndpoints returns the endpoints of the slice an event carries, if
// any.
func sliceEndpoints(obj any) []snapshot.Endpoint {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	if es, ok := obj.(*keptSlice); ok && es != nil {
		return es.V
	}
	return nil
}
