// Package controller is ghostwatch's cluster-wide watcher: one leader,
// elected on a Lease, starts the live sources it is given (the cluster's
// Pods and Nodes, Calico's IPAM ledger, the gossip clusters' views), runs
// the cluster rules after each burst of changes, and reports findings as
// metrics, logs and Events, and, when a remedy is turned on, acts on them.
// It owns no ledger: each source watches its own. Node agents never watch
// every Pod for this: their cost to the API server is kube-proxy's, the
// controller's is one watcher's.
//
// Unless a remedy is turned on it is read-only: it writes nothing but its
// Lease and Events.
package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"

	"github.com/ghostwatch/ghostwatch/audit"
	"github.com/ghostwatch/ghostwatch/finding"
	"github.com/ghostwatch/ghostwatch/remedy"
	"github.com/ghostwatch/ghostwatch/rule"
	"github.com/ghostwatch/ghostwatch/sink"
	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source"
)

// Config is what the controller needs. Zero durations take the defaults
// below.
type Config struct {
	// Client holds the Lease.
	Client kubernetes.Interface
	// Identity names this process in the Lease (its pod name).
	Identity string
	// LeaseNamespace and LeaseName name the Lease the replicas elect a
	// leader on.
	LeaseNamespace, LeaseName string
	// LeaseDuration, RenewDeadline and RetryPeriod are client-go's leader
	// election timings. Defaults 15s, 10s, 2s.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// Sources are what the leader reads, in order, each seeing what the
	// earlier ones collected. Those that are source.Live are started
	// each time this replica leads, afresh, last to first (one that
	// listens to an earlier one listens before it starts), and stopped
	// when it stops;
	// their changes drive the passes, and the first pass waits for those
	// that are source.Settler to settle. A source.Lender's records are
	// returned once the rules are done with them; a source.Fresher
	// re-reads what a remedy's last re-check names.
	Sources []source.Source
	// Rules are the rules it runs: the cluster rules whose sources it
	// reads. A rule runs in a pass when every source it reads collected
	// completely; otherwise what it found when it last ran stands.
	Rules []rule.Rule
	// Remedies are the remedies turned on (see remedy.Build); none only
	// reports. The controller sets their Recheck.
	Remedies []*remedy.Remedy
	// Debounce gathers a burst of events into one pass. A pass also
	// waits at least as long as the last one took, so that passes over
	// a large cluster in constant churn take at most half the leader's
	// time. Default 100ms.
	Debounce time.Duration
	// Metrics, when set, are updated after every pass.
	Metrics *Metrics
	// Events, when set, receives an Event on every object a finding
	// concerns, when the finding first appears, and for every action.
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
	// Unreachable says why the API server could not be reached, while the
	// replica waits for it before campaigning for the Lease (at start, and
	// after it lost the Lease).
	Unreachable string
	// Degraded, while leading, says why the last pass could not trust
	// the cluster's objects (a watch failing, the API server silent): the
	// rules that read them were skipped, and no remedy acted.
	Degraded string
}

// maxUnreachableRetry bounds the wait between two tries of an API server
// that could not be reached at start.
const maxUnreachableRetry = 30 * time.Second

// waitForAPIServer asks the API server its version until it answers
// (true), or ctx ends (false); meanwhile Status().Unreachable says why not.
func (c *Controller) waitForAPIServer(ctx context.Context) bool {
	wait := time.Second
	for {
		err := c.reach(ctx)
		if err == nil {
			c.mu.Lock()
			was := c.status.Unreachable
			c.status.Unreachable = ""
			c.mu.Unlock()
			if was != "" {
				c.cfg.Log.Info("the API server answers: campaigning for the Lease")
			}
			return true
		}
		if ctx.Err() != nil {
			return false
		}
		why := fmt.Sprintf("the API server cannot be reached: %v; trying again in %s", err, wait)
		c.mu.Lock()
		c.status.Unreachable = why
		c.mu.Unlock()
		c.cfg.Log.Warn("not ready: the API server cannot be reached; trying again", "err", err, "in", wait)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
		wait = min(2*wait, maxUnreachableRetry)
	}
}

