package live

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"sort"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"

	"github.com/ghostwatch/ghostwatch/internal/text"
	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source/kube"
)

// The defaults of Holders.
const (
	// DefaultHolderTTL is how long an answer is kept at first.
	DefaultHolderTTL = 30 * time.Second
	// DefaultMaxHolderTTL is the longest an answer is kept: a pod that
	// comes to hold an address, with no EndpointSlice and no pod of the
	// node mentioning it, is found within this time.
	DefaultMaxHolderTTL = 4 * time.Minute
	// DefaultHolderParallel bounds the lookups in flight.
	DefaultHolderParallel = 8
)

// Holders looks up which pods hold an address, for a process that watches
// only some pods (a node agent watches its own node's), and keeps each
// answer for a while. A lookup is one list of the pods whose first address
// is the address (field selector status.podIP), served from the API
// server's watch cache (resourceVersion "0"): the same request in the
// same shape from every node, cheap to serve, and never what a remedy acts
// on (its last re-check reads afresh, with fresh.Quorum).
//
// An answer is kept for TTL, doubled at each refresh that finds the same
// pods, up to MaxTTL; Forget drops the answers a watched change mentions,
// so that an address listed again in an EndpointSlice is looked up again at
// once. A holder that comes to an address no watched object mentions is
// found within MaxTTL of its coming.
type Holders struct {
	// Client lists the pods.
	Client kubernetes.Interface
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// TTL and MaxTTL bound how long an answer is kept; defaults
	// DefaultHolderTTL and DefaultMaxHolderTTL.
	TTL, MaxTTL time.Duration
	// Parallel bounds the lookups in flight; default
	// DefaultHolderParallel.
	Parallel int

	mu      sync.Mutex
	cache   map[netip.Addr]*holderEntry
	lookups int
}

// holderEntry is one answer: the pods that held the address when it was
// asked, and for how long the answer stands.
type holderEntry struct {
	pods []snapshot.Pod
	at   time.Time
	ttl  time.Duration
}

func (h *Holders) now() time.Time {
	if h.Now == nil {
		return time.Now()
	}
	return h.Now()
}

func (h *Holders) ttls() (ttl, maxTTL time.Duration) {
	ttl, maxTTL = h.TTL, h.MaxTTL
	if ttl <= 0 {
		ttl = DefaultHolderTTL
	}
	if maxTTL <= 0 {
		maxTTL = DefaultMaxHolderTTL
	}
	return ttl, max(ttl, maxTTL)
}

// Lookup returns the pods that hold each of addrs: from an answer that
// still stands, or asked of the API server now, at most Parallel requests
// at once. It fails, naming the addresses, when any request failed; the
// answers that came are kept.
func (h *Holders) Lookup(ctx context.Context, addrs []netip.Addr) (map[netip.Addr][]snapshot.Pod, error) {
	if h.Client == nil {
		return nil, errors.New("no Kubernetes client to look up pods with")
	}
	now := h.now()
	ttl, maxTTL := h.ttls()
	out := make(map[netip.Addr][]snapshot.Pod, len(addrs))
	var ask []netip.Addr
	h.mu.Lock()
	if h.cache == nil {
		h.cache = map[netip.Addr]*holderEntry{}
	}
	// Answers past their time are forgotten: the cache holds at most the
	// addresses asked about within MaxTTL.
	for a, e := range h.cache {
		if now.Sub(e.at) >= maxTTL {
			delete(h.cache, a)
		}
	}
	for _, a := range addrs {
		a = a.Unmap()
		if _, dup := out[a]; dup || slices.Contains(ask, a) {
			continue
		}
		if e := h.cache[a]; e != nil && now.Sub(e.at) < e.ttl {
			out[a] = e.pods
			continue
		}
		ask = append(ask, a)
	}
	h.mu.Unlock()
	if len(ask) == 0 {
		return out, nil
	}
	parallel := h.Parallel
	if parallel <= 0 {
		parallel = DefaultHolderParallel
	}
	found := make([][]snapshot.Pod, len(ask))
	errs := make([]error, len(ask))
	sem := make(chan struct{}, parallel)
	var wg sync.WaitGroup
	for i, a := range ask {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			found[i], errs[i] = h.list(ctx, a)
		}()
	}
	wg.Wait()
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lookups += len(ask)
	var failed []string
	var first error
	for i, a := range ask {
		if errs[i] != nil {
			failed = append(failed, a.String())
			if first == nil {
				first = errs[i]
			}
			continue
		}
		e := &holderEntry{pods: found[i], at: now, ttl: ttl}
		if old := h.cache[a]; old != nil && samePods(old.pods, found[i]) {
			e.ttl = min(2*old.ttl, maxTTL)
		}
		h.cache[a] = e
		out[a] = found[i]
	}
	if len(failed) > 0 {
		return nil, fmt.Errorf("looking up the pods at %s: %w", text.List(failed, 3), first)
	}
	return out, nil
}

