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

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

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
	// DefaultHolderBatch is the most addresses one Lookup asks about one
	// by one. Beyond it one paged list of every pod answers them all: when
	// a node's workloads all died it asks about thousands of backends,
	// and thousands of single reads cost the API server more than a list
	// of the cluster's pods and take longer than a pass (20,000 of them,
	// five a second, over an hour).
	DefaultHolderBatch = 50
	// DefaultHolderPage is how many pods a page of that list holds: what
	// is decoded at once, and dropped but for the pods at the addresses
	// asked about before the next page is read.
	DefaultHolderPage = 500
	// DefaultHolderQPS and DefaultHolderBurst are the client-side rate
	// limit of the lookups' own client (NodeClients), kube-proxy's
	// defaults: apart from the informers', so that neither waits behind
	// the other.
	DefaultHolderQPS   = 5
	DefaultHolderBurst = 10
)

// LookupClient is the client of a node's Holders: cfg's server and
// credentials, with a rate limit of its own (DefaultHolderQPS and
// DefaultHolderBurst) and a user agent that names it, so that a pass that
// looks up thousands of addresses never holds back a watch's relist, and
// a relist never holds back a pass.
func LookupClient(cfg *rest.Config) (kubernetes.Interface, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst, cfg.RateLimiter = DefaultHolderQPS, DefaultHolderBurst, nil
	cfg.UserAgent = LookupUserAgent
	client, _, err := kube.ClientForConfig(cfg)
	return client, err
}

// LookupUserAgent is the user agent of LookupClient's requests, as the
// API server's audit log names them.
const LookupUserAgent = "ghostwatch (holders)"

// How a Lookup asked, as metrics and Progress say it.
const (
	// lookupByAddress: one list of pods by status.podIP an address.
	lookupByAddress = "by-address"
	// lookupAllPods: one paged list of every pod.
	lookupAllPods = "all-pods"
)

// Holders looks up which pods hold an address, for a process that watches
// only some pods (a node agent watches its own node's), and keeps each
// answer for a while. Up to Batch addresses, a lookup is one list of the
// pods whose first address is the address (field selector status.podIP),
// served from the API server's watch cache (resourceVersion "0"): the
// same request in the same shape from every node, cheap to serve. More
// addresses than that are answered by one list of every pod, in pages of
// Page pods, keeping only the pods at the addresses asked about. Its
// resourceVersion is "": the watch cache ignores a limit at "0", and a
// cluster's pods in one answer would be more than an agent may hold; an
// API server of Kubernetes 1.34 serves it from its watch cache all the
// same (the first page a consistent read of the cache, the next ones from
// its snapshot), older ones from etcd. Neither is ever what a remedy acts
// on (its last re-check reads afresh, with fresh.Quorum).
//
// An answer is kept for TTL, doubled at each refresh that finds the same
// pods, up to MaxTTL; Forget drops the answers a watched change mentions,
// so that an address listed again in an EndpointSlice is looked up again at
// once. A holder that comes to an address no watched object mentions is
// found within MaxTTL of its coming.
type Holders struct {
	// Client lists the pods: a client of the lookups' own (NodeClients),
	// so that its rate limit does not hold back the informers' requests.
	Client kubernetes.Interface
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// TTL and MaxTTL bound how long an answer is kept; defaults
	// DefaultHolderTTL and DefaultMaxHolderTTL.
	TTL, MaxTTL time.Duration
	// Parallel bounds the lookups in flight; default
	// DefaultHolderParallel.
	Parallel int
	// Batch is the most addresses a Lookup asks about one by one, and
	// Page the pods a page of the list of every pod holds beyond it;
	// defaults DefaultHolderBatch and DefaultHolderPage.
	Batch, Page int
	// Metrics, when set, count the lookups and say how long the last took
	// and how many are under way.
	Metrics *HolderMetrics

	mu      sync.Mutex
	cache   map[[16]byte]holderEntry
	lookups int
	// run is the lookup under way; run.how is "" when none is.
	run holderRun
}

// holderEntry is one answer: the pods that held the address when it was
// asked, and for how long the answer stands. Most answers are "none" (a
// node whose workloads all died asks of a hundred thousand dead
// backends), and take no slice of their own: 24 bytes, not 40.
type holderEntry struct {
	// pods are the pods; nil when none held the address.
	pods *[]snapshot.Pod
	at   int64 // Unix ns
	ttl  time.Duration
}

// noPods is the answer of an address no pod holds: empty, not nil (nil
// is a request that failed).
var noPods = []snapshot.Pod{}

