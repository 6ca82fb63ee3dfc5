package gossip

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source"
)

// DefaultInterval is how often the Watch reads the gossip clusters' views
// by default: one request per cluster.
const DefaultInterval = 30 * time.Second

// readTimeout bounds the reading of one member's view.
const readTimeout = 10 * time.Second

// minRound is the least time between two rounds a kick asks for: a
// rolling restart of a cluster's pods costs at most one read of each
// cluster a second.
const minRound = time.Second

// maxTried is how many pods of a cluster a read tries before it gives up:
// a cluster whose three oldest pods cannot answer is not read by asking
// every other.
const maxTried = 3

// maxReading is how many clusters a round reads at once.
const maxReading = 8

// Pods is the cluster's pods as the watch learns of them: the cluster-wide
// pod informer. The Watch finds the annotated pods among those it is
// handed, and asks Reporting whether a pod still holds its address alone:
// both answer from the same pods.
type Pods interface {
	// OnPod registers fn, called with each pod as the informer keeps it
	// (annotations with the ghostwatch.io/gossip prefix kept) when it is
	// added or changed, and with deleted true when it goes. It is
	// registered before the pods' source starts. A pods' source that
	// starts afresh (the controller's, each time it leads) calls fn again
	// with every pod it lists: the Watch forgets the pods it knew when the
	// ctx of its Start ends.
	OnPod(fn func(p *corev1.Pod, deleted bool))
	// Listed reports whether every pod has been listed once since the
	// pods' source last started, and handed to fn: not only listed into
	// the informer's cache (client-go's informer HasSynced), which comes
	// before its handlers have run, but through them (HasSynced of the
	// handler's registration). A round started in between would read
	// only the clusters of the pods handed so far, and could take an
	// address for a pod's alone while the pod sharing it is on its way.
	Listed() bool
	// Reporting returns how many unfinished pods report address a now,
	// hostNetwork pods included: a request to a may reach any of them.
	Reporting(a netip.Addr) int
}

// Watch is the gossip clusters of the pods annotated ghostwatch.io/gossip,
// read live (source.Live, source.Settler, source.Fresher): every
// Interval, a round reads each cluster's view from one of its members'
// agents, the oldest pod's first, and keeps the last round's views. A
// cluster that cannot be read is judged on its last view (Unread says
// why): one cluster's outage does not stop the others' judgement, nor
// read as "no ghost" in its own.
//
// A view is taken for a pod's only when it is: the agent that answered
// is at the pod's address, of the system annotated, and the pod still
// holds that address, alone, once the answer is in. Identity by address
// is what the gossip rules hunt; the watch must not fall for it.
type Watch struct {
	// Pods are the cluster's pods, among which the annotated ones name
	// the agents to ask.
	Pods Pods
	// Interval is the time between rounds; DefaultInterval when zero. A
	// member's pod that goes or leaves its address brings the next round
	// forward: the last views still count it where it was.
	Interval time.Duration
	// Clusters are the clusters the operator declared: only they are
	// read, only through pods of their namespace, and only with their own
	// credential. A pod annotated as a member of a cluster not declared
	// is asked nothing (Describe names such clusters once).
	Clusters *Declarations
	// Secrets reads the Secrets the declarations name (tokenSecret).
	Secrets corev1client.SecretsGetter
	// Agent returns the API of an annotated pod's gossip agent; nil means
	// Consul's HTTP API, Serf's RPC or the ghostwatch/gossip package's
	// member list at the pod's address, with the credential and TLS its
	// cluster's declaration gives.
	Agent func(Member) (Agent, error)
	// Now is the clock that stamps when a member was first read listed;
	// nil means time.Now.
	Now func() time.Time

	mu sync.Mutex
	// registered is true once OnPod was called; running from Start until
	// its ctx ends (done). gen counts the starts' ends: what a read begun
	// before the last end brings in is dropped.
	registered, running bool
	done                <-chan struct{}
	gen                 uint64
	// kick asks the running rounds for one before the interval ends.
	kick   chan struct{}
	notify func()
	// pods are the running pods annotated as gossip members, by UID.
	pods map[string]annotated
	// read is true once a round has ended; views are its views, by
	// cluster, a cluster it could not read with its last view (Unread
	// says why); errs why those were not read; fresh how many were.
	read  bool
	views []snapshot.GossipView
	errs  []string
	fresh int
	// changed is true when a round ended since Changes was last called.
	changed bool
	// last is each cluster's last view read.
	last map[snapshot.GossipCluster]snapshot.GossipView
	// listed is, by cluster and member, when the member was first read
	// listed, for views that do not say when a member went.
	listed map[snapshot.GossipCluster]map[string]time.Time
}