// list asks the API server which pods hold a.
func (h *Holders) list(ctx context.Context, a netip.Addr) ([]snapshot.Pod, error) {
	sel := fields.OneTermEqualSelector("status.podIP", a.String()).String()
	l, err := h.Client.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: sel, ResourceVersion: "0"})
	if err != nil {
		return nil, errors.New(kube.DescribeError(err, kube.ResourcePods))
	}
	var out []snapshot.Pod
	for i := range l.Items {
		// Keep only what truly holds the address, whatever the server
		// selected.
		if p := kube.Pod(&l.Items[i]); p.HasIP(a) {
			out = append(out, p)
		}
	}
	return out, nil
}

// samePods reports whether two answers name the same pods in the same
// state.
func samePods(a, b []snapshot.Pod) bool {
	return slices.EqualFunc(a, b, func(x, y snapshot.Pod) bool {
		return x.UID == y.UID && x.Phase == y.Phase && x.Deleting == y.Deleting && slices.Equal(x.IPs, y.IPs)
	})
}

// Forget drops the answers for addrs: a watched change mentions them.
func (h *Holders) Forget(addrs ...netip.Addr) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, a := range addrs {
		delete(h.cache, a.Unmap())
	}
}

// Due returns when the first standing answer for one of addrs runs out,
// and false when none is kept.
func (h *Holders) Due(addrs ...netip.Addr) (time.Time, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var due time.Time
	for _, a := range addrs {
		e := h.cache[a.Unmap()]
		if e == nil {
			continue
		}
		if t := e.at.Add(e.ttl); due.IsZero() || t.Before(due) {
			due = t
		}
	}
	return due, !due.IsZero()
}

// Lookups returns how many addresses were asked of the API server so far.
func (h *Holders) Lookups() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.lookups
}