// pulseInterval is how often a replica asks the API server whether it
// answers, once it has answered: a hung server keeps connections open and
// fails nothing, so only asking tells.
const pulseInterval = 5 * time.Second

// pulse asks the API server its version every pulseInterval until ctx
// ends, keeping Status.Unreachable: set, saying since when, while it does
// not answer within pulseInterval; cleared once it does.
func (c *Controller) pulse(ctx context.Context) {
	t := time.NewTicker(pulseInterval)
	defer t.Stop()
	var silentSince time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		rctx, cancel := context.WithTimeout(ctx, pulseInterval)
		err := c.reach(rctx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		c.mu.Lock()
		switch {
		case err == nil:
			silentSince = time.Time{}
			c.status.Unreachable = ""
		default:
			if silentSince.IsZero() {
				silentSince = c.cfg.Now().Add(-pulseInterval)
			}
			c.status.Unreachable = fmt.Sprintf("the API server has not answered for %s: %v", c.cfg.Now().Sub(silentSince).Round(time.Second), err)
		}
		c.mu.Unlock()
	}
}

// reach asks the API server its version, within 10s.
func (c *Controller) reach(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		// Asked with ctx, so that a hung server's request ends with it
		// rather than pile up; a fake client has no REST client.
		if rc := c.cfg.Client.Discovery().RESTClient(); rc != nil && !(reflect.ValueOf(rc).Kind() == reflect.Pointer && reflect.ValueOf(rc).IsNil()) {
			done <- rc.Get().AbsPath("/version").Do(ctx).Error()
			return
		}
		_, err := c.cfg.Client.Discovery().ServerVersion()
		done <- err
	}()
	t := time.NewTimer(10 * time.Second)
	defer t.Stop()
	select {
	case err := <-done:
		return err
	case <-t.C:
		return errors.New("no answer within 10s")
	case <-ctx.Done():
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return errors.New("no answer in time")
		}
		return ctx.Err()
	}
}

// Controller is the cluster-wide watcher.
type Controller struct {
	cfg    Config
	events *sink.Events
	live   []source.Live

	mu     sync.Mutex
	status Status
	// reported are the findings of the last pass, by key: a finding gets
	// its Events when it first appears, not at every pass.
	reported map[string]bool
	// last are the findings of each rule when it last ran, by rule ID;
	// skipped the rules the last pass skipped.
	last    map[string][]finding.Finding
	skipped map[string]finding.Skipped
	// pass is the snapshot of the last pass while this replica leads
	// (without the records a source lent it), for the re-checks; nil
	// otherwise.
	pass *snapshot.Snapshot
	// standing are the findings of the last pass, as published, while
	// this replica leads.
	standing []finding.Finding
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
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	c := &Controller{cfg: cfg, reported: map[string]bool{}, last: map[string][]finding.Finding{}, skipped: map[string]finding.Skipped{}}
	if cfg.Events != nil {
		c.events = &sink.Events{Recorder: cfg.Events}
	}
	for _, src := range cfg.Sources {
		if l, ok := src.(source.Live); ok {
			c.live = append(c.live, l)
		}
	}
	for _, rem := range cfg.Remedies {
		if rem.Recheck == nil {
			r, _ := rule.Find(cfg.Rules, rem.Rule.ID)
			rem.Recheck = audit.Recheck(r, cfg.Sources, c.lastPass, cfg.Now)
		}
	}
	return c
}

// At says what this replica knows of ip: while it leads, the findings
// standing that name it and the gossip members at it in the last pass's
// views; while it stands by, that it judges nothing.
func (c *Controller) At(ip netip.Addr) sink.FindingsAt {
	c.mu.Lock()
	defer c.mu.Unlock()
	at := sink.NewFindingsAt(c.cfg.Identity, c.status.Leading, c.cfg.Rules, c.standing, ip)
	if c.status.Leading && c.pass != nil {
		at.Members = sink.MembersAt(c.pass.Gossip, ip)
	}
	return at
}