var (
	_ source.Live      = (*Watch)(nil)
	_ source.Settler   = (*Watch)(nil)
	_ source.Describer = (*Watch)(nil)
	_ source.Fresher   = (*Watch)(nil)
)

// Name returns "gossip".
func (*Watch) Name() string { return Name }

func (w *Watch) now() time.Time {
	if w.Now == nil {
		return time.Now()
	}
	return w.Now()
}

// Start registers on Pods (the first time) and starts the rounds, the
// first once every pod is listed: the pods say where the agents are. It
// returns at once (source.Live). When ctx ends the rounds end, and the
// watch forgets what it read and the pods it knew; a Start after that
// starts afresh, as the controller does each time it leads. A Start while
// the last one's ctx has not ended is an error.
func (w *Watch) Start(ctx context.Context) error {
	if w.Pods == nil {
		return errors.New("gossip: no pods to find the agents among")
	}
	w.mu.Lock()
	if w.running {
		select {
		case <-w.done:
			// The last start's ctx has ended, and what it read is
			// forgotten now rather than when its end is handled.
			w.stopLocked()
		default:
			w.mu.Unlock()
			return errors.New("gossip: started already: start again once the last start's ctx has ended")
		}
	}
	register := !w.registered
	w.registered, w.running, w.done = true, true, ctx.Done()
	gen := w.gen
	kick := make(chan struct{}, 1)
	w.kick = kick
	w.mu.Unlock()
	if register {
		w.Pods.OnPod(w.onPod)
	}
	context.AfterFunc(ctx, func() { w.stop(gen) })
	go w.run(ctx, gen, kick)
	return nil
}

// stop forgets what the start gen read, and the pods: a pods' source that
// starts afresh lists them again, and one gone in between would otherwise
// stay.
func (w *Watch) stop(gen uint64) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.gen == gen {
		w.stopLocked()
	}
}

// stopLocked is stop with w.mu held.
func (w *Watch) stopLocked() {
	w.gen++
	w.running, w.done, w.kick = false, nil, nil
	w.pods = nil
	w.read, w.views, w.errs, w.fresh, w.changed = false, nil, nil, 0, false
	w.last, w.listed = nil, nil
}

// Ready returns nil once a round has ended (source.Live).
func (w *Watch) Ready(time.Time) error {
	if !w.Settled() {
		return errNotRead
	}
	return nil
}

var errNotRead = errors.New("the gossip clusters' views were not read yet")

// Settled reports whether a round has ended (source.Settler).
func (w *Watch) Settled() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.read
}

// Changes returns every address as changed when a round ended since the
// last call (source.Live): a view names members, not the pods the rules
// hold them against.
func (w *Watch) Changes() source.Changes {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.changed {
		return source.Changes{}
	}
	w.changed = false
	return source.Changes{All: true, Why: "gossip"}
}

// OnChange sets fn, called after each round (source.Live).
func (w *Watch) OnChange(fn func()) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.notify = fn
}

// Collect sets s.Gossip to the views of the last round (source.Source).
// A cluster that could not be read is there with its last view, Unread
// set. When no cluster could be read, the source fails; when no running
// pod is annotated and none was read, it is unsupported: the gossip rules
// have nothing to judge.
func (w *Watch) Collect(_ context.Context, s *snapshot.Snapshot) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case !w.read:
		return errNotRead
	case len(w.Clusters.list()) == 0:
		return source.Unsupported("no gossip cluster is declared: give the controller --gossip-clusters FILE to read the clusters its pods annotate %s", AnnotationGossip)
	case len(w.pods) == 0 && len(w.views) == 0 && len(w.errs) == 0:
		return source.Unsupported("no running pod is annotated %s", AnnotationGossip)
	case len(w.views) == 0 && len(w.errs) == 0:
		return source.Unsupported("no running pod of a declared cluster is annotated %s; annotated but not declared, so not read: %s", AnnotationGossip, strings.Join(w.undeclared(), ", "))
	case w.fresh == 0 && len(w.errs) > 0:
		return errors.New(strings.Join(w.errs, "; "))
	}
	s.Gossip = &snapshot.Gossip{Views: slices.Clone(w.views), Undeclared: w.undeclared()}
	return nil
}

