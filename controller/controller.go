// Package controller is ghostwatch's cluster-wide watcher: one leader,
// elected on a Lease, watches every Pod, every Node and, where the API
// server serves it, Calico's IPAM ledger, and runs the cluster rules after
// each burst of changes, reporting findings as metrics, logs and Events.
// Node agents never watch every Pod for this: their cost to the API server
// is kube-proxy's, the controller's is one watcher's.
//
// It is read-only: it writes nothing but its Lease and Events.
package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"

	"github.com/ghostwatch/ghostwatch/finding"
	"github.com/ghostwatch/ghostwatch/remedy"
	"github.com/ghostwatch/ghostwatch/rule"
	"github.com/ghostwatch/ghostwatch/snapshot"
	sourcegossip "github.com/ghostwatch/ghostwatch/source/gossip"
	"github.com/ghostwatch/ghostwatch/source/informer"
)

// Config is what the controller needs. Zero durations take the defaults
// below.
type Config struct {
	// Client watches Pods and Nodes, holds the Lease, and asks discovery
	// whether the API server serves Calico's ledger.
	Client kubernetes.Interface
	// Dynamic watches Calico's ledger (crd.projectcalico.org/v1).
	Dynamic dynamic.Interface
	// Identity names this process in the Lease (its pod name).
	Identity string
	// LeaseNamespace and LeaseName name the Lease the replicas elect a
	// leader on.
	LeaseNamespace, LeaseName string
	// LeaseDuration, RenewDeadline and RetryPeriod are client-go's leader
	// election timings. Defaults 15s, 10s, 2s.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// Rules are the rules it runs: the cluster rules whose sources it
	// reads (Rules). duplicate-pod-ip is judged from an index of pod IPs
	// kept current per event; a rule with Ledgers judges the ledgers the
	// controller reads (Calico's).
	Rules []rule.Rule
	// Debounce gathers a burst of events into one pass. A pass also
	// waits at least as long as the last one took, so that passes over
	// a large cluster in constant churn take at most half the leader's
	// time. Default 100ms.
	Debounce time.Duration
	// Rediscover is how often the leader asks again whether the API
	// server serves Calico's ledger while it does not (Calico installed
	// after the leader started). Default 1m: discovery is one request.
	Rediscover time.Duration
	// GossipInterval is how often the leader reads the member list of
	// each gossip cluster whose pods are annotated ghostwatch.io/gossip:
	// one request per cluster. Default DefaultGossipInterval.
	GossipInterval time.Duration
	// GossipAgent returns the API of an annotated pod's gossip agent; nil
	// means Consul's HTTP API, Serf's RPC or the ghostwatch/gossip
	// package's member list at the pod's address, configured from the
	// environment (CONSUL_HTTP_TOKEN, CONSUL_CACERT, SERF_RPC_AUTH).
	GossipAgent func(GossipPod) (sourcegossip.Agent, error)
	// Metrics, when set, are updated after every pass.
	Metrics *Metrics
	// Events, when set, receives an Event on every object a finding
	// concerns, when the finding first appears.
	Events record.EventRecorder
	// Log receives structured logs; nil discards them.
	Log *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Status is the controller's state for /readyz and logs.
type Status struct {
	// Leading is true while this replica holds the Lease; Leader names the
	// holder as last seen.
	Leading bool
	Leader  string
	// Synced is true once the leader's caches listed every Pod and Node.
	Synced bool
	// LastPass is when the rules last ran; Findings how many findings
	// stand: what the rules found, and for a rule skipped because a source
	// is not ready, what it found when it last ran.
	LastPass time.Time
	Findings int
	// Skipped are the rules the last pass did not run, and why.
	Skipped []finding.Skipped
}

// Controller is the cluster-wide watcher.
type Controller struct {
	cfg Config

	mu     sync.Mutex
	status Status
	// reported are the findings of the last pass, by key: a finding gets
	// its Events when it first appears, not at every pass.
	reported map[string]bool
	// last are the findings of each rule when it last ran, by rule ID;
	// skipped the rules the last pass skipped.
	last    map[string][]finding.Finding
	skipped map[string]finding.Skipped
	// cluster is what the leader watches, while it leads.
	cluster *cluster
	// remedies are the remedies EnableRemedies turned on.
	remedies []*remedy.Remedy
}

// New returns a controller for cfg.
func New(cfg Config) *Controller {
	if cfg.LeaseDuration == 0 {
		cfg.LeaseDuration = 15 * time.Second
	}
	if cfg.RenewDeadline == 0 {
		cfg.RenewDeadline = 10 * time.Second
	}
	if cfg.RetryPeriod == 0 {
		cfg.RetryPeriod = 2 * time.Second
	}
	if cfg.Debounce == 0 {
		cfg.Debounce = 100 * time.Millisecond
	}
	if cfg.Rediscover == 0 {
		cfg.Rediscover = time.Minute
	}
	if cfg.GossipInterval == 0 {
		cfg.GossipInterval = DefaultGossipInterval
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Controller{cfg: cfg, reported: map[string]bool{}, last: map[string][]finding.Finding{}, skipped: map[string]finding.Skipped{}}
}

// Status returns the controller's state.
func (c *Controller) Status() Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.status
}

// ErrLostLease is returned by Run when this replica lost the Lease while
// leading: the process should exit, and its restart campaigns afresh with
// empty caches.
var ErrLostLease = errors.New("lost the leader Lease")

// Run campaigns for the Lease and, while it holds it, watches the cluster
// and runs the rules. It returns nil when ctx ends, ErrLostLease when the
// Lease was lost.
func (c *Controller) Run(ctx context.Context) error {
	cfg := c.cfg
	if cfg.Client == nil || cfg.Dynamic == nil || cfg.Identity == "" || cfg.LeaseNamespace == "" || cfg.LeaseName == "" {
		return errors.New("controller: a client, a dynamic client, an identity and a Lease namespace and name are required")
	}
	lost := false
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: cfg.LeaseNamespace, Name: cfg.LeaseName},
			Client:     cfg.Client.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: cfg.Identity},
		},
		LeaseDuration:   cfg.LeaseDuration,
		RenewDeadline:   cfg.RenewDeadline,
		RetryPeriod:     cfg.RetryPeriod,
		ReleaseOnCancel: true,
		Name:            cfg.LeaseName,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				cfg.Log.Info("leading: watching the cluster", "identity", cfg.Identity, "lease", cfg.LeaseNamespace+"/"+cfg.LeaseName)
				c.setLeading(true)
				c.lead(ctx)
			},
			OnStoppedLeading: func() {
				if ctx.Err() == nil {
					lost = true
				}
				c.setLeading(false)
			},
			OnNewLeader: func(id string) {
				c.mu.Lock()
				c.status.Leader = id
				c.mu.Unlock()
				if id != cfg.Identity {
					cfg.Log.Info("standing by", "leader", id)
				}
			},
		},
	})
	if err != nil {
		return fmt.Errorf("controller: %w", err)
	}
	le.Run(ctx)
	if lost {
		return ErrLostLease
	}
	return nil
}