// Gossip returns the gossip clusters' views of the last pass while this
// replica leads (nil when it does not, or read none), each view's address
// as its source reported it (redacted).
func (c *Controller) Gossip() *snapshot.Gossip {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.status.Leading || c.pass == nil || c.pass.Gossip == nil {
		return nil
	}
	g := *c.pass.Gossip
	g.Views = slices.Clone(g.Views)
	return &g
}

// lastPass returns the snapshot of the last pass while this replica
// leads, nil otherwise.
func (c *Controller) lastPass() *snapshot.Snapshot {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pass
}

// Status returns the controller's state.
func (c *Controller) Status() Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.status
}

// Run campaigns for the Lease and, while it holds it, watches the cluster
// and runs the rules. A replica that loses the Lease (an API server that
// stopped answering, a network partition) stops watching, drops what it
// held and every grace period, waits for the API server to answer (not
// ready meanwhile, saying why) and campaigns again: it stays up rather
// than exit into a crash loop that says less. It returns nil when ctx
// ends.
func (c *Controller) Run(ctx context.Context) error {
	cfg := c.cfg
	if cfg.Client == nil || cfg.Identity == "" || cfg.LeaseNamespace == "" || cfg.LeaseName == "" {
		return errors.New("controller: a client, an identity and a Lease namespace and name are required")
	}
	if len(cfg.Sources) == 0 {
		return errors.New("controller: no sources to read")
	}
	if !c.waitForAPIServer(ctx) {
		return nil
	}
	// A standby, too, says when the API server stops answering.
	go c.pulse(ctx)
	for {
		// An API server it cannot reach leaves the replica up, not ready,
		// saying why and trying again.
		if !c.waitForAPIServer(ctx) {
			return nil
		}
		if err := c.campaign(ctx); err != nil {
			return err
		}
		if ctx.Err() != nil {
			return nil
		}
		cfg.Log.Warn("lost the leader Lease: standing by, and campaigning again once the API server answers")
	}
}

// campaign runs one leader election until this replica loses the Lease
// it held, or ctx ends.
func (c *Controller) campaign(ctx context.Context) error {
	cfg := c.cfg
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
				// Evidence held under another leader, or under this one
				// before it lost the Lease, does not count.
				for _, rem := range cfg.Remedies {
					rem.Reset()
				}
				c.setLeading(true)
				if err := c.lead(ctx); err != nil {
					cfg.Log.Error("watching the cluster", "err", err)
				}
			},
			OnStoppedLeading: func() {
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
	return nil
}