// undeclared names the clusters running pods are annotated as members of
// that no declaration names, sorted; w.mu is held.
func (w *Watch) undeclared() []string {
	var out []string
	for _, p := range w.pods {
		if !w.Clusters.covers(p) {
			out = append(out, clusterName(p.key))
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// Describe says how many clusters and members were read, and which
// clusters are judged on their last view, and why (source.Describer).
func (*Watch) Describe(s *snapshot.Snapshot) string {
	if s.Gossip == nil {
		return ""
	}
	members := 0
	var unread []string
	for _, v := range s.Gossip.Views {
		members += len(v.Members)
		if v.Unread != "" {
			unread = append(unread, v.Unread)
		}
	}
	d := fmt.Sprintf("%d clusters, %d members", len(s.Gossip.Views), members)
	if u := s.Gossip.Undeclared; len(u) > 0 {
		d += fmt.Sprintf("; %d annotated but not declared, not read: %s", len(u), strings.Join(u, ", "))
	}
	if len(unread) > 0 {
		d += fmt.Sprintf("; %d not read again, judged on their last view: %s", len(unread), strings.Join(unread, "; "))
	}
	return d
}

// Fresh reads again now, from their agents, the clusters q.Gossip names,
// and sets s.Gossip to those views (source.Fresher): a remedy's last
// re-check holds its findings against them. A cluster that cannot be read
// is left out, and the rule's re-check says it was not read again. When
// q names no cluster, s is left as it is.
func (w *Watch) Fresh(ctx context.Context, q snapshot.Query, s *snapshot.Snapshot) error {
	if len(q.Gossip) == 0 {
		return nil
	}
	w.mu.Lock()
	gen := w.gen
	w.mu.Unlock()
	targets := w.targets()
	views := []snapshot.GossipView{}
	seen := map[snapshot.GossipCluster]bool{}
	for _, c := range q.Gossip {
		if seen[c] {
			continue
		}
		seen[c] = true
		v, _, _, err := w.readCluster(ctx, gen, c, targets[c])
		if err != nil {
			continue
		}
		views = append(views, *v)
	}
	s.Gossip = &snapshot.Gossip{Views: views}
	return nil
}

// clusterName names a cluster in errors: "namespace/name (system)".
func clusterName(k snapshot.GossipCluster) string { return k.Cluster + " (" + k.System + ")" }

// forceLeaver is an agent that can force a member out of its cluster.
type forceLeaver interface {
	ForceLeave(ctx context.Context, node string) error
}

// ReadCluster reads cluster c afresh from one of its members' agents, as
// a round does, for a remedy about to act on it: the view, and leave,
// which forces a member out through the agent that gave the view (nil
// when that agent cannot: memberlist has no force-leave).
func (w *Watch) ReadCluster(ctx context.Context, c snapshot.GossipCluster) (v *snapshot.GossipView, leave func(ctx context.Context, member string) error, err error) {
	w.mu.Lock()
	gen := w.gen
	w.mu.Unlock()
	v, a, p, err := w.readCluster(ctx, gen, c, w.targets()[c])
	if err != nil {
		return nil, nil, err
	}
	if fl, ok := a.(forceLeaver); ok {
		// The force-leave carries the credential too: the pod must still
		// hold its address alone when it is sent.
		leave = func(ctx context.Context, member string) error {
			if err := w.still(p); err != nil {
				return &NotSentError{Err: err}
			}
			return fl.ForceLeave(ctx, member)
		}
	}
	return v, leave, nil
}

// NotSentError is what a request withheld by the check made right before
// sending it returns: nothing reached the agent.
type NotSentError struct{ Err error }

func (e *NotSentError) Error() string { return "not sent: " + e.Err.Error() }
func (e *NotSentError) Unwrap() error { return e.Err }

// NotSent reports true: the request reached no agent (remedy.Members
// counts it refused, not failed).
func (e *NotSentError) NotSent() bool { return true }

// onPod records the gossip member p is annotated as, if any. A member's
// pod that stops running or leaves its address has the views read again
// soon: the last ones still count it where it was.
func (w *Watch) onPod(p *corev1.Pod, deleted bool) {
	if p == nil {
		return
	}
	uid := string(p.UID)
	g, ok := annotatedPod(p)
	ok = ok && !deleted
	w.mu.Lock()
	was, had := w.pods[uid]
	if ok {
		if w.pods == nil {
			w.pods = map[string]annotated{}
		}
		w.pods[uid] = g
	} else {
		delete(w.pods, uid)
	}
	kick := w.kick
	w.mu.Unlock()
	if had && (!ok || was.ip != g.ip) {
		poke(kick)
	}
}

// poke asks the rounds reading on kick for one soon.
func poke(kick chan struct{}) {
	select {
	case kick <- struct{}{}:
	default:
	}
}

// run reads every interval until ctx ends, once every pod is listed,
// calling the OnChange function after each round; a kick brings the next
// round forward, at least minRound after the last one.
func (w *Watch) run(ctx context.Context, gen uint64, kick chan struct{}) {
	if !until(ctx, w.Pods.Listed) {
		return
	}
	interval := cmp.Or(w.Interval, DefaultInterval)
	for {
		if w.round(ctx, gen) {
			w.mu.Lock()
			fn := w.notify
			w.mu.Unlock()
			if fn != nil {
				fn()
			}
		}
		next := time.NewTimer(interval)
		select {
		case <-ctx.Done():
			next.Stop()
			return
		case <-next.C:
		case <-kick:
			next.Stop()
			select {
			case <-ctx.Done():
				return
			case <-time.After(minRound):
			}
		}
	}
}

// until polls cond until it holds (true) or ctx ends (false).
func until(ctx context.Context, cond func() bool) bool {
	t := time.NewTicker(50 * time.Millisecond)
	defer t.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
		}
	}
	return true
}

// round reads every cluster's view, at most maxReading at once, and keeps
// them. It reports whether it kept them: not when the start gen ended
// while it read.
func (w *Watch) round(ctx context.Context, gen uint64) bool {
	targets := w.targets()
	keys := make([]snapshot.GossipCluster, 0, len(targets))
	for k := range targets {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b snapshot.GossipCluster) int { return strings.Compare(clusterName(a), clusterName(b)) })
	views := make([]*snapshot.GossipView, len(keys))
	errs := make([]error, len(keys))
	sem := make(chan struct{}, maxReading)
	var wg sync.WaitGroup
	for i, k := range keys {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			views[i], _, _, errs[i] = w.readCluster(ctx, gen, k, targets[k])
		})
	}
	wg.Wait()
	if ctx.Err() != nil {
		return false
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.gen != gen {
		return false
	}
	if w.last == nil {
		w.last = map[snapshot.GossipCluster]snapshot.GossipView{}
	}
	var vs []snapshot.GossipView
	var es []string
	fresh := 0
	for i, k := range keys {
		if errs[i] == nil {
			fresh++
			w.last[k] = *views[i]
			vs = append(vs, *views[i])
			continue
		}
		es = append(es, errs[i].Error())
		v, ok := w.last[k]
		if !ok {
			v = snapshot.GossipView{System: k.System, Cluster: k.Cluster, From: "not read yet"}
		}
		v.Unread = errs[i].Error()
		vs = append(vs, v)
	}
	w.read, w.views, w.errs, w.fresh, w.changed = true, vs, es, fresh, true
	// Clusters no longer annotated are forgotten.
	for k := range w.listed {
		if _, ok := targets[k]; !ok {
			delete(w.listed, k)
		}
	}
	for k := range w.last {
		if _, ok := targets[k]; !ok {
			delete(w.last, k)
		}
	}
	return true
}

