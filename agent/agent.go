package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/client-go/tools/record"

	"github.com/ghostwatch/ghostwatch/audit"
	"github.com/ghostwatch/ghostwatch/finding"
	"github.com/ghostwatch/ghostwatch/remedy"
	"github.com/ghostwatch/ghostwatch/rule"
	"github.com/ghostwatch/ghostwatch/sink"
	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source"
)

// Config is what the agent needs. Zero durations take the defaults below.
type Config struct {
	// NodeName is the Node the agent runs on.
	NodeName string
	// Sources are read at every audit, in order, each seeing what the
	// earlier ones collected (the cluster first, then the host's
	// addresses, then the conntrack table): an audit is complete only when
	// every one of them is. Those that are source.Live are started with
	// the agent, must be ready before each audit, and their changes drive
	// the audits between the scheduled ones; those that are
	// source.Focuser are told what changed; a source.Fresher re-reads
	// what a remedy's last re-check names.
	Sources []source.Source
	// Ledgers are the node's other ledgers (host-local's store, Calico's
	// nodename), read after Sources: one that fails leaves its own rules
	// out of the audit, and the rest stands.
	Ledgers []source.Source
	// Rules are the rules the agent runs: the registry's node rules.
	Rules []rule.Rule
	// Remedies are the remedies turned on (see remedy.Build); none only
	// reports. The agent sets their Recheck.
	Remedies []*remedy.Remedy
	// AuditInterval is the period of the full audit that catches what
	// changes missed. Default 2m.
	AuditInterval time.Duration
	// Debounce gathers a burst of changes into one audit. Default 50ms.
	Debounce time.Duration
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

// Status is the agent's state for /readyz and logs.
type Status struct {
	// Running is true once the loop has started.
	Running bool
	// LastAudit is when the last audit finished, complete or not.
	LastAudit time.Time
	// Degraded says why the agent refuses to act; empty when it may.
	Degraded string
	// Refused says which limit refused the last complete audit's actions
	// whole (a batch over the budget, a backend over the cap); empty when
	// none did. The agent may act, but did not.
	Refused string
	// Findings of the last complete audit.
	Findings int
	// Blind says which rules cannot see their ledger on this node at all,
	// and why (Service NAT outside conntrack); empty when none.
	Blind string
	// Unread says which rules the last complete audit left out because a
	// ledger they read could not be read (host-local's store), and why;
	// empty when none.
	Unread string
	// Busy says what the audit under way is waiting on, as its sources
	// say (source.Progresser): "kube: looking up the pods at 20000
	// addresses in one list of every pod: 12000 pods read in 8s"; empty
	// when none says. While it is set, Degraded says so first: the last
	// audit's reason may no longer hold.
	Busy string
}

// Agent is the node agent's loop.
type Agent struct {
	cfg    Config
	events *sink.Events
	poke   chan struct{}
	live   []source.Live

	// The rest belongs to the loop's goroutine.
	//
	// last is the snapshot of the complete audit whose findings the
	// remedies act on, while they do; nil between audits, so that what
	// an audit read is let go before the next reads it again.
	last *snapshot.Snapshot
	// pending are the changes taken by audits that did not complete: the
	// next audit judges them too.
	pending source.Changes
	// waiting is the last complete audit, without the findings its
	// remedies have since acted on, while some of its findings wait out
	// their grace period and nothing has changed since: when the first is
	// due, the remedies act on it without reading again. Nil otherwise.
	waiting *audit.Result
	// allLive is true when every source and ledger says when it changes
	// (source.Live) and none lends its records (source.Lender): only then
	// would a pass with no changes read what the last one read.
	allLive bool
	// ledgerErr is, by source, the error of the other ledgers at the last
	// audit ("" when read).
	ledgerErr map[string]string
	// graceDue is when the first finding of the last complete audit that
	// waits out its grace period is due; zero when none waits.
	graceDue time.Time
	// unready counts the times the watch (watchReady) found a live
	// source not complete and current, and unreadyErr says why, the last
	// time; seen is the count when the last audit ended. An audit that
	// ends with the count grown did not rest on current sources
	// throughout (it waited on a hung API server, say): it is incomplete.
	unready    atomic.Int64
	unreadyErr atomic.Pointer[string]
	seen       int64
	audited    bool

	// changed is when the sources last said they changed, and how many
	// times they have.
	changed struct {
		sync.Mutex
		n  uint64
		at time.Time
	}

	mu     sync.Mutex
	status Status
	// findings are what the agent keeps of those of the last complete
	// audit.
	findings []heldFinding
}

// heldFinding is what the agent keeps of a finding of its last complete
// audit, for At: what it says and of what, not its evidence nor its flows
// (when a node's workloads all died, those would double what the next
// audit reads). A crowd's ghost backends (finding.CrowdTarget) are kept,
// sorted, to tell the addresses it names.
type heldFinding struct {
	f        finding.Finding
	backends []netip.Addr
}

// hold returns what the agent keeps of fs.
func hold(fs []finding.Finding) []heldFinding {
	out := make([]heldFinding, len(fs))
	for i, f := range fs {
		out[i].f = finding.Finding{Rule: f.Rule, Severity: f.Severity, Message: f.Message, Subject: f.Subject}
		if c, ok := f.Target.(*finding.CrowdTarget); ok {
			out[i].backends = c.Backends()
		}
	}
	return out
}

// New returns an agent; Run starts it.
func New(cfg Config) *Agent {
	if cfg.AuditInterval <= 0 {
		cfg.AuditInterval = 2 * time.Minute
	}
	if cfg.Debounce <= 0 {
		cfg.Debounce = 50 * time.Millisecond
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	a := &Agent{cfg: cfg, poke: make(chan struct{}, 1)}
	if cfg.Events != nil {
		a.events = &sink.Events{Recorder: cfg.Events, Node: cfg.NodeName}
	}
	a.allLive = true
	for _, src := range slices.Concat(cfg.Sources, cfg.Ledgers) {
		l, ok := src.(source.Live)
		if ok {
			a.live = append(a.live, l)
		}
		if _, lends := src.(source.Lender); !ok || lends {
			a.allLive = false
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

// At says what the agent's last complete audit found that names ip.
func (a *Agent) At(ip netip.Addr) sink.FindingsAt {
	a.mu.Lock()
	defer a.mu.Unlock()
	ip = ip.Unmap()
	fs := make([]finding.Finding, 0, len(a.findings))
	for _, h := range a.findings {
		f := h.f
		if _, ok := slices.BinarySearchFunc(h.backends, ip, netip.Addr.Compare); ok {
			// A crowd names the address among its ghost backends.
			f.Subject.IP = ip.String()
		}
		fs = append(fs, f)
	}
	return sink.NewFindingsAt(a.cfg.NodeName, a.status.Running, a.cfg.Rules, fs, ip)
}

// Status returns a copy of the agent's status, with what the audit under
// way is waiting on.
func (a *Agent) Status() Status {
	a.mu.Lock()
	st := a.status
	a.mu.Unlock()
	var busy []string
	for _, src := range slices.Concat(a.cfg.Sources, a.cfg.Ledgers) {
		if p, ok := src.(source.Progresser); ok {
			if msg := p.Progress(); msg != "" {
				busy = append(busy, src.Name()+": "+msg)
			}
		}
	}
	st.Busy = strings.Join(busy, "; ")
	if st.Busy != "" && st.Degraded != "" {
		st.Degraded = "an audit is under way (" + st.Busy + "); the last one was incomplete: " + st.Degraded
	}
	return st
}

// Run audits on every change and timer tick until ctx ends. It returns nil
// when ctx ends, and an error only when it cannot start.
func (a *Agent) Run(ctx context.Context) error {
	if len(a.cfg.Sources) == 0 {
		return errors.New("agent: no sources to read")
	}
	if len(a.cfg.Remedies) > 0 && !slices.ContainsFunc(a.cfg.Sources, isFresher) {
		return errors.New("agent: remedies need a source that re-reads the cluster afresh before acting")
	}
	for _, l := range a.live {
		l.OnChange(func() {
			a.noteChange()
			signal(a.poke)
		})
		if err := l.Start(ctx); err != nil {
			return fmt.Errorf("agent: starting %s: %w", l.Name(), err)
		}
	}
	go a.watchReady(ctx)
	a.mu.Lock()
	a.status.Running = true
	a.mu.Unlock()
	ticker := time.NewTicker(a.cfg.AuditInterval)
	defer ticker.Stop()
	var grace, retry <-chan time.Time
	backoff := time.Duration(0)
	trigger, full := triggerStart, true
	for {
		if wait := a.auditOnce(ctx, trigger, full); wait > 0 {
			// Some findings wait out their grace period: look again then.
			grace = time.After(wait)
		} else {
			grace = nil
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
				trigger, full = triggerRetry, true
			case <-ticker.C:
				trigger, full = triggerTimer, true
			case <-grace:
				trigger, full = triggerGrace, false
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
				trigger, full = triggerChange, false
			}
		}
	}
}

// Audit triggers, as they appear in metrics and logs. An audit driven by a
// change is counted under what the change was ("cluster", "new-flow",
// "events-lost", "holders": source.Changes.Why).
const (
	triggerStart  = "start"
	triggerTimer  = "timer"
	triggerChange = "change"
	triggerGrace  = "grace"
	triggerRetry  = "retry"
)

// readyWatch is how often watchReady asks the live sources.
const readyWatch = time.Second

// watchReady asks the live sources whether they are complete and current
// every readyWatch until ctx ends, and counts each time one is not: an
// audit that waits a minute on a hung API server, having found its sources
// ready when it began, learns so when it ends.
func (a *Agent) watchReady(ctx context.Context) {
	t := time.NewTicker(readyWatch)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := a.liveNotReady(); err != nil {
			why := err.Error()
			a.unreadyErr.Store(&why)
			a.unready.Add(1)
		}
	}
}

// maxRetry bounds how long a degraded agent waits before it looks again.
const maxRetry = 30 * time.Second

// unsure reports whether a live source may have changed without saying
// so (source.Unsure).
func (a *Agent) unsure() bool {
	for _, l := range a.live {
		if u, ok := l.(source.Unsure); ok && u.Unsure() {
			return true
		}
	}
	return false
}

// noteChange records that a source said it changed, and when.
func (a *Agent) noteChange() {
	now := a.cfg.Now()
	a.changed.Lock()
	a.changed.n++
	a.changed.at = now
	a.changed.Unlock()
}

// changeMark returns how many times the sources said they changed, and
// when they last did.
func (a *Agent) changeMark() (uint64, time.Time) {
	a.changed.Lock()
	defer a.changed.Unlock()
	return a.changed.n, a.changed.at
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

func isFresher(s source.Source) bool {
	_, ok := s.(source.Fresher)
	return ok
}

// auditOnce runs one audit and, on complete evidence, the remedies. It
// returns how long until the first finding waiting out its grace period is
// due, or 0 when none waits. A full audit reads every ledger afresh; one
// driven by a change or a grace period reads what the changes concern.
func (a *Agent) auditOnce(ctx context.Context, trigger string, full bool) (wait time.Duration) {
	cfg := a.cfg
	m := cfg.Metrics
	now := cfg.Now()
	if !a.audited {
		// What the sources were before the first audit is its own
		// check's to judge.
		a.seen, a.audited = a.unready.Load(), true
	}
	defer func() { a.seen = a.unready.Load() }()
	// Taken before the changes are: every change taken had its handler
	// run by the time returned, unless one runs again before the audit
	// ends (then the audit's end stands for it).
	mark, markAt := a.changeMark()
	// Taken before the ledgers are read: a change that lands in between
	// is judged now and again at the next audit, never missed.
	changes := a.pending
	a.pending = source.Changes{}
	for _, l := range a.live {
		changes.Merge(l.Changes())
	}
	if trigger == triggerChange {
		if changes.Empty() {
			// A source spoke (new flows no rule would judge): nothing to do.
			return a.graceWait()
		}
		if changes.Why != "" {
			trigger = changes.Why
		}
	}
	for _, l := range a.live {
		if err := l.Ready(now); err != nil {
			a.pending = changes
			if m != nil {
				m.Sources([]snapshot.SourceStatus{{Name: l.Name(), Status: snapshot.StatusError}})
			}
			a.degrade(trigger, reasonCacheStale, err)
			return 0
		}
	}
	if trigger == triggerGrace && changes.Empty() && a.waiting != nil && a.unready.Load() == a.seen && !a.unsure() {
		// Nothing has changed since the last complete audit: its
		// findings are what another would find, and the remedies act
		// on those now due without reading again.
		return a.actAgain(ctx)
	}
	a.waiting = nil
	for _, src := range slices.Concat(cfg.Sources, cfg.Ledgers) {
		if f, ok := src.(source.Focuser); ok {
			f.Focus(changes, full)
		}
	}
	res := audit.Run(ctx, audit.Config{
		NodeName: cfg.NodeName,
		Sources:  slices.Concat(cfg.Sources, cfg.Ledgers),
		Rules:    cfg.Rules,
		Now:      cfg.Now,
	})
	if m != nil {
		m.Sources(res.Sources)
	}
	core := make([]string, len(cfg.Sources))
	for i, src := range cfg.Sources {
		core[i] = src.Name()
	}
	a.logLedgers(res.Sources, core)
	// Only the sources every audit needs make it incomplete; another
	// ledger that fails (host-local's store) leaves its own rules out of
	// this audit, and the rest stands.
	if err := res.IncompleteOf(core...); err != nil {
		// The changes this audit took were not judged: the next one
		// judges them too.
		a.pending.Merge(changes)
		a.degrade(trigger, reasonSourceError, err)
		return 0
	}
	if n := a.unready.Load(); n != a.seen {
		// A source was found not current since the last audit ended,
		// while this one read (or waited on) it: its evidence did not
		// hold throughout, and the grace periods start over.
		a.pending.Merge(changes)
		why := "a source was not current"
		if w := a.unreadyErr.Load(); w != nil {
			why = *w
		}
		a.degrade(trigger, reasonCacheStale, fmt.Errorf("the sources were not current during the audit or since the last one: %s", why))
		return 0
	}
	a.last = res.Snapshot
	held := hold(res.Findings)
	a.mu.Lock()
	a.findings = held
	a.mu.Unlock()
	if m != nil {
		m.Publish(res.Findings)
		m.setNotJudged(res.Skipped)
	}
	var since remedy.Since
	if n, _ := a.changeMark(); n == mark && a.allLive && !a.unsure() && !markAt.IsZero() && len(changes.Addrs) > 0 {
		// No source spoke while the audit read: what it read of the
		// addresses the changes named is what the sources held when the
		// last of those changes arrived, and a ghost there has held
		// since.
		since = func(f finding.Finding) time.Time {
			if g, err := netip.ParseAddr(f.Target.Group()); err == nil {
				if _, ok := changes.Addrs[g.Unmap()]; ok {
					return markAt
				}
			}
			return time.Time{}
		}
	}
	wait, refused := a.act(ctx, res, since)
	if m != nil {
		m.Audits.WithLabelValues(trigger, "complete").Inc()
	}
	a.mu.Lock()
	a.status.LastAudit, a.status.Degraded, a.status.Findings = cfg.Now(), "", len(res.Findings)
	a.status.Refused = refused
	a.status.Blind = notJudged(res.Skipped, notJudgedBlind)
	a.status.Unread = notJudged(res.Skipped, notJudgedSourceError)
	a.mu.Unlock()
	cfg.Log.Debug("audit", "trigger", trigger, "full", full, "findings", len(res.Findings))
	return wait
}

// actAgain runs the remedies on the findings of the last complete audit
// that have not been acted on, when nothing changed since it: the first
// of those waiting out their grace period is due.
func (a *Agent) actAgain(ctx context.Context) time.Duration {
	res := a.waiting
	a.last = res.Snapshot
	wait, refused := a.act(ctx, res, nil)
	a.mu.Lock()
	a.status.Refused = refused
	a.mu.Unlock()
	a.cfg.Log.Debug("grace period over: acting on the last complete audit's findings", "findings", len(res.Findings))
	return wait
}

// act runs the remedies on the findings of a complete audit, res, whose
// snapshot a.last holds, and lets it go. It keeps res, without the
// findings acted on, while others wait out their grace period (waiting).
// It returns how long until the first of those is due (0: none), and
// what limits refused.
func (a *Agent) act(ctx context.Context, res *audit.Result, since remedy.Since) (wait time.Duration, refused string) {
	cfg := a.cfg
	var limits, why []string
	acted := map[any]bool{}
	for _, rem := range cfg.Remedies {
		w, limit, reason := a.remedy(ctx, rem, res, since, acted)
		if w > 0 && (wait == 0 || w < wait) {
			wait = w
		}
		if limit != "" {
			limits = append(limits, limit)
			why = append(why, limit+": "+reason)
		}
	}
	a.last = nil
	if a.unready.Load() != a.seen {
		// A source was found not current while the remedies re-checked:
		// what they refused waits a grace period of complete audits
		// again.
		for _, rem := range cfg.Remedies {
			rem.Reset()
		}
		wait = 0
	}
	if m := cfg.Metrics; m != nil {
		m.setDegraded(limits...)
	}
	a.graceDue, a.waiting = time.Time{}, nil
	if wait > 0 {
		a.graceDue = cfg.Now().Add(wait)
		if a.allLive {
			a.waiting = res
			if len(acted) > 0 {
				left := &audit.Result{Snapshot: res.Snapshot}
				for _, f := range res.Findings {
					if f.Target == nil || !acted[f.Target.Key()] {
						left.Findings = append(left.Findings, f)
					}
				}
				a.waiting = left
			}
		}
	}
	return wait, strings.Join(why, "; ")
}

// notJudged says which rules were skipped for reason (notJudgedReason),
// and why: "stale-nat-flow, misdelivered-flow (proxy: ...)", each cause
// once; "" when none.
func notJudged(skipped []finding.Skipped, reason string) string {
	var rules, causes []string
	for _, sk := range skipped {
		if notJudgedReason(sk) != reason {
			continue
		}
		rules = append(rules, sk.Rule)
		cause := sk.Reason
		if len(sk.Causes) > 0 {
			cause = sk.Causes[0]
		}
		if !slices.Contains(causes, cause) {
			causes = append(causes, cause)
		}
	}
	if len(rules) == 0 {
		return ""
	}
	return strings.Join(rules, ", ") + " (" + strings.Join(causes, "; ") + ")"
}

// graceWait returns how long until the first finding of the last complete
// audit that waits out its grace period is due, when no audit ran.
func (a *Agent) graceWait() time.Duration {
	if a.graceDue.IsZero() {
		return 0
	}
	return max(a.graceDue.Sub(a.cfg.Now()), time.Millisecond)
}

// remedy runs one remedy on a complete audit's findings and reports every
// action. It returns how long to wait before looking again at findings
// waiting out their grace period (until the first of them is due), and the
// degraded reason when a limit refused actions, and the limit's words.
func (a *Agent) remedy(ctx context.Context, rem *remedy.Remedy, res *audit.Result, since remedy.Since, acted map[any]bool) (wait time.Duration, limit, why string) {
	cfg := a.cfg
	actions, err := rem.ApplySince(ctx, res.Snapshot, res.Findings, since)
	var be *remedy.BudgetError
	switch {
	case errors.As(err, &be):
		limit, why = reasonBudgetExceeded, be.Error()
		cfg.Log.Warn("remedy budget exceeded: nothing acted on", "remedy", rem.ID(), "due", be.Due,
			"remaining", be.Remaining, "max", be.Max, "interval", be.Interval)
	case err != nil:
		cfg.Log.Warn("remedy refused", "remedy", rem.ID(), "err", err)
	}
	for _, act := range actions {
		a.report(rem.Rule, act)
		if act.Result == remedy.Done || act.Result == remedy.Gone {
			acted[act.Finding.Target.Key()] = true
		}
		var ce *remedy.CapError
		if errors.As(act.Limit, &ce) && limit == "" {
			limit, why = reasonCapExceeded, ce.Error()
		}
		if act.Result == remedy.Pending {
			// At least a millisecond: a finding due now is looked at again
			// right away, not never.
			if w := max(act.Due.Sub(cfg.Now()), time.Millisecond); wait == 0 || w < wait {
				wait = w
			}
		}
	}
	return wait, limit, why
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

// recheck is the re-check of a remedy of rule r (audit.Recheck), against
// the last complete audit. A re-check during which a source was found not
// current (it waited on a hung API server, say) refuses every finding: the
// audit's evidence no longer held throughout, whatever the fresh read
// said once the server answered.
func (a *Agent) recheck(r rule.Rule) remedy.Recheck {
	fresh := audit.Recheck(r, slices.Concat(a.cfg.Sources, a.cfg.Ledgers), func() *snapshot.Snapshot { return a.last }, a.cfg.Now)
	return func(ctx context.Context, fs []finding.Finding) []error {
		errs := fresh(ctx, fs)
		if a.unready.Load() != a.seen {
			why := "the sources were not current while the re-check ran: nothing the audit judged is acted on, and the grace periods start over"
			if w := a.unreadyErr.Load(); w != nil {
				why += " (" + *w + ")"
			}
			for i := range errs {
				if errs[i] == nil {
					errs[i] = errors.New(why)
				}
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
	a.graceDue, a.waiting = time.Time{}, nil
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
		a.cfg.Log.Info("remedy", "remedy", act.Remedy, "result", act.Result, "target", act.Finding.Target.String(), "reason", act.Reason,
			"finding", act.Finding.Message, "evidence", act.Finding.Evidence)
		a.events.Action(info, act)
		if a.cfg.Actions != nil {
			a.cfg.Actions(info, act)
		}
	}
	if m := a.cfg.Metrics; m != nil {
		m.Action(act)
	}
}