func (c *Controller) setLeading(on bool) {
	c.mu.Lock()
	c.status.Leading = on
	if on {
		c.status.Leader = c.cfg.Identity
	} else {
		c.status.Synced, c.status.Degraded = false, ""
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

// lead starts the sources and runs the rules after each burst of changes,
// until ctx ends. It returns an error when a source cannot start.
func (c *Controller) lead(ctx context.Context) error {
	cfg := c.cfg
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer func() {
		c.mu.Lock()
		c.pass, c.standing = nil, nil
		c.mu.Unlock()
	}()
	changed := make(chan struct{}, 1)
	poke := func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	// Last to first: a source that listens to an earlier one (the gossip
	// watch to the pods' informer) listens before that one starts, and
	// misses none of what it hands over.
	for _, l := range slices.Backward(c.live) {
		l.OnChange(poke)
		if err := l.Start(ctx); err != nil {
			return fmt.Errorf("starting %s: %w", l.Name(), err)
		}
	}
	// The first pass waits for every source to have an answer (listed,
	// failing, or its ledger found absent): rules are not reported
	// skipped while the caches fill.
	if !until(ctx, c.settled) {
		return nil
	}
	c.mu.Lock()
	c.status.Synced = true
	c.mu.Unlock()
	cfg.Log.Info("sources settled: the rules run")
	for {
		took, wait := c.judge(ctx)
		// A finding waiting out a remedy's grace period is looked at
		// again when it is due, changes or not.
		var due <-chan time.Time
		if wait > 0 {
			due = time.After(wait)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		case <-due:
		}
		// Gather the rest of the burst.
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(max(cfg.Debounce, took)):
		}
	}
}

// settled reports whether every source that can say so has an answer.
func (c *Controller) settled() bool {
	for _, l := range c.live {
		if s, ok := l.(source.Settler); ok && !s.Settled() {
			return false
		}
	}
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

// judge runs one pass: the sources collected into a snapshot, the rules
// on it, the findings published, and the remedies on them. It returns how
// long collecting and judging took, and when a remedy wants the next pass
// (0: no sooner than changes come).
func (c *Controller) judge(ctx context.Context) (took, wait time.Duration) {
	cfg := c.cfg
	start := time.Now()
	// Taken before the sources collect: a change that lands in between
	// brings another pass.
	for _, l := range c.live {
		l.Changes()
	}
	res := audit.Run(ctx, audit.Config{Sources: cfg.Sources, Rules: cfg.Rules, Now: cfg.Now})
	s := res.Snapshot
	pods := -1
	if s.Kube != nil && s.Kube.Index != nil {
		pods = s.Kube.Index.Len()
	}
	// What a source lent the pass goes back: the remedies read afresh.
	for _, src := range cfg.Sources {
		if l, ok := src.(source.Lender); ok {
			l.Return()
		}
	}
	if s.Gossip != nil && s.Kube != nil {
		// The members' Listed times are on this replica's clock: the
		// API server's, as it measured it, goes with the views it
		// serves (a bundle's), as the pods it lent do not.
		g := *s.Gossip
		g.APIClock = s.Kube.APIClock
		s.Gossip = &g
	}
	s.Kube = nil
	took = time.Since(start)
	if m := cfg.Metrics; m != nil {
		m.Gossip(s)
	}
	c.publish(res.Sources, res.Findings, res.Skipped, pods, took)
	c.mu.Lock()
	c.pass = s
	c.mu.Unlock()
	for _, rem := range cfg.Remedies {
		if w := c.remedy(ctx, rem, s, res.Findings); w > 0 && (wait == 0 || w < wait) {
			wait = w
		}
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
		m.IPAM(all)
		if pods >= 0 {
			m.Pods.Set(float64(pods))
		}
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
		c.events.Finding(f)
	}
	c.reported, c.last = now, last
	c.mu.Lock()
	c.standing = all
	c.mu.Unlock()
	degraded := ""
	for _, st := range sources {
		if st.Name == kubeSource && st.Status == snapshot.StatusError {
			degraded = "the cluster's objects: " + st.Detail
		}
	}
	c.mu.Lock()
	c.status.LastPass, c.status.Findings, c.status.Skipped, c.status.Degraded = cfg.Now(), len(all), skipped, degraded
	c.mu.Unlock()
}

// kubeSource is the name of the source of the cluster's objects, whose
// failure degrades the whole pass.
const kubeSource = "kube"

// logSkipped logs each rule that starts or stops being skipped, or is
// skipped for another reason than in the last pass.
func (c *Controller) logSkipped(now map[string]finding.Skipped) {
	log := c.cfg.Log
	for _, id := range slices.Sorted(maps.Keys(now)) {
		sk := now[id]
		if was, ok := c.skipped[id]; ok && was.Reason == sk.Reason && was.NotApplicable == sk.NotApplicable {
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

// key identifies a finding across passes: its rule, subject, the objects
// it concerns and the gossip members it names. A finding that comes to
// name another member is reported again: a dead member alone on an
// address, then beside the live one that joined there.
func key(f finding.Finding) string {
	var b strings.Builder
	b.WriteString(f.Rule + "|" + f.Severity.String() + "|" + f.Subject.IP)
	for _, k := range []string{"member", "other_member"} {
		if v, ok := f.Evidence[k].(string); ok {
			b.WriteString("|" + k + "=" + v)
		}
	}
	var uids []string
	for _, o := range f.Concerns {
		uids = append(uids, o.Kind+"/"+o.Namespace+"/"+o.Name+"/"+o.UID)
	}
	sort.Strings(uids)
	b.WriteString("|" + strings.Join(uids, ","))
	return b.String()
}
