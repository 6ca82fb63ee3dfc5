package controller

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/ghostwatch/ghostwatch/snapshot"
	sourcegossip "github.com/ghostwatch/ghostwatch/source/gossip"
)

// The annotations that name a pod's gossip agent. The leader reads, for
// each cluster they describe, one member's view at a time: the oldest
// running pod's, or the next one's when it cannot be read.
const (
	// AnnotationGossip is the agent's system: consul (its HTTP API),
	// serf (its RPC) or memberlist (the member list the ghostwatch/gossip
	// package serves).
	AnnotationGossip = "ghostwatch.io/gossip"
	// AnnotationGossipPort is the port of that API on the pod's IP:
	// default 8500 for consul and 7373 for serf; memberlist has none.
	AnnotationGossipPort = "ghostwatch.io/gossip-port"
	// AnnotationGossipCluster names the cluster, among the pods of one
	// namespace and system: default the system's name. Set it when a
	// namespace runs more than one cluster of a system.
	AnnotationGossipCluster = "ghostwatch.io/gossip-cluster"
	// AnnotationGossipScheme is http (default) or https, for consul and
	// memberlist.
	AnnotationGossipScheme = "ghostwatch.io/gossip-scheme"
)

// defaultGossipPort are the ports of the agents' APIs by default.
var defaultGossipPort = map[string]uint16{"consul": 8500, "serf": 7373}

// DefaultGossipInterval is how often the leader reads the gossip clusters'
// views by default: one request per cluster.
const DefaultGossipInterval = 30 * time.Second

// gossipTimeout bounds the reading of one member's view.
const gossipTimeout = 10 * time.Second

// gossipKey names one gossip cluster: its system and "namespace/name".
type gossipKey struct{ system, cluster string }

func (k gossipKey) String() string { return k.cluster + " (" + k.system + ")" }

// gossipPod is a running pod annotated as a member of a gossip cluster.
type gossipPod struct {
	uid, namespace, name string
	ip                   netip.Addr
	since                time.Time
	key                  gossipKey
	scheme               string
	port                 uint16
	// err says why the annotations cannot be used.
	err string
}

func (p gossipPod) ref() string { return p.namespace + "/" + p.name }

// GossipPod is a running pod annotated as a member of a gossip cluster, as
// Config.GossipAgent is given it.
type GossipPod struct {
	Namespace, Name, UID string
	// System is consul, serf or memberlist; Cluster "namespace/name".
	System, Cluster string
	// Addr is the agent's API: the pod's IP and annotated port.
	Addr netip.AddrPort
	// Scheme is http or https.
	Scheme string
}

func (p gossipPod) public() GossipPod {
	return GossipPod{Namespace: p.namespace, Name: p.name, UID: p.uid, System: p.key.system, Cluster: p.key.cluster,
		Addr: netip.AddrPortFrom(p.ip, p.port), Scheme: p.scheme}
}

// gossipPodOf returns the gossip member p is annotated as, and false when
// it is not annotated, or not running with an IP (nothing to ask).
func gossipPodOf(p *corev1.Pod) (gossipPod, bool) {
	system, ok := p.Annotations[AnnotationGossip]
	if !ok || p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
		return gossipPod{}, false
	}
	ip, err := netip.ParseAddr(p.Status.PodIP)
	if err != nil {
		return gossipPod{}, false
	}
	g := gossipPod{uid: string(p.UID), namespace: p.Namespace, name: p.Name, ip: ip.Unmap(), since: p.CreationTimestamp.Time}
	if p.Status.StartTime != nil {
		g.since = p.Status.StartTime.Time
	}
	cluster := firstNonEmpty(p.Annotations[AnnotationGossipCluster], system)
	g.key = gossipKey{system: system, cluster: p.Namespace + "/" + cluster}
	g.scheme = firstNonEmpty(p.Annotations[AnnotationGossipScheme], "http")
	var errs []string
	switch system {
	case "consul", "serf", "memberlist":
	default:
		errs = append(errs, fmt.Sprintf("%s: %q is not consul, serf or memberlist", AnnotationGossip, system))
	}
	if g.scheme != "http" && g.scheme != "https" {
		errs = append(errs, fmt.Sprintf("%s: %q is not http or https", AnnotationGossipScheme, g.scheme))
	}
	switch s, ok := p.Annotations[AnnotationGossipPort]; {
	case ok:
		n, err := strconv.ParseUint(s, 10, 16)
		if err != nil || n == 0 {
			errs = append(errs, fmt.Sprintf("%s: %q is not a port", AnnotationGossipPort, s))
		}
		g.port = uint16(n)
	default:
		if g.port = defaultGossipPort[system]; g.port == 0 {
			errs = append(errs, fmt.Sprintf("%s: none given, and %s has no default port", AnnotationGossipPort, system))
		}
	}
	g.err = strings.Join(errs, "; ")
	return g, true
}