func (c *Controller) setLeading(on bool) {
	c.mu.Lock()
	c.status.Leading = on
	if on {
		c.status.Leader = c.cfg.Identity
	} else {
		c.status.Synced = false
	}
	c.mu.Unlock()
	if m := c.cfg.Metrics; m != nil {
		v := 0.0
		if on {
			v = 1
		}
		m.Leader.Set(v)
	}
}

// lead watches the cluster and runs the rules after each burst of changes,
// until ctx ends.
func (c *Controller) lead(ctx context.Context) {
	cfg := c.cfg
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	changed := make(chan struct{}, 1)
	poke := func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	run := func(w *informer.Informer) {
		wg.Add(2)
		go func() {
			defer wg.Done()
			w.Run(ctx)
		}()
		// A resource listed empty has no event to announce it.
		go func() {
			defer wg.Done()
			if until(ctx, w.HasSynced) {
				poke()
			}
		}()
	}
	cl := newCluster(cfg.Client, poke, run, cfg.Now)
	var agent func(gossipPod) (sourcegossip.Agent, error)
	if cfg.GossipAgent != nil {
		agent = func(p gossipPod) (sourcegossip.Agent, error) { return cfg.GossipAgent(p.public()) }
	}
	cl.reader = newGossipReader(cl, agent, cfg.Now)
	if err := cl.start(); err != nil {
		cfg.Log.Error("watching the cluster", "err", err)
		return
	}
	c.mu.Lock()
	c.cluster = cl
	c.mu.Unlock()
	defer func() {
		c.mu.Lock()
		c.cluster = nil
		c.mu.Unlock()
	}()
	// The gossip clusters are read once the pods are listed: the pods
	// say where they are.
	wg.Add(1)
	go func() {
		defer wg.Done()
		if until(ctx, cl.pods.HasSynced) {
			cl.reader.run(ctx, cfg.GossipInterval, poke)
		}
	}()
	wg.Add(1)
	go func() {
		defer wg.Done()
		for !c.discoverCalico(cl) {
			select {
			case <-ctx.Done():
				return
			case <-time.After(cfg.Rediscover):
			}
		}
	}()
	// The first pass waits for discovery to answer and for every informer
	// to list its resource or to fail: rules are not reported skipped
	// while their caches fill.
	if !until(ctx, cl.settled) {
		return
	}
	c.mu.Lock()
	c.status.Synced = true
	c.mu.Unlock()
	cl.mu.Lock()
	pods := len(cl.idx.Pods())
	cl.mu.Unlock()
	cfg.Log.Info("cluster listed", "pods", pods, "nodes", len(cl.nodes.Store().ListKeys()))
	rules := c.cfg.Rules
	for {
		took, wait := c.judge(ctx, cl, rules)
		// A finding waiting out a remedy's grace period is looked at
		// again when it is due, changes or not.
		var due <-chan time.Time
		if wait > 0 {
			due = time.After(wait)
		}
		select {
		case <-ctx.Done():
			return
		case <-changed:
		case <-due:
		}
		// Gather the rest of the burst.
		select {
		case <-ctx.Done():
			return
		case <-time.After(max(cfg.Debounce, took)):
		}
	}
}

