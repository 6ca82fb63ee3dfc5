package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"

	"github.com/ghostwatch/ghostwatch/audit"
	"github.com/ghostwatch/ghostwatch/finding"
	"github.com/ghostwatch/ghostwatch/remedy"
	"github.com/ghostwatch/ghostwatch/rule"
	"github.com/ghostwatch/ghostwatch/sink"
	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source"
	"github.com/ghostwatch/ghostwatch/source/conntrack"
	"github.com/ghostwatch/ghostwatch/source/kube"
)

// Config is what the agent needs. Zero durations take the defaults below.
type Config struct {
	// NodeName is the Node the agent runs on.
	NodeName string
	// Informers hold the cluster; the agent starts them. Scoped to the
	// node (kube.InformerOptions.Node), they cost the API server what
	// kube-proxy costs, and Holders looks up the pods elsewhere that the
	// rules ask about.
	Informers *kube.Informers
	// Holders looks up which pods hold an address outside the node, when
	// Informers are scoped to it. A change that mentions an address
	// drops its answer; the backends of findings are judged again when
	// their answers run out.
	Holders *kube.Holders
	// Client reads afresh, with quorum reads, what a remedy's last
	// re-check names. Required when Remedies are set.
	Client kubernetes.Interface
	// Conntrack returns the source reading this node's table: it passes
	// every flow it reads to observe (when not nil) and keeps the flows its
	// readers need (it must implement source.Narrower, as
	// conntrack.KernelSource does).
	Conntrack func(observe func(*snapshot.Flow)) source.Source
	// FlowEvents, when set, streams the table's new and destroy events
	// (a conntrack.Subscription, subscribed before Run so that nothing is
	// missed between it and the first dump). The agent then keeps an index
	// of DNATed flows by backend, and an API change makes it judge the
	// flows of the backends that changed, from the index, instead of
	// dumping the table. Without it every change dumps the table.
	FlowEvents FlowEvents
	// Host, when set, reads the node's own addresses (host.Addresses) at
	// every audit, before the conntrack table: kube-proxy accepts NodePorts
	// on each, so an address added to the node later is a frontend from
	// the next audit on.
	Host source.Source
	// Sources are the node's other ledgers, read at every audit after the
	// cluster and the conntrack table.
	Sources []source.Source
	// Rules are the rules the agent runs: the registry's node rules.
	Rules []rule.Rule
	// Remedies are the remedies turned on (see remedy.Build); none only
	// reports. The agent sets their Recheck.
	Remedies []*remedy.Remedy
	// AuditInterval is the period of the full audit that catches what
	// events missed. Default 2m.
	AuditInterval time.Duration
	// Debounce gathers a burst of API changes into one audit. Default 50ms.
	Debounce time.Duration
	// NewFlowInterval is how often flows created since the last audit are
	// looked at: those a rule would judge are judged. Default 1s.
	NewFlowInterval time.Duration
	// StaleWindow: a list/watch error this recent makes the caches
	// untrusted. Default 60s.
	StaleWindow time.Duration
	// Metrics, when set, are updated after every audit.
	Metrics *Metrics
	// Events, when set, receives an Event for every action taken or refused.
	Events record.EventRecorder
	// Actions, when set, is told of every action taken, refused, failed or
	// found moot (its target gone), as the log is: a pending one is not an
	// action yet. It is called from the agent's loop and must not block.
	Actions func(rule.Info, remedy.Action)
	// Log receives structured logs; nil discards them.
	Log *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// FlowEvents streams conntrack events; conntrack.Subscription is one.
type FlowEvents interface {
	Run(ctx context.Context, fn func(conntrack.Event) error) error
}

// Status is the agent's state for /readyz and logs.
type Status struct {
	// Running is true once the loop has started.
	Running bool
	// LastAudit is when the last audit finished, complete or not.
	LastAudit time.Time
	// Degraded says why the agent refuses to act; empty when it may.
	Degraded string
	// Findings of the last complete audit.
	Findings int
}

// Agent is the node agent's loop.
type Agent struct {
	cfg    Config
	events *sink.Events
	poke   chan struct{}
	// full asks for a full audit: the index missed events.
	full chan struct{}
	// local is true when every rule that reads conntrack promises that its
	// verdict on a flow depends only on the flow's backend
	// (snapshot.BackendLocal): a change then needs only the flows of the
	// backends it mentions judged again.
	local bool

	// The rest belongs to the loop's goroutine (the index also takes
	// events from another, under its own lock).
	index *flowIndex
	// last is the snapshot of the last complete audit; lastKeep its flow
	// filter, for new flows.
	last *snapshot.Snapshot
	// ledgerErr is, by source, the error of the other ledgers at the last
	// audit ("" when read).
	ledgerErr map[string]string
	lastKeep  func(*snapshot.Flow) bool
	// suspects are the backends of the last complete audit's findings and
	// of new flows its filter keeps: judged again at every audit.
	suspects []netip.Addr
	// rejudge asks the next audit driven by a change to judge every
	// indexed flow: changes were taken by an audit that did not complete.
	rejudge bool

	mu     sync.Mutex
	status Status
}

// New returns an agent; Run starts it.
func New(cfg Config) *Agent {
	if cfg.AuditInterval <= 0 {
		cfg.AuditInterval = 2 * time.Minute
	}
	if cfg.Debounce <= 0 {
		cfg.Debounce = 50 * time.Millisecond
	}
	if cfg.NewFlowInterval <= 0 {
		cfg.NewFlowInterval = time.Second
	}
	if cfg.StaleWindow <= 0 {
		cfg.StaleWindow = time.Minute
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	a := &Agent{cfg: cfg, poke: make(chan struct{}, 1), full: make(chan struct{}, 1), index: newFlowIndex(cfg.Now), local: true}
	if cfg.Events != nil {
		a.events = &sink.Events{Recorder: cfg.Events, Node: cfg.NodeName}
	}
	for _, r := range rule.ReadersOf(cfg.Rules, conntrack.Name) {
		if _, ok := r.(snapshot.BackendLocal); !ok {
			a.local = false
		}
	}
	for _, rem := range cfg.Remedies {
		if rem.Recheck == nil {
			r, _ := rule.Find(cfg.Rules, rem.Rule.ID)
			rem.Recheck = a.recheck(r)
		}
	}
	return a
}

// Status returns a copy of the agent's status.
func (a *Agent) Status() Status {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.status
}

// Run audits on every change and timer tick until ctx ends. It returns nil
// when ctx ends, and an error only when it cannot start.
func (a *Agent) Run(ctx context.Context) error {
	if a.cfg.Informers == nil || a.cfg.Conntrack == nil {
		return errors.New("agent: informers and a conntrack source are required")
	}
	if len(a.cfg.Remedies) > 0 && a.cfg.Client == nil {
		return errors.New("agent: remedies need a client to re-check against the API server")
	}
	if err := a.cfg.Informers.OnChange(func() { signal(a.poke) }); err != nil {
		return err
	}
	a.cfg.Informers.Start(ctx)
	var events sync.WaitGroup
	defer events.Wait()
	if a.cfg.FlowEvents != nil {
		events.Add(1)
		go func() {
			defer events.Done()
			a.followEvents(ctx)
		}()
	}
	a.mu.Lock()
	a.status.Running = true
	a.mu.Unlock()
	ticker := time.NewTicker(a.cfg.AuditInterval)
	defer ticker.Stop()
	newFlows := time.NewTicker(a.cfg.NewFlowInterval)
	defer newFlows.Stop()
	var grace, retry, holders <-chan time.Time
	backoff := time.Duration(0)
	trigger := triggerStart
	for {
		if wait := a.auditOnce(ctx, trigger); wait > 0 {
			// Some findings wait out their grace period: look again then.
			grace = time.After(wait)
		} else {
			grace = nil
		}
		// The suspects are judged again when the answer saying who holds
		// one of their addresses runs out: a pod that came to one with no
		// watched object mentioning it is found then.
		holders = nil
		if h := a.cfg.Holders; h != nil {
			if due, ok := h.Due(a.suspects...); ok {
				holders = time.After(max(due.Sub(a.cfg.Now()), time.Millisecond))
			}
		}
		// A degraded agent looks again soon, and less often the longer it
		// stays degraded: it says why as soon as the cause is known, and
		// acts again as soon as the cause is gone.
		retry = nil
		if a.Status().Degraded != "" {
			backoff = min(max(2*backoff, time.Second), maxRetry, a.cfg.AuditInterval)
			retry = time.After(backoff)
		} else {
			backoff = 0
		}
		for trigger = ""; trigger == ""; {
			select {
			case <-ctx.Done():
				return nil
			case <-retry:
				trigger = triggerRetry
			case <-ticker.C:
				trigger = triggerTimer
			case <-a.full:
				trigger = triggerEventsLost
			case <-grace:
				trigger = triggerGrace
			case <-holders:
				trigger = triggerHolders
			case <-newFlows.C:
				if a.newFlowsToJudge() {
					trigger = triggerNewFlow
				}
			case <-a.poke:
				// Gather the rest of the burst.
				t := time.NewTimer(a.cfg.Debounce)
				select {
				case <-ctx.Done():
					t.Stop()
					return nil
				case <-t.C:
				}
				select {
				case <-a.poke:
				default:
				}
				trigger = triggerChange
			}
		}
	}
}

// Audit triggers, as they appear in metrics and logs.
const (
	triggerStart      = "start"
	triggerTimer      = "timer"
	triggerChange     = "change"
	triggerGrace      = "grace"
	triggerNewFlow    = "new-flow"
	triggerEventsLost = "events-lost"
	triggerRetry      = "retry"
	triggerHolders    = "holders"
)

var triggers = []string{triggerStart, triggerTimer, triggerChange, triggerGrace, triggerNewFlow, triggerEventsLost, triggerRetry, triggerHolders}

// maxRetry bounds how long a degraded agent waits before it looks again.
const maxRetry = 30 * time.Second

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// followEvents feeds conntrack events to the index until ctx ends. When
// events are lost, the index is no longer trusted and a full audit is
// asked for, which seeds it again.
func (a *Agent) followEvents(ctx context.Context) {
	for {
		err := a.cfg.FlowEvents.Run(ctx, func(e conntrack.Event) error {
			a.index.apply(e)
			return nil
		})
		if ctx.Err() != nil {
			return
		}
		a.index.invalidate()
		if m := a.cfg.Metrics; m != nil {
			m.EventsLost.Inc()
		}
		signal(a.full)
		if errors.Is(err, conntrack.ErrOverflow) {
			a.cfg.Log.Warn("conntrack events lost: the next audit reads the whole table", "err", err)
			continue
		}
		a.cfg.Log.Error("conntrack events failed: audits read the whole table until they work again", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

// newFlowsToJudge reports whether flows created since the last audit are
// ones the rules would judge, by the last complete audit's filter: a
// connection opened through a rule kube-proxy has not yet removed. Their
// backends become suspects; the others are forgotten.
func (a *Agent) newFlowsToJudge() bool {
	if a.cfg.FlowEvents == nil || a.lastKeep == nil {
		return false
	}
	found := false
	for _, b := range a.index.takeDirty() {
		for _, f := range a.index.flowsTo([]netip.Addr{b}) {
			if a.lastKeep(&f) {
				a.suspects = append(a.suspects, b)
				found = true
				break
			}
		}
	}
	return found
}

// auditOnce runs one audit and, on complete evidence, the remedies. It
// returns how long until the first finding waiting out its grace period is
// due, or 0 when none waits.
func (a *Agent) auditOnce(ctx context.Context, trigger string) (wait time.Duration) {
	cfg := a.cfg
	m := cfg.Metrics
	if err := cfg.Informers.Stale(cfg.Now(), cfg.StaleWindow); err != nil {
		if m != nil {
			m.Sources([]snapshot.SourceStatus{{Name: kube.Name, Status: snapshot.StatusError}})
		}
		a.degrade(trigger, reasonCacheStale, err)
		return 0
	}
	// Taken before the cluster is read: a change that lands in between is
	// judged now and again at the next audit, never missed.
	changes := cfg.Informers.TakeChanges()
	if cfg.Holders != nil {
		// Who holds an address a change mentions is asked again.
		for addr := range changes.Addrs {
			cfg.Holders.Forget(addr)
		}
	}
	// A change is judged from the index when it can be trusted; anything
	// else reads the whole table, and seeds the index on the way.
	scheduled := trigger == triggerStart || trigger == triggerTimer || trigger == triggerEventsLost || trigger == triggerRetry
	full := cfg.FlowEvents == nil || !a.index.isValid() || scheduled
	var ct source.Source
	if full {
		a.index.beginSeed()
		ct = cfg.Conntrack(a.index.seed)
	} else {
		is := &indexSource{a: a, all: changes.Frontends || !a.local || a.rejudge}
		for addr := range changes.Addrs {
			is.changed = append(is.changed, addr)
		}
		ct = is
	}
	res := audit.Run(ctx, audit.Config{
		NodeName: cfg.NodeName,
		Sources:  append(a.sources(ct), cfg.Sources...),
		Rules:    cfg.Rules,
		Now:      cfg.Now,
	})
	// Only the sources every audit needs make it incomplete; another
	// ledger that fails (host-local's store) leaves its own rules out of
	// this audit, and the rest stands.
	core := a.coreSources()
	if full {
		a.index.endSeed(res.IncompleteOf(core...) == nil)
		if scheduled {
			// A full audit streams the whole table through memory: give
			// what it left behind back to the node now rather than minutes
			// later, when the runtime would. One collection per scheduled
			// audit; not per change, when there are no events to index.
			defer debug.FreeOSMemory()
		}
	}
	if m != nil {
		m.Sources(res.Sources)
	}
	a.logLedgers(res.Sources, core)
	if err := res.IncompleteOf(core...); err != nil {
		// The changes this audit took were not judged: the next one judges
		// every indexed flow.
		a.rejudge = true
		a.degrade(trigger, reasonSourceError, err)
		return 0
	}
	a.rejudge = false
	a.last = res.Snapshot
	a.lastKeep, _ = conntrack.Filter(rule.ReadersOf(cfg.Rules, conntrack.Name), res.Snapshot)
	// The backends of the flows the rules kept (every finding's among
	// them: findings come from kept flows) are judged again at every audit: what became of their pods
	// may reach no watched object (a pod elsewhere that leaves).
	a.suspects = a.suspects[:0]
	if ct := res.Snapshot.Conntrack; ct != nil {
		seen := map[netip.Addr]bool{}
		for i := range ct.Flows {
			if b := ct.Flows[i].Reply.Src.Unmap(); !seen[b] {
				seen[b] = true
				a.suspects = append(a.suspects, b)
			}
		}
	}

	if m != nil {
		m.Publish(res.Findings)
	}
	var limits []string
	for _, rem := range cfg.Remedies {
		w, limit := a.remedy(ctx, rem, res)
		if w > 0 && (wait == 0 || w < wait) {
			wait = w
		}
		if limit != "" {
			limits = append(limits, limit)
		}
	}
	if m != nil {
		if cfg.FlowEvents != nil {
			m.IndexFlows.Set(float64(a.index.len()))
		} else if res.Snapshot.Conntrack != nil {
			m.IndexFlows.Set(float64(len(res.Snapshot.Conntrack.Flows)))
		}
		m.Audits.WithLabelValues(trigger, "complete").Inc()
		m.setDegraded(limits...)
	}
	a.mu.Lock()
	a.status.LastAudit, a.status.Degraded, a.status.Findings = cfg.Now(), "", len(res.Findings)
	a.mu.Unlock()
	kept := 0
	if res.Snapshot.Conntrack != nil {
		kept = len(res.Snapshot.Conntrack.Flows)
	}
	cfg.Log.Debug("audit", "trigger", trigger, "findings", len(res.Findings), "flows", kept)
	return wait
}

// remedy runs one remedy on a complete audit's findings and reports every
// action. It returns how long to wait before looking again at findings
// waiting out their grace period (until the first of them is due), and the
// degraded reason when a limit refused actions.
func (a *Agent) remedy(ctx context.Context, rem *remedy.Remedy, res *audit.Result) (wait time.Duration, limit string) {
	cfg := a.cfg
	actions, err := rem.Apply(ctx, res.Snapshot, res.Findings)
	var be *remedy.BudgetError
	switch {
	case errors.As(err, &be):
		limit = reasonBudgetExceeded
		cfg.Log.Warn("remedy budget exceeded: nothing acted on", "remedy", rem.ID(), "due", be.Due,
			"remaining", be.Remaining, "max", be.Max, "interval", be.Interval)
	case err != nil:
		cfg.Log.Warn("remedy refused", "remedy", rem.ID(), "err", err)
	}
	for _, act := range actions {
		a.report(rem.Rule, act)
		var ce *remedy.CapError
		if errors.As(act.Limit, &ce) && limit == "" {
			limit = reasonCapExceeded
		}
		if t, ok := act.Finding.Target.(*finding.FlowTarget); ok && (act.Result == remedy.Done || act.Result == remedy.Gone) {
			a.index.forget(&t.Flow)
		}
		if act.Result == remedy.Pending {
			// At least a millisecond: a finding due now is looked at again
			// right away, not never.
			if w := max(act.Due.Sub(cfg.Now()), time.Millisecond); wait == 0 || w < wait {
				wait = w
			}
		}
	}
	return wait, limit
}

// sources are the sources an audit reads before the node's other ledgers:
// the cluster, the host's addresses, then the conntrack table ct.
func (a *Agent) sources(ct source.Source) []source.Source {
	out := []source.Source{&kube.APISource{Informers: a.cfg.Informers, Holders: a.cfg.Holders}}
	if a.cfg.Host != nil {
		out = append(out, a.cfg.Host)
	}
	return append(out, ct)
}

// coreSources are the sources without which no audit is complete: the
// cluster, the conntrack table and, when read, the host's addresses.
func (a *Agent) coreSources() []string {
	out := []string{kube.Name, conntrack.Name}
	if a.cfg.Host != nil {
		out = append(out, a.cfg.Host.Name())
	}
	return out
}

// logLedgers logs when one of the node's other ledgers starts or stops
// failing: its rules are left out of the audits meanwhile.
func (a *Agent) logLedgers(sts []snapshot.SourceStatus, core []string) {
	for _, st := range sts {
		if slices.Contains(core, st.Name) {
			continue
		}
		was := a.ledgerErr[st.Name]
		now := ""
		if st.Status == snapshot.StatusError {
			now = st.Detail
		}
		switch {
		case now != "" && now != was:
			a.cfg.Log.Warn("a ledger cannot be read: its rules are left out until it can", "source", st.Name, "err", now)
		case now == "" && was != "":
			a.cfg.Log.Info("a ledger can be read again", "source", st.Name)
		}
		if a.ledgerErr == nil {
			a.ledgerErr = map[string]string{}
		}
		a.ledgerErr[st.Name] = now
	}
}

// recheck is the re-check of a remedy of rule r: the informer caches must
// still be current, and a quorum read of the objects the rule names must
// still show the findings.
func (a *Agent) recheck(r rule.Rule) remedy.Recheck {
	rc, _ := r.(rule.Rechecker)
	return func(ctx context.Context, fs []finding.Finding) []error {
		fail := func(err error) []error {
			errs := make([]error, len(fs))
			for i := range errs {
				errs[i] = err
			}
			return errs
		}
		if rc == nil {
			return fail(errors.New("the rule cannot re-check its findings"))
		}
		cfg := a.cfg
		now := cfg.Now()
		if err := cfg.Informers.Stale(now, cfg.StaleWindow); err != nil {
			return fail(err)
		}
		var q snapshot.KubeQuery
		for _, f := range fs {
			q.Add(rc.RecheckQuery(a.last, f))
		}
		k, err := kube.Quorum(ctx, cfg.Client, q)
		if err != nil {
			return fail(err)
		}
		// The host's addresses are the audit's: they name frontends,
		// not holders, and an address removed since leaves the flow as
		// stale as it was.
		errs := rc.Recheck(&snapshot.Snapshot{Taken: now, NodeName: cfg.NodeName, Kube: k, LocalAddresses: a.last.LocalAddresses}, fs)
		for i, err := range errs {
			if err != nil {
				errs[i] = fmt.Errorf("in a quorum read of the API server: %w", err)
			}
		}
		return errs
	}
}

// degrade records that the agent will not act, and why: every remedy's
// grace periods start over, since evidence must hold through complete
// passes only. The findings' metrics stay as the last complete audit left
// them.
func (a *Agent) degrade(trigger, reason string, err error) {
	for _, rem := range a.cfg.Remedies {
		rem.Reset()
	}
	a.cfg.Log.Warn("audit incomplete: no action taken, grace periods start over", "trigger", trigger, "reason", reason, "err", err)
	if m := a.cfg.Metrics; m != nil {
		m.Audits.WithLabelValues(trigger, "degraded").Inc()
		m.setDegraded(reason)
	}
	a.mu.Lock()
	a.status.LastAudit, a.status.Degraded = a.cfg.Now(), fmt.Sprintf("%s: %v", reason, err)
	a.mu.Unlock()
}

// report turns one remedy action into metrics, a log line, Events and a
// call of Config.Actions.
//
// The metric is counted last, so whoever sees it counted finds the
// action's Event and log line already there.
func (a *Agent) report(info rule.Info, act remedy.Action) {
	if act.Result != remedy.Pending {
		a.cfg.Log.Info("remedy", "remedy", act.Remedy, "result", act.Result, "target", act.Finding.Target.String(), "reason", act.Reason)
		a.events.Action(info, act)
		if a.cfg.Actions != nil {
			a.cfg.Actions(info, act)
		}
	}
	if m := a.cfg.Metrics; m != nil {
		m.Action(act)
	}
}

func describeIndex(indexed, kept int) string {
	return fmt.Sprintf("%d flows indexed, %d judged and kept for the rules", indexed, kept)
}
