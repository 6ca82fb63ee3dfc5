package remedy

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ghostwatch/ghostwatch/finding"
	"github.com/ghostwatch/ghostwatch/internal/fakeclock"
	"github.com/ghostwatch/ghostwatch/rule"
	"github.com/ghostwatch/ghostwatch/snapshot"
)

// fakeTable is a conntrack table of flows by original tuple; the kernel is
// tested in the conntrack and lab packages.
type fakeTable struct {
	flows   map[snapshot.Tuple]snapshot.Flow
	deleted []snapshot.Flow
	err     error
}

func newTable(fs ...finding.Finding) *fakeTable {
	t := &fakeTable{flows: map[snapshot.Tuple]snapshot.Flow{}}
	for _, f := range fs {
		for fl := range f.Target.(*finding.FlowTarget).Flows.All() {
			t.flows[fl.Orig] = *fl
		}
	}
	return t
}

func (t *fakeTable) Get(f *snapshot.Flow) (snapshot.Flow, error) {
	got, ok := t.flows[f.Orig]
	if !ok {
		return snapshot.Flow{}, fmt.Errorf("get: %w", syscall.ENOENT)
	}
	return got, nil
}

func (t *fakeTable) Delete(f *snapshot.Flow) error {
	if t.err != nil {
		return t.err
	}
	if _, ok := t.flows[f.Orig]; !ok {
		return fmt.Errorf("delete: %w", syscall.ENOENT)
	}
	delete(t.flows, f.Orig)
	t.deleted = append(t.deleted, *f)
	return nil
}

func ready() *snapshot.Snapshot {
	return &snapshot.Snapshot{Sources: []snapshot.SourceStatus{
		{Name: "kube", Status: snapshot.StatusOK}, {Name: "conntrack", Status: snapshot.StatusOK}}}
}

// staleFlow is a stale flow from client port sport to backend.
func staleFlow(backend string, sport uint16) snapshot.Flow {
	return snapshot.Flow{Proto: snapshot.ProtoTCP, ID: uint32(sport),
		Orig:  snapshot.Tuple{Src: netip.MustParseAddr("10.244.1.50"), Dst: netip.MustParseAddr("10.96.0.10"), SrcPort: sport, DstPort: 80},
		Reply: snapshot.Tuple{Src: netip.MustParseAddr(backend), Dst: netip.MustParseAddr("10.244.1.50"), SrcPort: 8080, DstPort: sport}}
}

// staleFinding is a finding of the stale flow from client port sport to
// backend.
func staleFinding(backend string, sport uint16) finding.Finding {
	return flowsFinding(staleFlow(backend, sport))
}

// flowsFinding is a finding of stale flows, all to one backend.
func flowsFinding(flows ...snapshot.Flow) finding.Finding {
	return finding.Finding{Rule: rule.StaleNATFlowID, Severity: finding.Warning,
		Target: finding.NewFlowTarget("ns/svc gone", flows...)}
}

// firstFlow is a finding's first flow.
func firstFlow(f finding.Finding) snapshot.Flow { return f.Target.(*finding.FlowTarget).Flows.First() }

var info = rule.NewStaleNATFlow(rule.ConntrackConfig{}).Info()

func newRemedy(c *fakeclock.Clock, tab *fakeTable) *Remedy {
	return &Remedy{Rule: info, Grace: 10 * time.Second, Budget: &Budget{Max: 2, Interval: time.Minute}, Actuator: &Flows{Table: tab},
		Recheck: func(_ context.Context, fs []finding.Finding) []error { return make([]error, len(fs)) }, Now: c.Now}
}

func results(as []Action) string {
	var out []string
	for _, a := range as {
		out = append(out, string(a.Result))
	}
	return strings.Join(out, ",")
}

func t0() *fakeclock.Clock { return fakeclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)) }

func TestGracePeriodMustHoldContinuously(t *testing.T) {
	c := t0()
	f := staleFinding("10.244.3.47", 1000)
	tab := newTable(f)
	r := newRemedy(c, tab)
	ctx := context.Background()
	if as, err := r.Apply(ctx, ready(), []finding.Finding{f}); err != nil || results(as) != "pending" {
		t.Fatalf("first sight: %s, %v", results(as), err)
	}
	c.Advance(5 * time.Second)
	// One pass without the finding: the grace period starts over.
	if as, _ := r.Apply(ctx, ready(), nil); len(as) != 0 {
		t.Fatalf("actions without findings: %v", as)
	}
	c.Advance(6 * time.Second)
	if as, _ := r.Apply(ctx, ready(), []finding.Finding{f}); results(as) != "pending" {
		t.Fatalf("after a gap the grace period must restart: %s", results(as))
	}
	c.Advance(10 * time.Second)
	as, err := r.Apply(ctx, ready(), []finding.Finding{f})
	if err != nil || results(as) != "done" || len(tab.deleted) != 1 || tab.deleted[0] != firstFlow(f) {
		t.Fatalf("after the grace period: %s, %v, deleted %v", results(as), err, tab.deleted)
	}
}