// readCluster reads the view of cluster k from the first of pods that
// answers, oldest first, trying at most maxTried. The answer must come
// from the pod asked: the view's own member is at the pod's address, and
// the pod still holds it alone once the answer is in. It returns the
// view, stamped, and the agent that gave it.
func (w *Watch) readCluster(ctx context.Context, gen uint64, k snapshot.GossipCluster, pods []annotated) (*snapshot.GossipView, Agent, annotated, error) {
	var errs []string
	tried := 0
	for _, p := range pods {
		if p.err != "" {
			errs = append(errs, fmt.Sprintf("pod %s: %s", p.ref(), p.err))
			continue
		}
		if tried == maxTried {
			break
		}
		tried++
		v, a, err := w.readPod(ctx, gen, p)
		if err != nil {
			errs = append(errs, fmt.Sprintf("pod %s: %v", p.ref(), err))
			continue
		}
		return v, a, p, nil
	}
	if len(errs) == 0 {
		errs = append(errs, "no pod to ask")
	}
	return nil, nil, annotated{}, fmt.Errorf("gossip cluster %s: %s", clusterName(k), strings.Join(errs, "; "))
}

func (w *Watch) readPod(ctx context.Context, gen uint64, p annotated) (*snapshot.GossipView, Agent, error) {
	ctx, cancel := context.WithTimeout(ctx, readTimeout)
	defer cancel()
	// The credential goes only to an address the pod holds alone, checked
	// before it is read and sent, not only once the answer is in: a pod of
	// another namespace (or a hostNetwork pod, at its node's address) that
	// shares the address would receive it.
	if err := w.still(p); err != nil {
		return nil, nil, fmt.Errorf("not asked: %w", err)
	}
	var a Agent
	var err error
	if agentOf := w.Agent; agentOf != nil {
		a, err = agentOf(p.member())
	} else if d := w.Clusters.Find(p.key); d != nil {
		a, err = d.agent(ctx, p.member(), w.Secrets)
	} else {
		err = fmt.Errorf("cluster %s is not declared", clusterName(p.key))
	}
	if err != nil {
		return nil, nil, err
	}
	v, err := a.Members(ctx)
	if err != nil {
		return nil, nil, err
	}
	if v.System != p.key.System {
		return nil, nil, fmt.Errorf("answered with a %s member list, not %s", v.System, p.key.System)
	}
	if v.Local != "" {
		i := slices.IndexFunc(v.Members, func(m snapshot.GossipMember) bool { return m.Name == v.Local })
		switch {
		case i < 0:
			return nil, nil, fmt.Errorf("the agent says it is %s, which its own member list does not name", v.Local)
		case v.Members[i].Addr != p.ip:
			return nil, nil, fmt.Errorf("the agent that answered is %s at %s, not at the pod's address %s: the view is not the pod's", v.Local, v.Members[i].Addr, p.ip)
		}
	}
	// Identity by address is what the gossip rules hunt: the pod must
	// still be the one holding its address, alone, now that the answer
	// is in.
	if err := w.still(p); err != nil {
		return nil, nil, err
	}
	v.Cluster = p.key.Cluster
	v.From = "pod " + p.ref() + " (" + v.From + ")"
	w.stamp(gen, p.key, v)
	return v, a, nil
}