func firstNonEmpty(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}

// newGossipAgent returns the API of p's gossip agent, as the controller's
// environment configures it: CONSUL_HTTP_TOKEN (or _FILE) and
// CONSUL_CACERT for Consul, SERF_RPC_AUTH for Serf.
func newGossipAgent(p gossipPod) (sourcegossip.Agent, error) {
	hostPort := netip.AddrPortFrom(p.ip, p.port).String()
	switch p.key.system {
	case "consul":
		return sourcegossip.ConsulFromEnv(p.scheme + "://" + hostPort)
	case "serf":
		return sourcegossip.SerfFromEnv(hostPort, ""), nil
	case "memberlist":
		return &sourcegossip.Endpoint{URL: p.scheme + "://" + hostPort + sourcegossip.MemberlistPath}, nil
	}
	return nil, fmt.Errorf("no reader of %s", p.key.system)
}

// forceLeaver is an agent that can force a member out of its cluster.
type forceLeaver interface {
	ForceLeave(ctx context.Context, node string) error
}

// gossipReader reads the views of the gossip clusters the annotated pods
// describe, one member's at a time, and keeps the last round's.
type gossipReader struct {
	cl    *cluster
	agent func(gossipPod) (sourcegossip.Agent, error)
	now   func() time.Time
	// kick asks for a round before the interval ends: a member's pod
	// went, and the views read before say it is there.
	kick chan struct{}

	mu sync.Mutex
	// read is true once a round has ended; views are its views, by
	// cluster, a cluster it could not read with its last view (Unread
	// says why); errs why those were not read; fresh how many were.
	read  bool
	views []snapshot.GossipView
	errs  []string
	fresh int
	// last is each cluster's last view read.
	last map[gossipKey]snapshot.GossipView
	// listed is, by cluster and member, when the member was first read
	// listed, for views that do not say when a member went.
	listed map[gossipKey]map[string]time.Time
}

func newGossipReader(cl *cluster, agent func(gossipPod) (sourcegossip.Agent, error), now func() time.Time) *gossipReader {
	if agent == nil {
		agent = newGossipAgent
	}
	return &gossipReader{cl: cl, agent: agent, now: now, kick: make(chan struct{}, 1), listed: map[gossipKey]map[string]time.Time{},
		last: map[gossipKey]snapshot.GossipView{}}
}