// A pending action says when its own grace period ends, so that the agent
// looks again then, not a whole grace period after the latest finding.
func TestPendingActionsSayWhenTheyAreDue(t *testing.T) {
	c := t0()
	start := c.Now()
	a, b := staleFinding("10.244.3.47", 1000), staleFinding("10.244.3.48", 1001)
	r := newRemedy(c, newTable(a, b))
	ctx := context.Background()
	if _, err := r.Apply(ctx, ready(), []finding.Finding{a}); err != nil {
		t.Fatal(err)
	}
	c.Advance(4 * time.Second)
	as, err := r.Apply(ctx, ready(), []finding.Finding{a, b})
	if err != nil || results(as) != "pending,pending" {
		t.Fatalf("%s, %v", results(as), err)
	}
	if want := start.Add(r.Grace); !as[0].Due.Equal(want) {
		t.Errorf("first finding due %s, want %s (first seen + grace)", as[0].Due, want)
	}
	if want := c.Now().Add(r.Grace); !as[1].Due.Equal(want) {
		t.Errorf("second finding due %s, want %s", as[1].Due, want)
	}
}

func TestIncompleteEvidenceAndResetRestartGrace(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name    string
		breakIt func(r *Remedy) (*snapshot.Snapshot, error)
	}{
		{"a source not ready", func(r *Remedy) (*snapshot.Snapshot, error) {
			s := ready()
			s.Sources[0] = snapshot.SourceStatus{Name: "kube", Status: snapshot.StatusError, Detail: "watch stale"}
			_, err := r.Apply(ctx, s, nil)
			return s, err
		}},
		{"a degraded pass (Reset)", func(r *Remedy) (*snapshot.Snapshot, error) { r.Reset(); return nil, nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := t0()
			f := staleFinding("10.244.3.47", 1000)
			tab := newTable(f)
			r := newRemedy(c, tab)
			r.Apply(ctx, ready(), []finding.Finding{f})
			c.Advance(20 * time.Second)
			if s, err := tc.breakIt(r); s != nil && !errors.Is(err, ErrIncompleteEvidence) {
				t.Fatalf("with a source down: %v", err)
			}
			if as, _ := r.Apply(ctx, ready(), []finding.Finding{f}); results(as) != "pending" || len(tab.deleted) != 0 {
				t.Fatalf("the grace period must restart: %s, deleted %v", results(as), tab.deleted)
			}
		})
	}
}

func TestRecheckRefuses(t *testing.T) {
	c := t0()
	f := staleFinding("10.244.3.47", 1)
	tab := newTable(f)
	r := newRemedy(c, tab)
	r.Grace = 0
	r.Recheck = func(_ context.Context, fs []finding.Finding) []error {
		return []error{errors.New("10.244.3.47:8080 is an endpoint of ns/svc again")}
	}
	as, err := r.Apply(context.Background(), ready(), []finding.Finding{f})
	if err != nil || results(as) != "refused" || !strings.Contains(as[0].Reason, "endpoint of ns/svc again") || len(tab.deleted) != 0 {
		t.Fatalf("%s %q %v %v", results(as), as[0].Reason, err, tab.deleted)
	}
}