// still returns nil when p is still annotated, at the same address, and
// the only pod reporting it, hostNetwork pods counted.
func (w *Watch) still(p annotated) error {
	w.mu.Lock()
	now, ok := w.pods[p.uid]
	w.mu.Unlock()
	if !ok || now.ip != p.ip {
		return errors.New("the pod left its address while it was asked")
	}
	if n := w.Pods.Reporting(p.ip); n > 1 {
		return fmt.Errorf("%d pods report %s (hostNetwork pods counted): an address is not an identity, so nothing is sent to it and no answer from it is taken for the pod's", n, p.ip)
	}
	return nil
}

// stamp gives the members of v whose view does not say when they went the
// time the watch first read them listed, and records the members first
// listed now. A read begun before the start gen ended stamps nothing: the
// times it would record are forgotten.
func (w *Watch) stamp(gen uint64, k snapshot.GossipCluster, v *snapshot.GossipView) {
	now := w.now()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.gen != gen {
		return
	}
	was := w.listed[k]
	seen := make(map[string]time.Time, len(v.Members))
	for i := range v.Members {
		m := &v.Members[i]
		t, ok := was[m.Name]
		if !ok {
			t = now
		}
		seen[m.Name] = t
		if m.Since.IsZero() && ok {
			m.Listed = t
		}
	}
	if w.listed == nil {
		w.listed = map[snapshot.GossipCluster]map[string]time.Time{}
	}
	w.listed[k] = seen
}

// targets returns the annotated pods of the declared clusters by cluster,
// oldest first (and those of a declared namespace whose annotations
// cannot be used, to say why).
func (w *Watch) targets() map[snapshot.GossipCluster][]annotated {
	w.mu.Lock()
	out := map[snapshot.GossipCluster][]annotated{}
	for _, g := range w.pods {
		if w.Clusters.covers(g) {
			out[g.key] = append(out[g.key], g)
		}
	}
	w.mu.Unlock()
	for _, ps := range out {
		slices.SortFunc(ps, func(a, b annotated) int {
			if c := a.since.Compare(b.since); c != 0 {
				return c
			}
			if c := strings.Compare(a.namespace, b.namespace); c != 0 {
				return c
			}
			return strings.Compare(a.name, b.name)
		})
	}
	return out
}