// round reads every cluster's view, at most 8 at once, and keeps them.
func (r *gossipReader) round(ctx context.Context) {
	targets := r.cl.gossipTargets()
	keys := make([]gossipKey, 0, len(targets))
	for k := range targets {
		keys = append(keys, k)
	}
	slices.SortFunc(keys, func(a, b gossipKey) int { return strings.Compare(a.String(), b.String()) })
	views := make([]*snapshot.GossipView, len(keys))
	errs := make([]error, len(keys))
	sem := make(chan struct{}, 8)
	var wg sync.WaitGroup
	for i, k := range keys {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			views[i], _, errs[i] = r.readCluster(ctx, k, targets[k])
		}()
	}
	wg.Wait()
	if ctx.Err() != nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	var vs []snapshot.GossipView
	var es []string
	fresh := 0
	for i, k := range keys {
		if errs[i] == nil {
			fresh++
			r.last[k] = *views[i]
			vs = append(vs, *views[i])
			continue
		}
		es = append(es, errs[i].Error())
		v, ok := r.last[k]
		if !ok {
			v = snapshot.GossipView{System: k.system, Cluster: k.cluster, From: "not read yet"}
		}
		v.Unread = errs[i].Error()
		vs = append(vs, v)
	}
	r.read, r.views, r.errs, r.fresh = true, vs, es, fresh
	// Clusters no longer annotated are forgotten.
	for k := range r.listed {
		if _, ok := targets[k]; !ok {
			delete(r.listed, k)
		}
	}
	for k := range r.last {
		if _, ok := targets[k]; !ok {
			delete(r.last, k)
		}
	}
}

// readCluster reads the view of cluster k from the first of pods that
// answers, oldest first, trying at most three. The answer must come from
// the pod asked: the view's own member is at the pod's address, and the
// pod still holds it alone once the answer is in. It returns the view,
// stamped, and the agent that gave it.
func (r *gossipReader) readCluster(ctx context.Context, k gossipKey, pods []gossipPod) (*snapshot.GossipView, sourcegossip.Agent, error) {
	var errs []string
	tried := 0
	for _, p := range pods {
		if p.err != "" {
			errs = append(errs, fmt.Sprintf("pod %s: %s", p.ref(), p.err))
			continue
		}
		if tried == 3 {
			break
		}
		tried++
		v, a, err := r.readPod(ctx, p)
		if err != nil {
			errs = append(errs, fmt.Sprintf("pod %s: %v", p.ref(), err))
			continue
		}
		return v, a, nil
	}
	if len(errs) == 0 {
		errs = append(errs, "no pod to ask")
	}
	return nil, nil, fmt.Errorf("gossip cluster %s: %s", k, strings.Join(errs, "; "))
}

func (r *gossipReader) readPod(ctx context.Context, p gossipPod) (*snapshot.GossipView, sourcegossip.Agent, error) {
	a, err := r.agent(p)
	if err != nil {
		return nil, nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, gossipTimeout)
	defer cancel()
	v, err := a.Members(ctx)
	if err != nil {
		return nil, nil, err
	}
	if v.System != p.key.system {
		return nil, nil, fmt.Errorf("answered with a %s member list, not %s", v.System, p.key.system)
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
	// Identity by address is what this rule hunts: the pod must still
	// be the one holding its address, alone, now that the answer is in.
	if err := r.cl.stillGossipPod(p); err != nil {
		return nil, nil, err
	}
	v.Cluster = p.key.cluster
	v.From = "pod " + p.ref() + " (" + v.From + ")"
	r.stamp(p.key, v)
	return v, a, nil
}

// stamp gives the members of v whose view does not say when they went the
// time ghostwatch first read them listed, and records the members first
// listed now.
func (r *gossipReader) stamp(k gossipKey, v *snapshot.GossipView) {
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	was := r.listed[k]
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
	r.listed[k] = seen
}

// snapshot returns the gossip source's status and the views of the last
// round. A cluster that could not be read is judged on its last view
// (Unread says why): one cluster's outage does not stop the others'
// judgement, nor read as "no ghost" in its own. When no cluster could be
// read, the source is not ready.
func (r *gossipReader) snapshot() (snapshot.SourceStatus, *snapshot.Gossip) {
	st := snapshot.SourceStatus{Name: sourcegossip.Name, Status: snapshot.StatusOK}
	n := len(r.cl.gossipTargets())
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case !r.read:
		st.Status, st.Detail = snapshot.StatusError, "the gossip clusters' views were not read yet"
		return st, nil
	case n == 0 && len(r.views) == 0 && len(r.errs) == 0:
		st.Status, st.Detail = snapshot.StatusUnsupported, "no running pod is annotated "+AnnotationGossip
		return st, nil
	case r.fresh == 0 && len(r.errs) > 0:
		st.Status, st.Detail = snapshot.StatusError, strings.Join(r.errs, "; ")
	default:
		members := 0
		for _, v := range r.views {
			members += len(v.Members)
		}
		st.Detail = fmt.Sprintf("%d clusters, %d members", len(r.views), members)
		if len(r.errs) > 0 {
			st.Detail += fmt.Sprintf("; %d not read again, judged on their last view: %s", len(r.errs), strings.Join(r.errs, "; "))
		}
	}
	return st, &snapshot.Gossip{Views: slices.Clone(r.views)}
}

