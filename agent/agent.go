package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"

	"github.com/ghostwatch/ghostwatch/audit"
	"github.com/ghostwatch/ghostwatch/finding"
	"github.com/ghostwatch/ghostwatch/remedy"
	"github.com/ghostwatch/ghostwatch/rule"
	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source"
	"github.com/ghostwatch/ghostwatch/source/conntrack"
	"github.com/ghostwatch/ghostwatch/source/kube"
)

// Config is what the agent needs. Zero durations take the defaults below.
type Config struct {
	// NodeName is the Node the agent runs on.
	NodeName string
	// Informers hold the cluster; the agent starts them.
	Informers *kube.Informers
	// Conntrack returns the source reading this node's table, keeping the
	// flows keep accepts.
	Conntrack func(keep conntrack.Keep) source.Source
	// FlowEvents, when set, streams the table's new and destroy events
	// (a conntrack.Subscription, subscribed before Run so that nothing is
	// missed between it and the first dump). The agent then keeps an index
	// of DNATed flows by backend, and an API change makes it judge the
	// flows of the backends that changed, from the index, instead of
	// dumping the table. Without it every change dumps the table.
	FlowEvents FlowEvents
	// Rules configures the conntrack rules.
	Rules rule.Config
	// AuditInterval is the period of the full audit that catches what
	// events missed. Default 2m.
	AuditInterval time.Duration
	// Debounce gathers a burst of API changes into one audit. Default 50ms.
	Debounce time.Duration
	// NewFlowInterval is how often flows created since the last audit are
	// looked at: those to a backend that is no endpoint are judged.
	// Default 1s.
	NewFlowInterval time.Duration
	// StaleWindow: a list/watch error this recent makes the caches
	// untrusted. Default 60s.
	StaleWindow time.Duration
	// Remedy, when set, removes stale flows; nil only reports.
	Remedy *remedy.StaleFlows
	// Metrics, when set, are updated after every audit.
	Metrics *Metrics
	// Events, when set, receives an Event for every action taken or refused.
	Events record.EventRecorder
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
	cfg  Config
	poke chan struct{}
	// full asks for a full audit: the index missed events.
	full chan struct{}

	// index, facts and suspects belong to the loop's goroutine (the index
	// also takes events from another, under its own lock).
	index *flowIndex
	// facts are those of the last complete audit; nextFacts those of the
	// audit under way.
	facts, nextFacts *facts
	// suspects are the backends of the last complete audit's findings.
	suspects []netip.Addr

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
	return &Agent{cfg: cfg, poke: make(chan struct{}, 1), full: make(chan struct{}, 1), index: newFlowIndex(), facts: factsOf(nil)}
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
	var grace <-chan time.Time
	trigger := triggerStart
	for {
		if a.auditOnce(ctx, trigger) {
			// Some flows wait out their grace period: look again then.
			grace = time.After(a.cfg.Remedy.Grace)
		} else {
			grace = nil
		}
		for trigger = ""; trigger == ""; {
			select {
			case <-ctx.Done():
				return nil
			case <-ticker.C:
				trigger = triggerTimer
			case <-a.full:
				trigger = triggerEventsLost
			case <-grace:
				trigger = triggerGrace
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
)

var triggers = []string{triggerStart, triggerTimer, triggerChange, triggerGrace, triggerNewFlow, triggerEventsLost}

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

// newFlowsToJudge reports whether flows were created since the last audit
// to a backend that was no endpoint then: a connection opened through a
// rule kube-proxy has not yet removed.
func (a *Agent) newFlowsToJudge() bool {
	if a.cfg.FlowEvents == nil {
		return false
	}
	a.index.mu.Lock()
	defer a.index.mu.Unlock()
	for b := range a.index.dirty {
		if !a.facts.endpoints[netip.AddrFrom16(b).Unmap()] {
			return true
		}
		delete(a.index.dirty, b)
	}
	return false
}

// auditOnce runs one audit and, on complete evidence, the remedy. It
// reports whether findings are waiting out their grace period.
func (a *Agent) auditOnce(ctx context.Context, trigger string) (pending bool) {
	cfg := a.cfg
	m := cfg.Metrics
	now := cfg.Now()
	if err := cfg.Informers.Stale(now, cfg.StaleWindow); err != nil {
		a.degrade(trigger, reasonCacheStale, err)
		return false
	}
	// A change is judged from the index when it can be trusted; anything
	// else reads the whole table, and seeds the index on the way.
	scheduled := trigger == triggerStart || trigger == triggerTimer || trigger == triggerEventsLost
	full := cfg.FlowEvents == nil || !a.index.isValid() || scheduled
	ct := func(keep conntrack.Keep) source.Source { return &indexSource{a: a, keep: keep} }
	if full {
		a.index.beginSeed()
		ct = func(keep conntrack.Keep) source.Source {
			return cfg.Conntrack(func(f *snapshot.Flow) bool {
				a.index.seed(f)
				return keep(f)
			})
		}
	}
	res := audit.Run(ctx, audit.Config{
		NodeName:          cfg.NodeName,
		Kube:              &kube.APISource{Informers: cfg.Informers},
		Conntrack:         ct,
		NodePortAddresses: cfg.Rules.Conntrack.NodePortAddresses,
		Rules:             []rule.Rule{rule.StaleNATFlow{Config: cfg.Rules.Conntrack}, rule.MisdeliveredFlow{Config: cfg.Rules.Conntrack}},
		Now:               cfg.Now,
		SuspectsOnly:      true,
		Judge:             cfg.Rules.Conntrack,
	})
	if full {
		a.index.endSeed(res.Incomplete() == nil)
		if scheduled {
			// A full audit streams the whole table through memory: give
			// what it left behind back to the node now rather than minutes
			// later, when the runtime would. One collection per scheduled
			// audit; not per change, when there are no events to index.
			defer debug.FreeOSMemory()
		}
	}
	if m != nil {
		for _, st := range res.Sources {
			up := 0.0
			if st.Status == snapshot.StatusOK {
				up = 1
			}
			m.SourceUp.WithLabelValues(st.Name).Set(up)
			m.SourceSeconds.WithLabelValues(st.Name).Set(st.Duration.Seconds())
		}
	}
	if err := res.Incomplete(); err != nil {
		a.degrade(trigger, reasonSourceError, err)
		return false
	}
	if full {
		a.facts = factsOf(res.Snapshot.Kube)
	} else {
		a.facts = a.nextFacts
	}
	a.nextFacts = nil
	a.suspects = a.suspects[:0]
	for _, f := range res.Findings {
		if f.Flow != nil {
			a.suspects = append(a.suspects, f.Flow.Reply.Src.Unmap())
		}
	}
	a.publish(res)
	budgetErr := false
	if cfg.Remedy != nil && hasRule(res.Findings, rule.StaleNATFlowID) {
		// Re-check against the caches as they are now, not as the audit
		// read them, and only while they are still current.
		fresh := &snapshot.Snapshot{Taken: cfg.Now(), NodeName: cfg.NodeName, Kube: cfg.Informers.Snapshot()}
		judge := rule.NewJudge(fresh, cfg.Rules.Conntrack)
		cfg.Remedy.Recheck = func(f *snapshot.Flow) error {
			if err := cfg.Informers.Stale(cfg.Now(), cfg.StaleWindow); err != nil {
				return err
			}
			return judge.StillStale(f)
		}
		actions, err := cfg.Remedy.Apply(res.Snapshot, res.Findings)
		var be *remedy.BudgetError
		if errors.As(err, &be) {
			budgetErr = true
			cfg.Log.Warn("remedy budget exceeded: no flow deleted", "due", be.Due, "remaining", be.Remaining, "max", be.Max, "interval", be.Interval)
		} else if err != nil {
			cfg.Log.Warn("remedy refused", "err", err)
		}
		for _, act := range actions {
			a.report(res.Snapshot, act, be)
			if act.Result == remedy.Deleted || act.Result == remedy.Gone {
				a.index.forget(act.Finding.Flow)
			}
			pending = pending || act.Result == remedy.Pending
		}
	}
	if m != nil {
		if cfg.FlowEvents != nil {
			m.IndexFlows.Set(float64(a.index.len()))
		} else {
			m.IndexFlows.Set(float64(res.Snapshot.Conntrack.Matched))
		}
		m.Audits.WithLabelValues(trigger, "complete").Inc()
		for _, r := range degradedReasons {
			v := 0.0
			if r == reasonBudgetExceeded && budgetErr {
				v = 1
			}
			m.Degraded.WithLabelValues(r).Set(v)
		}
	}
	a.mu.Lock()
	a.status.LastAudit, a.status.Degraded, a.status.Findings = cfg.Now(), "", len(res.Findings)
	a.mu.Unlock()
	cfg.Log.Debug("audit", "trigger", trigger, "findings", len(res.Findings), "flows", len(res.Snapshot.Conntrack.Flows))
	return pending
}

func hasRule(fs []finding.Finding, id string) bool {
	for _, f := range fs {
		if f.Rule == id {
			return true
		}
	}
	return false
}

// degrade records that the agent will not act, and why.
func (a *Agent) degrade(trigger, reason string, err error) {
	a.cfg.Log.Warn("audit incomplete: no action taken", "trigger", trigger, "reason", reason, "err", err)
	if m := a.cfg.Metrics; m != nil {
		m.Audits.WithLabelValues(trigger, "degraded").Inc()
		for _, r := range degradedReasons {
			v := 0.0
			if r == reason {
				v = 1
			}
			m.Degraded.WithLabelValues(r).Set(v)
		}
	}
	a.mu.Lock()
	a.status.LastAudit, a.status.Degraded = a.cfg.Now(), fmt.Sprintf("%s: %v", reason, err)
	a.mu.Unlock()
}

// publish sets the gauges from a complete audit.
func (a *Agent) publish(res *audit.Result) {
	m := a.cfg.Metrics
	if m == nil {
		return
	}
	m.Findings.Reset()
	for _, id := range []string{rule.StaleNATFlowID, rule.MisdeliveredFlowID} {
		for _, sev := range []finding.Severity{finding.Info, finding.Warning, finding.Critical} {
			m.Findings.WithLabelValues(id, sev.String()).Set(0)
		}
	}
	m.StaleFlows.Reset()
	for _, f := range res.Findings {
		m.Findings.WithLabelValues(f.Rule, f.Severity.String()).Inc()
		if f.Rule == rule.StaleNATFlowID {
			ref := serviceRef(f)
			m.StaleFlows.WithLabelValues(ref.Namespace, ref.Name).Inc()
		}
	}

}

// report turns one remedy action into a metric, a log line and Events on
// the Service and, when known, the client Pod.
func (a *Agent) report(s *snapshot.Snapshot, act remedy.Action, budget *remedy.BudgetError) {
	cfg := a.cfg
	if m := cfg.Metrics; m != nil {
		m.RemedyActions.WithLabelValues(act.Rule, string(act.Result)).Inc()
		if act.Result == remedy.Deleted {
			m.FlowsDeleted.WithLabelValues(act.Rule).Inc()
		}
	}
	var typ, reason string
	switch {
	case act.Result == remedy.Deleted:
		typ, reason = corev1.EventTypeNormal, "StaleFlowDeleted"
	case act.Result == remedy.DryRun:
		typ, reason = corev1.EventTypeNormal, "StaleFlowDeleteDryRun"
	case act.Result == remedy.Refused && budget != nil:
		typ, reason = corev1.EventTypeWarning, "RemedyBudgetExceeded"
	case act.Result == remedy.Refused:
		typ, reason = corev1.EventTypeWarning, "StaleFlowDeleteRefused"
	case act.Result == remedy.Failed:
		typ, reason = corev1.EventTypeWarning, "StaleFlowDeleteFailed"
	default:
		return // pending and gone: nothing happened worth an Event
	}
	cfg.Log.Info("remedy", "rule", act.Rule, "result", act.Result, "service", act.Finding.Subject.Service, "reason", act.Reason)
	if cfg.Events == nil {
		return
	}
	msg := fmt.Sprintf("node %s: %s", cfg.NodeName, act.Reason)
	svc := serviceRef(act.Finding)
	cfg.Events.Event(&corev1.ObjectReference{Kind: "Service", APIVersion: "v1", Namespace: svc.Namespace, Name: svc.Name}, typ, reason, msg)
	if p := clientPod(s, act.Finding.Flow); p != nil {
		cfg.Events.Event(&corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: p.Namespace, Name: p.Name, UID: types.UID(p.UID)}, typ, reason, msg)
	}
}

// serviceRef reads the "namespace/name" a finding's subject names.
func serviceRef(f finding.Finding) snapshot.ObjectRef {
	ns, name, ok := strings.Cut(f.Subject.Service, "/")
	if !ok {
		return snapshot.ObjectRef{Namespace: f.Subject.Namespace, Name: f.Subject.Service}
	}
	return snapshot.ObjectRef{Namespace: ns, Name: name}
}

// clientPod is the pod that opened the flow, when the client is a pod.
func clientPod(s *snapshot.Snapshot, f *snapshot.Flow) *snapshot.Pod {
	if f == nil || s.Kube == nil {
		return nil
	}
	src := f.Orig.Src.Unmap()
	for i := range s.Kube.Pods {
		p := &s.Kube.Pods[i]
		if !p.HostNetwork && !p.Terminal() && p.HasIP(src) {
			return p
		}
	}
	return nil
}
