package live

import (
	"cmp"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/ghostwatch/ghostwatch/snapshot"
)

// endpointSince dates the endpoints the EndpointSlices list: since when
// each address has been listed for the same pod (the targetRef's uid, ""
// for none), as this process saw it; the pod held the address then or
// earlier. A node agent, which does not watch every pod, tells from it
// whether a flow may be older than the pod its backend belongs to now, and
// so whether the pod must be looked up; once looked up, the pod's own
// start is learned, and a flow that started after it needs no lookup
// again.
//
// It keeps no map of every endpoint: the endpoints are dated when a
// snapshot converts them after a change, each keeping the date it had in
// the last conversion (the same Service, slice, address and pod), a new
// one dated by the conversion: a snapshot follows each change within a
// second or so, and a date later than the listing only asks for more
// lookups, never gives a wrong verdict (a date taken from the events
// could be too early: the informer's store changes before its handlers
// run). So is an address that moves to another slice dated anew.
type endpointSince struct {
	mu sync.Mutex
	// gen counts the changes to the slices and to learned; flat holds the
	// endpoints of every slice, dated and sorted, as of flatGen: a
	// snapshot shares it until the next change rather than copying every
	// endpoint of the cluster's Services at every audit.
	gen, flatGen uint64
	flat         []snapshot.Endpoint
	// learned are the pods' starts lookups found earlier than their
	// addresses' dates, by address: a few, for the suspect backends.
	learned map[[16]byte]sinceEntry
}

type sinceEntry struct {
	uid string
	at  int64 // Unix ns
}

// update records that a slice changed.
func (e *endpointSince) update() {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.gen++
}

// date sets the Since of eps, sorted as a snapshot sorts them (compareEndpoints),
// from the last conversion (flat), what lookups learned, or now.
func (e *endpointSince) date(eps []snapshot.Endpoint, now time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	used := map[[16]byte]bool{}
	j := 0
	for i := range eps {
		ep := &eps[i]
		ep.Since = now
		for j < len(e.flat) && compareEndpoints(&e.flat[j], ep) < 0 {
			j++
		}
		if j < len(e.flat) && compareEndpoints(&e.flat[j], ep) == 0 && e.flat[j].PodUID == ep.PodUID {
			ep.Since = e.flat[j].Since
		}
		k := ep.Address.As16()
		if l, ok := e.learned[k]; ok && l.uid == ep.PodUID {
			used[k] = true
			if at := time.Unix(0, l.at).UTC(); at.Before(ep.Since) {
				ep.Since = at
			}
		}
	}
	// What lookups learned of addresses no longer listed for their pod
	// is forgotten.
	for k := range e.learned {
		if !used[k] {
			delete(e.learned, k)
		}
	}
}

// compareEndpoints orders endpoints as a snapshot lists them: by Service,
// slice and address.
func compareEndpoints(x, y *snapshot.Endpoint) int {
	return cmp.Or(strings.Compare(x.Service.Namespace, y.Service.Namespace), strings.Compare(x.Service.Name, y.Service.Name),
		strings.Compare(x.Slice, y.Slice), x.Address.Compare(y.Address))
}

// learn records that the pod uid held a since at: the earlier of that and
// when it was first seen listed stands.
func (e *endpointSince) learn(a netip.Addr, uid string, at time.Time) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.learned == nil {
		e.learned = map[[16]byte]sinceEntry{}
	}
	k := a.As16()
	if l, ok := e.learned[k]; ok && l.uid == uid && l.at <= at.UnixNano() {
		return
	}
	e.learned[k] = sinceEntry{uid: uid, at: at.UnixNano()}
	e.gen++
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