// hasRead reports whether a round has ended.
func (r *gossipReader) hasRead() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.read
}

// lastViews returns the views of the last round.
func (r *gossipReader) lastViews() []snapshot.GossipView {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.views
}

// minGossipRound is the least time between two rounds a kick asks for: a
// rolling restart of a cluster's pods costs at most one read of each
// cluster a second.
const minGossipRound = time.Second

// run reads every interval until ctx ends, calling changed after each
// round; a kick brings the next round forward, at least minGossipRound
// after the last one.
func (r *gossipReader) run(ctx context.Context, interval time.Duration, changed func()) {
	for {
		r.round(ctx)
		changed()
		next := time.NewTimer(interval)
		select {
		case <-ctx.Done():
			next.Stop()
			return
		case <-next.C:
		case <-r.kick:
			next.Stop()
			select {
			case <-ctx.Done():
				return
			case <-time.After(minGossipRound):
			}
		}
	}
}

// poke asks for a round soon.
func (r *gossipReader) poke() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

// setGossipPod records the gossip member p is annotated as, if any. A
// member's pod that stops running or leaves its address has the views
// read again soon: the last ones still count it where it was.
func (c *cluster) setGossipPod(p *corev1.Pod) {
	g, ok := gossipPodOf(p)
	c.gossipMu.Lock()
	was, had := c.gossip[string(p.UID)]
	if !ok {
		delete(c.gossip, string(p.UID))
	} else {
		if c.gossip == nil {
			c.gossip = map[string]gossipPod{}
		}
		c.gossip[g.uid] = g
	}
	c.gossipMu.Unlock()
	if had && (!ok || was.ip != g.ip) && c.reader != nil {
		c.reader.poke()
	}
}

// deleteGossipPod forgets the pod with the given UID.
func (c *cluster) deleteGossipPod(uid string) {
	c.gossipMu.Lock()
	_, had := c.gossip[uid]
	delete(c.gossip, uid)
	c.gossipMu.Unlock()
	if had && c.reader != nil {
		c.reader.poke()
	}
}

// gossipTargets returns the annotated pods by cluster, oldest first.
func (c *cluster) gossipTargets() map[gossipKey][]gossipPod {
	c.gossipMu.Lock()
	out := map[gossipKey][]gossipPod{}
	for _, g := range c.gossip {
		out[g.key] = append(out[g.key], g)
	}
	c.gossipMu.Unlock()
	for _, ps := range out {
		slices.SortFunc(ps, func(a, b gossipPod) int {
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

// stillGossipPod returns nil when p is still annotated, at the same
// address, and the only pod holding it.
func (c *cluster) stillGossipPod(p gossipPod) error {
	c.gossipMu.Lock()
	now, ok := c.gossip[p.uid]
	c.gossipMu.Unlock()
	if !ok || now.ip != p.ip {
		return errors.New("the pod left its address while it was asked")
	}
	c.mu.Lock()
	n := c.idx.Holders(p.ip)
	c.mu.Unlock()
	if n > 1 {
		return fmt.Errorf("%d pods hold %s (duplicate-pod-ip): whose view answered is not known", n, p.ip)
	}
	return nil
}