// discoverCalico asks whether the API server serves Calico's ledger, and
// watches it if so; it reports whether it does.
func (c *Controller) discoverCalico(cl *cluster) bool {
	if !cl.discoverCalico(c.cfg.Client.Discovery(), c.cfg.Dynamic) {
		return false
	}
	c.cfg.Log.Info("watching Calico's IPAM ledger")
	return true
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

// judge runs one pass: a snapshot of what the leader knows, the rules on
// it, the findings published, and the remedies on them. It returns how
// long the snapshot and the rules took, and when a remedy wants the next
// pass (0: no sooner than changes come).
func (c *Controller) judge(ctx context.Context, cl *cluster, rules []rule.Rule) (took, wait time.Duration) {
	start := time.Now()
	// The snapshot's pods are the index's: events wait for the pass.
	cl.mu.Lock()
	s := cl.snapshot(c.cfg.Now())
	s.BeginPass()
	fs, skipped := rule.Run(s, rules)
	s.EndPass()
	pods := cl.idx.Len()
	// The remedies read the snapshot's sources only: its pods may change
	// once the lock is let go.
	s.Kube = nil
	cl.mu.Unlock()
	took = time.Since(start)
	if m := c.cfg.Metrics; m != nil {
		m.Gossip(s)
	}
	c.publish(s.Sources, fs, skipped, pods, took)
	if len(c.remedies) > 0 {
		wait = c.remedy(ctx, s, fs)
	}
	return took, wait
}

// publish publishes a pass's findings: metrics, and for each finding that
// was not in the last pass a log line and an Event on every object it
// concerns. A rule skipped because a source it reads is not ready (an
// informer not listed, a watch failing) has not judged: what it found when
// it last ran stands, in the metrics too, rather than read as "no ghost".
// A rule whose ledger does not exist here (not applicable) has nothing to
// find.
func (c *Controller) publish(sources []snapshot.SourceStatus, fs []finding.Finding, skipped []finding.Skipped, pods int, took time.Duration) {
	cfg := c.cfg
	found := map[string][]finding.Finding{}
	for _, f := range fs {
		found[f.Rule] = append(found[f.Rule], f)
	}
	skip := map[string]finding.Skipped{}
	for _, sk := range skipped {
		skip[sk.Rule] = sk
	}
	last := map[string][]finding.Finding{}
	var all []finding.Finding
	for _, r := range cfg.Rules {
		id := r.Info().ID
		switch sk, ok := skip[id]; {
		case !ok:
			last[id] = found[id]
		case !sk.NotApplicable:
			last[id] = c.last[id]
		}
		all = append(all, last[id]...)
	}
	c.logSkipped(skip)
	if m := cfg.Metrics; m != nil {
		m.Sources(sources)
		m.Publish(all)
		m.Pods.Set(float64(pods))
		m.PassSeconds.Set(took.Seconds())
		m.Passes.Inc()
	}
	now := map[string]bool{}
	for _, f := range all {
		k := key(f)
		now[k] = true
		if c.reported[k] {
			continue
		}
		cfg.Log.Warn("finding", "rule", f.Rule, "severity", f.Severity.String(), "ip", f.Subject.IP, "message", f.Message)
		if cfg.Events != nil {
			reason := EventReason(f.Rule)
			typ := corev1.EventTypeWarning
			if f.Severity == finding.Info {
				typ = corev1.EventTypeNormal
			}
			for _, o := range f.Concerns {
				ref := &corev1.ObjectReference{Kind: o.Kind, APIVersion: "v1", Namespace: o.Namespace, Name: o.Name, UID: types.UID(o.UID)}
				cfg.Events.Event(ref, typ, reason, f.Message)
			}
		}
	}
	c.reported, c.last = now, last
	c.mu.Lock()
	c.status.LastPass, c.status.Findings, c.status.Skipped = cfg.Now(), len(all), skipped
	c.mu.Unlock()
}

// logSkipped logs each rule that starts or stops being skipped, or is
// skipped for another reason than in the last pass.
func (c *Controller) logSkipped(now map[string]finding.Skipped) {
	log := c.cfg.Log
	for _, id := range slices.Sorted(maps.Keys(now)) {
		sk := now[id]
		if was, ok := c.skipped[id]; ok && was == sk {
			continue
		}
		if sk.NotApplicable {
			log.Info("rule not applicable: the ledger it judges does not exist in this cluster", "rule", id, "reason", sk.Reason)
		} else {
			log.Warn("rule skipped: a source it reads is not ready; what it last found stands", "rule", id, "reason", sk.Reason)
		}
	}
	for _, id := range slices.Sorted(maps.Keys(c.skipped)) {
		if _, ok := now[id]; !ok {
			log.Info("rule runs again: its sources are ready", "rule", id)
		}
	}
	c.skipped = now
}

// key identifies a finding across passes: its rule, subject and the
// objects it concerns.
func key(f finding.Finding) string {
	var b strings.Builder
	b.WriteString(f.Rule + "|" + f.Severity.String() + "|" + f.Subject.IP)
	var uids []string
	for _, o := range f.Concerns {
		uids = append(uids, o.Kind+"/"+o.Namespace+"/"+o.Name+"/"+o.UID)
	}
	sort.Strings(uids)
	b.WriteString("|" + strings.Join(uids, ","))
	return b.String()
}

// EventReason is a rule's Event reason: its ID in CamelCase, "IP" kept
// upper case ("duplicate-pod-ip" is "DuplicatePodIP").
func EventReason(id string) string {
	var b strings.Builder
	for _, w := range strings.Split(id, "-") {
		switch w {
		case "ip", "ipam":
			b.WriteString(strings.ToUpper(w))
		default:
			if w != "" {
				b.WriteString(strings.ToUpper(w[:1]) + w[1:])
			}
		}
	}
	return b.String()
}