func newHolderEntry(pods []snapshot.Pod, at int64, ttl time.Duration) holderEntry {
	e := holderEntry{at: at, ttl: ttl}
	if len(pods) > 0 {
		e.pods = &pods
	}
	return e
}

// holders returns the pods, empty when none.
func (e holderEntry) holders() []snapshot.Pod {
	if e.pods == nil {
		return noPods
	}
	return *e.pods
}

// holderRun is what a lookup under way has done: how it asks, how many
// addresses, since when, and how many of them are answered (by address)
// or how many pods were read (every pod).
type holderRun struct {
	how   string
	asked int
	done  int
	since time.Time
}

// HolderMetrics are the series of the lookups.
type HolderMetrics struct {
	// Pending is how many addresses the lookup under way asks about.
	Pending prometheus.Gauge
	// Seconds is how long the last lookup took, by how it asked.
	Seconds *prometheus.GaugeVec
	// Addresses counts the addresses asked about, by how.
	Addresses *prometheus.CounterVec
}

// NewHolderMetrics creates the lookups' series, named under namespace,
// and registers them with reg.
func NewHolderMetrics(reg prometheus.Registerer, namespace string) *HolderMetrics {
	m := &HolderMetrics{
		Pending: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: namespace, Name: "holder_lookups_pending",
			Help: "Addresses whose holders the lookup under way asks the API server about; 0 when none runs."}),
		Seconds: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: namespace, Name: "holder_lookup_seconds",
			Help: "How long the last lookup of holders took, by how it asked: by-address (a list by status.podIP an address) or all-pods (one paged list of every pod)."}, []string{"how"}),
		Addresses: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: namespace, Name: "holder_lookups_total",
			Help: "Addresses whose holders were asked of the API server, by how: by-address or all-pods."}, []string{"how"}),
	}
	reg.MustRegister(m.Pending, m.Seconds, m.Addresses)
	for _, how := range []string{lookupByAddress, lookupAllPods} {
		m.Seconds.WithLabelValues(how)
		m.Addresses.WithLabelValues(how)
	}
	return m
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
// still stands, or asked of the API server now: up to Batch addresses one
// by one, at most Parallel requests at once, more in one list of every
// pod. It fails, naming the addresses, when any request failed; the
// answers that came are kept.
func (h *Holders) Lookup(ctx context.Context, addrs []netip.Addr) (map[netip.Addr][]snapshot.Pod, error) {
	as := make([]netip.Addr, len(addrs))
	for i, a := range addrs {
		as[i] = a.Unmap()
	}
	slices.SortFunc(as, netip.Addr.Compare)
	as = slices.Compact(as)
	found, err := h.lookup(ctx, as)
	if err != nil {
		return nil, err
	}
	out := make(map[netip.Addr][]snapshot.Pod, len(as))
	for i, a := range as {
		out[a] = found[i]
	}
	return out, nil
}