// The entry itself is read back from the kernel right before the delete:
// replaced, retranslated, gone, or without an ID, it is not deleted.
func TestVerifyReadsTheEntryBack(t *testing.T) {
	fl := staleFlow("10.244.3.47", 1)
	for _, tc := range []struct {
		name   string
		kernel func(tab *fakeTable)
		target func(fl *snapshot.Flow)
		want   Result
		reason string
	}{
		{"unchanged", nil, nil, Done, "deleted tcp"},
		{"replaced by a new entry with the same tuple", func(tab *fakeTable) {
			n := tab.flows[fl.Orig]
			n.ID = 99
			tab.flows[fl.Orig] = n
		}, nil, Refused, "replaced"},
		{"translated elsewhere", func(tab *fakeTable) {
			n := tab.flows[fl.Orig]
			n.Reply.Src = netip.MustParseAddr("10.244.3.48")
			tab.flows[fl.Orig] = n
		}, nil, Refused, "now translates to 10.244.3.48"},
		{"gone", func(tab *fakeTable) { delete(tab.flows, fl.Orig) }, nil, Gone, "no longer has"},
		{"no conntrack ID", nil, func(fl *snapshot.Flow) { fl.ID = 0 }, Refused, "ID is unknown"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fl := staleFlow("10.244.3.47", 1)
			tab := newTable(flowsFinding(fl))
			if tc.target != nil {
				tc.target(&fl)
			}
			f := flowsFinding(fl)
			if tc.kernel != nil {
				tc.kernel(tab)
			}
			r := newRemedy(t0(), tab)
			r.Grace = 0
			as, err := r.Apply(context.Background(), ready(), []finding.Finding{f})
			if err != nil || len(as) != 1 || as[0].Result != tc.want || !strings.Contains(as[0].Reason, tc.reason) {
				t.Fatalf("%+v, %v; want %s (%s)", as, err, tc.want, tc.reason)
			}
			if (tc.want == Done) != (len(tab.deleted) == 1) {
				t.Fatalf("deleted %v", tab.deleted)
			}
		})
	}
}

// The budget counts ghost IPs, not flows: all flows of one dead backend are
// acted on together, however many. A batch of more ghost IPs than the
// budget allows is refused whole.
func TestBudgetCountsGhostIPs(t *testing.T) {
	ctx := context.Background()
	c := t0()
	var busy []finding.Finding
	for i := range 300 {
		busy = append(busy, staleFinding("10.244.3.47", uint16(1000+i)))
	}
	other := staleFinding("10.244.3.48", 2000)
	third := staleFinding("10.244.3.49", 3000)
	tab := newTable(append(busy, other, third)...)
	r := newRemedy(c, tab)
	r.Grace = 0
	as, err := r.Apply(ctx, ready(), busy)
	if err != nil || len(tab.deleted) != 300 {
		t.Fatalf("one busy backend: %v, deleted %d of 300", err, len(tab.deleted))
	}
	// One of two ghost IPs spent: two more are one too many, refused whole.
	as, err = r.Apply(ctx, ready(), []finding.Finding{other, third})
	var be *BudgetError
	if !errors.As(err, &be) || be.Due != 2 || be.Remaining != 1 || results(as) != "refused,refused" || len(tab.deleted) != 300 {
		t.Fatalf("err %v, %s, deleted %d", err, results(as), len(tab.deleted))
	}
	if !errors.As(as[0].Limit, &be) {
		t.Errorf("action limit = %v", as[0].Limit)
	}
	// A minute later the window is free again.
	c.Advance(time.Minute)
	if as, err = r.Apply(ctx, ready(), []finding.Finding{other, third}); err != nil || results(as) != "done,done" {
		t.Fatalf("after the interval: %s %v", results(as), err)
	}
}

func TestCapRefusesOneGhostIP(t *testing.T) {
	f1, f2 := staleFinding("10.244.3.47", 1), staleFinding("10.244.3.47", 2)
	g := staleFinding("10.244.3.48", 3)
	tab := newTable(f1, f2, g)
	r := newRemedy(t0(), tab)
	r.Grace, r.MaxPerGroup = 0, 1
	as, err := r.Apply(context.Background(), ready(), []finding.Finding{f1, f2, g})
	var ce *CapError
	if err != nil || results(as) != "refused,refused,done" || !errors.As(as[0].Limit, &ce) || ce.Due != 2 || ce.Group != "10.244.3.47" {
		t.Fatalf("%s %v %+v", results(as), err, as[0])
	}
}

func TestDryRunDoesNothingAndNeedsNoBudget(t *testing.T) {
	f1, f2 := staleFinding("10.244.3.47", 1), staleFinding("10.244.3.48", 2)
	tab := newTable(f1, f2)
	r := newRemedy(t0(), tab)
	r.Grace, r.DryRun, r.Budget = 0, true, nil
	as, err := r.Apply(context.Background(), ready(), []finding.Finding{f1, f2})
	if err != nil || results(as) != "dry-run,dry-run" || len(tab.deleted) != 0 || !strings.Contains(as[0].Reason, "would delete tcp 10.244.1.50:1 -> 10.96.0.10:80 (DNAT to 10.244.3.47:8080, conntrack id 1)") {
		t.Fatalf("%s %v %v %q", results(as), err, tab.deleted, as[0].Reason)
	}
}