// resolveHolders looks up the holders of the addresses readers ask about
// (snapshot.HolderReader) that k does not know, and returns k with them:
// a copy whose Pods hold the pods found, Looked the addresses asked and
// Unlooked those that cannot be asked. k is not modified.
func resolveHolders(ctx context.Context, h *Holders, readers []any, s *snapshot.Snapshot) (*snapshot.Kube, error) {
	k := s.Kube
	want := map[netip.Addr]bool{}
	for _, r := range readers {
		hr, ok := r.(snapshot.HolderReader)
		if !ok {
			continue
		}
		for _, a := range hr.HolderAddrs(s) {
			if a = a.Unmap(); a.IsValid() && !k.KnowsHolders(a) && k.Unlooked[a] == "" {
				want[a] = true
			}
		}
	}
	if len(want) == 0 {
		return k, nil
	}
	fam := podFamilies(k)
	unlooked := maps.Clone(k.Unlooked)
	if unlooked == nil {
		unlooked = map[netip.Addr]string{}
	}
	var ask []netip.Addr
	for a := range want {
		if fam.second(a) {
			unlooked[a] = "of the cluster's second address family: the API server selects pods by their first address only (status.podIP)"
			continue
		}
		ask = append(ask, a)
	}
	sort.Slice(ask, func(i, j int) bool { return ask[i].Less(ask[j]) })
	var found map[netip.Addr][]snapshot.Pod
	if len(ask) > 0 {
		if h == nil {
			return nil, fmt.Errorf("the holders of %d addresses outside node %s cannot be looked up: no client", len(ask), k.PodNode)
		}
		var err error
		if found, err = h.Lookup(ctx, ask); err != nil {
			return nil, err
		}
	}
	if fam == familyUnknown {
		// No pod at an address of the first family is an answer; at one
		// of the second, none is ever found. Only a pod found tells.
		looked := ask[:0:0]
		for _, a := range ask {
			if len(found[a]) == 0 {
				unlooked[a] = "the cluster is dual-stack and which family is the pods' first is unknown here: the API server selects pods by their first address only (status.podIP)"
				continue
			}
			looked = append(looked, a)
		}
		ask = looked
	}
	if len(unlooked) == 0 {
		unlooked = nil
	}
	nk := *k
	nk.Pods = slices.Clone(k.Pods)
	nk.Looked = maps.Clone(k.Looked)
	if nk.Looked == nil {
		nk.Looked = map[netip.Addr]bool{}
	}
	nk.Unlooked = unlooked
	have := map[string]bool{}
	for i := range nk.Pods {
		have[nk.Pods[i].UID] = true
	}
	for _, a := range ask {
		nk.Looked[a] = true
		for _, p := range found[a] {
			if !have[p.UID] {
				have[p.UID] = true
				nk.Pods = append(nk.Pods, p)
			}
		}
	}
	sort.Slice(nk.Pods, func(a, b int) bool { return refLess(nk.Pods[a].Ref(), nk.Pods[b].Ref()) })
	return &nk, nil
}

// family is what a node knows of the pod network's address families.
type family int

const (
	// familySingle: single-stack; every address can be looked up.
	familySingle family = iota
	// familyV4First and familyV6First: dual-stack, pods' first address
	// of that family.
	familyV4First
	familyV6First
	// familyUnknown: dual-stack, the first family unknown.
	familyUnknown
)

// second reports whether a is of the second family, by which the API
// server cannot select pods (it matches a pod's first address only).
func (f family) second(a netip.Addr) bool {
	switch f {
	case familyV4First:
		return !a.Unmap().Is4()
	case familyV6First:
		return a.Unmap().Is4()
	}
	return false
}

// podFamilies tells, from what k holds, whether the cluster is dual-stack
// and which family is its pods' first. It is dual-stack when the node's
// pod CIDRs, a pod's addresses or a Service's cluster IPs are of both
// families; the first family is the node's first pod CIDR's, else a
// dual-stack pod's first address's.
func podFamilies(k *snapshot.Kube) family {
	dual := false
	first := familyUnknown
	both := func(addrs []netip.Addr) bool {
		v4, v6 := false, false
		for _, a := range addrs {
			v4, v6 = v4 || a.Unmap().Is4(), v6 || !a.Unmap().Is4()
		}
		return v4 && v6
	}
	of := func(a netip.Addr) family {
		if a.Unmap().Is4() {
			return familyV4First
		}
		return familyV6First
	}
	for i := range k.Nodes {
		n := &k.Nodes[i]
		if n.Name != k.PodNode || len(n.PodCIDRs) == 0 {
			continue
		}
		var addrs []netip.Addr
		for _, p := range n.PodCIDRs {
			addrs = append(addrs, p.Addr())
		}
		first = of(addrs[0])
		dual = dual || both(addrs)
	}
	for i := range k.Pods {
		if p := &k.Pods[i]; !p.HostNetwork && both(p.IPs) {
			dual = true
			if first == familyUnknown {
				first = of(p.IPs[0])
			}
		}
	}
	for i := range k.Services {
		dual = dual || both(k.Services[i].ClusterIPs)
	}
	if !dual {
		return familySingle
	}
	return first
}