// lookup is Lookup of addrs, unmapped, sorted and each once: the pods
// that hold addrs[i] are its answer's [i].
func (h *Holders) lookup(ctx context.Context, addrs []netip.Addr) ([][]snapshot.Pod, error) {
	if h.Client == nil {
		return nil, errors.New("no Kubernetes client to look up pods with")
	}
	now := h.now()
	ttl, maxTTL := h.ttls()
	out := make([][]snapshot.Pod, len(addrs))
	// ask are the addresses asked of the API server, at, for each, its
	// place in addrs.
	var ask []netip.Addr
	var at []int
	h.mu.Lock()
	if h.cache == nil {
		h.cache = map[[16]byte]holderEntry{}
	}
	// Answers past their time are forgotten: the cache holds at most the
	// addresses asked about within MaxTTL.
	for a, e := range h.cache {
		if now.UnixNano()-e.at >= int64(maxTTL) {
			delete(h.cache, a)
		}
	}
	for i, a := range addrs {
		if e, ok := h.cache[a.As16()]; ok && now.UnixNano()-e.at < int64(e.ttl) {
			out[i] = e.holders()
			continue
		}
		ask, at = append(ask, a), append(at, i)
	}
	h.mu.Unlock()
	if len(ask) == 0 {
		return out, nil
	}
	how := lookupByAddress
	if len(ask) > h.batch() {
		how = lookupAllPods
	}
	h.begin(how, len(ask))
	defer h.end(how, len(ask))
	var found [][]snapshot.Pod
	var failed []string
	var first error
	if how == lookupAllPods {
		var err error
		if found, err = h.listAll(ctx, ask); err != nil {
			failed, first = addrStrings(ask), err
		}
	} else {
		found, failed, first = h.listEach(ctx, ask)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lookups += len(ask)
	for i, a := range ask {
		if found == nil || found[i] == nil {
			// Its request failed.
			continue
		}
		e := newHolderEntry(found[i], now.UnixNano(), ttl)
		if old, ok := h.cache[a.As16()]; ok && samePods(old.holders(), found[i]) {
			e.ttl = min(2*old.ttl, maxTTL)
		}
		h.cache[a.As16()] = e
		out[at[i]] = found[i]
	}
	if len(failed) > 0 {
		if how == lookupAllPods {
			return nil, fmt.Errorf("looking up the pods at %s in a list of every pod: %w", text.Count(len(ask), "address", "addresses"), first)
		}
		return nil, fmt.Errorf("looking up the pods at %s: %w", text.List(failed, 3), first)
	}
	return out, nil
}

func (h *Holders) batch() int {
	if h.Batch <= 0 {
		return DefaultHolderBatch
	}
	return h.Batch
}

// begin records that a lookup of n addresses starts.
func (h *Holders) begin(how string, n int) {
	h.mu.Lock()
	h.run = holderRun{how: how, asked: n, since: h.now()}
	h.mu.Unlock()
	if m := h.Metrics; m != nil {
		m.Pending.Set(float64(n))
	}
}

// end records that the lookup under way ended.
func (h *Holders) end(how string, n int) {
	h.mu.Lock()
	took := h.now().Sub(h.run.since)
	h.run = holderRun{}
	h.mu.Unlock()
	if m := h.Metrics; m != nil {
		m.Pending.Set(0)
		m.Seconds.WithLabelValues(how).Set(took.Seconds())
		m.Addresses.WithLabelValues(how).Add(float64(n))
	}
}

// did records that the lookup under way answered n more addresses, or
// read n more pods.
func (h *Holders) did(n int) {
	h.mu.Lock()
	h.run.done += n
	h.mu.Unlock()
}

// Progress says what the lookup under way has done: "looking up the pods
// at 20000 addresses in one list of every pod: 12000 pods read in 8s",
// "looking up the pods at 30 addresses one by one: 12 answered in 3s";
// "" when none runs.
func (h *Holders) Progress() string {
	h.mu.Lock()
	r := h.run
	h.mu.Unlock()
	if r.how == "" {
		return ""
	}
	took := text.Duration(h.now().Sub(r.since))
	if r.how == lookupAllPods {
		return fmt.Sprintf("looking up the pods at %s in one list of every pod: %s read in %s",
			text.Count(r.asked, "address", "addresses"), text.Count(r.done, "pod", "pods"), took)
	}
	return fmt.Sprintf("looking up the pods at %s one by one: %d answered in %s",
		text.Count(r.asked, "address", "addresses"), r.done, took)
}

// listEach asks about each of ask by address, at most Parallel at once. It
// returns the answers (nil for an address whose request failed), the
// addresses that failed, and the first error.
func (h *Holders) listEach(ctx context.Context, ask []netip.Addr) (found [][]snapshot.Pod, failed []string, first error) {
	parallel := h.Parallel
	if parallel <= 0 {
		parallel = DefaultHolderParallel
	}
	found = make([][]snapshot.Pod, len(ask))
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
			if errs[i] == nil && found[i] == nil {
				found[i] = []snapshot.Pod{}
			}
			h.did(1)
		}()
	}
	wg.Wait()
	for i, a := range ask {
		if errs[i] != nil {
			found[i] = nil
			failed = append(failed, a.String())
			if first == nil {
				first = errs[i]
			}
		}
	}
	return found, failed, first
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