func TestKernelRefusesTheDelete(t *testing.T) {
	f := staleFinding("10.244.3.47", 1)
	tab := newTable(f)
	tab.err = fmt.Errorf("delete: %w", syscall.EPERM)
	r := newRemedy(t0(), tab)
	r.Grace = 0
	as, err := r.Apply(context.Background(), ready(), []finding.Finding{f})
	if err != nil || results(as) != "failed" || !strings.Contains(as[0].Reason, "not permitted") {
		t.Fatalf("%s, %v", results(as), err)
	}
}

func TestOtherRulesAndTargetsAreIgnored(t *testing.T) {
	f := staleFinding("10.244.3.47", 1)
	tab := newTable(f)
	r := newRemedy(t0(), tab)
	r.Grace = 0
	other := f
	other.Rule = rule.MisdeliveredFlowID
	untargeted := f
	untargeted.Target = nil
	if as, err := r.Apply(context.Background(), ready(), []finding.Finding{other, untargeted}); err != nil || len(as) != 0 || len(tab.deleted) != 0 {
		t.Fatalf("acted on another rule's finding or on no target: %v %v", as, err)
	}
}

func TestBuild(t *testing.T) {
	rules := rule.All(rule.Config{})
	rems, err := Build(rules, []string{rule.StaleNATFlowID}, Settings{Grace: time.Second, Budget: 3, BudgetInterval: time.Minute}, &Flows{})
	if err != nil || len(rems) != 1 || rems[0].ID() != rule.StaleNATFlowID || rems[0].Budget.Max != 3 || rems[0].Grace != time.Second {
		t.Fatalf("%+v %v", rems, err)
	}
	if _, err := Build(rules, []string{"flush-everything"}, Settings{}, &Flows{}); err == nil || !strings.Contains(err.Error(), "the remedies are: gossip-force-leave, hostlocal-reserve, stale-nat-flow") {
		t.Errorf("unknown remedy: %v", err)
	}
	if _, err := Build(rules, []string{rule.StaleNATFlowID}, Settings{}); err == nil || !strings.Contains(err.Error(), "acts on conntrack-flow, which nothing here can act on") {
		t.Errorf("no actuator: %v", err)
	}
}

// A target's grace period starts when its evidence came to be known, as
// the caller says, but never before the last pass (or Reset) ended, which
// did not report it, nor after this pass began.
func TestGraceStartsWhenTheEvidenceCame(t *testing.T) {
	c := t0()
	a, b, d := staleFinding("10.244.3.47", 1000), staleFinding("10.244.3.48", 1001), staleFinding("10.244.3.49", 1002)
	r := newRemedy(c, newTable(a, b, d))
	ctx := context.Background()
	if _, err := r.Apply(ctx, ready(), nil); err != nil {
		t.Fatal(err)
	}
	last := c.Now()
	c.Advance(8 * time.Second)
	now := c.Now()
	since := func(f finding.Finding) time.Time {
		switch f.Target.Group() {
		case "10.244.3.47":
			return last.Add(time.Second)
		case "10.244.3.48":
			return last.Add(-time.Hour) // before the last pass, which did not report it
		}
		return time.Time{} // unknown
	}
	all := []finding.Finding{a, b, d}
	as, err := r.ApplySince(ctx, ready(), all, since)
	if err != nil || results(as) != "pending,pending,pending" {
		t.Fatalf("%s, %v", results(as), err)
	}
	for i, want := range []time.Time{last.Add(time.Second + r.Grace), last.Add(r.Grace), now.Add(r.Grace)} {
		if !as[i].Due.Equal(want) {
			t.Errorf("finding %d due %s, want %s", i, as[i].Due, want)
		}
	}
	c.Advance(3 * time.Second)
	if as, err := r.ApplySince(ctx, ready(), all, since); err != nil || results(as) != "done,done,pending" {
		t.Fatalf("3 s later: %s, %v", results(as), err)
	}
	r.Reset()
	reset := c.Now()
	c.Advance(time.Second)
	as, _ = r.ApplySince(ctx, ready(), []finding.Finding{d}, func(finding.Finding) time.Time { return reset.Add(-time.Minute) })
	if want := reset.Add(r.Grace); results(as) != "pending" || !as[0].Due.Equal(want) {
		t.Errorf("after a Reset: %s, due %s, want pending, due %s", results(as), as[0].Due, want)
	}
}