// listAll answers every address of ask from one list of every pod, a page
// of Page pods at a time: each page is dropped, but for the pods at the
// addresses asked about, before the next is read. A list whose
// continuation expired (the API server compacted past it) is read again
// from its start, once.
func (h *Holders) listAll(ctx context.Context, ask []netip.Addr) ([][]snapshot.Pod, error) {
	at := make(map[netip.Addr]int, len(ask))
	for i, a := range ask {
		at[a] = i
	}
	page := h.Page
	if page <= 0 {
		page = DefaultHolderPage
	}
	found := make([][]snapshot.Pod, len(ask))
	opts := metav1.ListOptions{Limit: int64(page)}
	for again := true; ; {
		l, err := h.Client.CoreV1().Pods("").List(ctx, opts)
		if apierrors.IsResourceExpired(err) && again {
			again = false
			opts.Continue = ""
			clear(found)
			continue
		}
		if err != nil {
			return nil, errors.New(kube.DescribeError(err, kube.ResourcePods))
		}
		for i := range l.Items {
			p := &l.Items[i]
			var sp *snapshot.Pod
			for _, ip := range podAddrs(p) {
				j, ok := at[ip]
				if !ok {
					continue
				}
				if sp == nil {
					c := kube.Pod(p)
					sp = &c
				}
				if !slices.ContainsFunc(found[j], func(q snapshot.Pod) bool { return q.UID == sp.UID }) {
					found[j] = append(found[j], *sp)
				}
			}
		}
		h.did(len(l.Items))
		if l.Continue == "" {
			break
		}
		opts.Continue = l.Continue
	}
	for i := range found {
		if found[i] == nil {
			found[i] = []snapshot.Pod{}
		}
	}
	return found, nil
}

// podAddrs are the addresses p reports, as the API server gives them.
func podAddrs(p *corev1.Pod) []netip.Addr {
	var out []netip.Addr
	add := func(s string) {
		if a, err := netip.ParseAddr(s); err == nil && !slices.Contains(out, a.Unmap()) {
			out = append(out, a.Unmap())
		}
	}
	add(p.Status.PodIP)
	for _, ip := range p.Status.PodIPs {
		add(ip.IP)
	}
	return out
}

func addrStrings(as []netip.Addr) []string {
	out := make([]string, len(as))
	for i, a := range as {
		out[i] = a.String()
	}
	return out
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
		delete(h.cache, a.Unmap().As16())
	}
}

// Due returns when the first standing answer for one of addrs runs out,
// and false when none is kept.
func (h *Holders) Due(addrs ...netip.Addr) (time.Time, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	var due time.Time
	for _, a := range addrs {
		e, ok := h.cache[a.Unmap().As16()]
		if !ok {
			continue
		}
		if t := time.Unix(0, e.at+int64(e.ttl)); due.IsZero() || t.Before(due) {
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
	// The addresses asked about, each once: both conntrack rules ask the
	// same, and a node whose workloads all died asks about a hundred
	// thousand.
	var want []netip.Addr
	for _, r := range readers {
		hr, ok := r.(snapshot.HolderReader)
		if !ok {
			continue
		}
		for _, a := range hr.HolderAddrs(s) {
			if a = a.Unmap(); a.IsValid() && !k.KnowsHolders(a) && k.Unlooked[a] == "" {
				want = append(want, a)
			}
		}
	}
	if len(want) == 0 {
		return k, nil
	}
	slices.SortFunc(want, netip.Addr.Compare)
	want = slices.Compact(want)
	fam := podFamilies(k)
	unlooked := maps.Clone(k.Unlooked)
	if unlooked == nil {
		unlooked = map[netip.Addr]string{}
	}
	ask := want[:0]
	for _, a := range want {
		if fam.second(a) {
			unlooked[a] = "of the cluster's second address family: the API server selects pods by their first address only (status.podIP)"
			continue
		}
		ask = append(ask, a)
	}
	var found [][]snapshot.Pod
	if len(ask) > 0 {
		if h == nil {
			return nil, fmt.Errorf("the holders of %d addresses outside node %s cannot be looked up: no client", len(ask), k.PodNode)
		}
		var err error
		if found, err = h.lookup(ctx, ask); err != nil {
			return nil, err
		}
	}
	if fam == familyUnknown {
		// No pod at an address of the first family is an answer; at one
		// of the second, none is ever found. Only a pod found tells.
		n := 0
		for i, a := range ask {
			if len(found[i]) == 0 {
				unlooked[a] = "the cluster is dual-stack and which family is the pods' first is unknown here: the API server selects pods by their first address only (status.podIP)"
				continue
			}
			ask[n], found[n] = a, found[i]
			n++
		}
		ask, found = ask[:n], found[:n]
	}
	if len(unlooked) == 0 {
		unlooked = nil
	}
	nk := *k
	nk.Pods = slices.Clone(k.Pods)
	nk.Looked = make(map[netip.Addr]bool, len(k.Looked)+len(ask))
	maps.Copy(nk.Looked, k.Looked)
	nk.Unlooked = unlooked
	have := map[string]bool{}
	for i := range nk.Pods {
		have[nk.Pods[i].UID] = true
	}
	for i, a := range ask {
		nk.Looked[a] = true
		for _, p := range found[i] {
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
