package remedy

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ghostwatch/ghostwatch/finding"
	"github.com/ghostwatch/ghostwatch/rule"
	"github.com/ghostwatch/ghostwatch/snapshot"
)

// fakeDeleter records deletes; the kernel is tested in the lab package.
type fakeDeleter struct {
	deleted []snapshot.Flow
	err     error
}

func (d *fakeDeleter) Delete(f *snapshot.Flow) error {
	if d.err != nil {
		return d.err
	}
	d.deleted = append(d.deleted, *f)
	return nil
}

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func ready() *snapshot.Snapshot {
	return &snapshot.Snapshot{Sources: []snapshot.SourceStatus{
		{Name: "kube", Status: snapshot.StatusOK}, {Name: "conntrack", Status: snapshot.StatusOK}}}
}

func staleFinding(sport uint16) finding.Finding {
	f := &snapshot.Flow{Proto: snapshot.ProtoTCP, ID: uint32(sport),
		Orig:  snapshot.Tuple{Src: netip.MustParseAddr("10.244.1.50"), Dst: netip.MustParseAddr("10.96.0.10"), SrcPort: sport, DstPort: 80},
		Reply: snapshot.Tuple{Src: netip.MustParseAddr("10.244.3.47"), Dst: netip.MustParseAddr("10.244.1.50"), SrcPort: 8080, DstPort: sport}}
	return finding.Finding{Rule: rule.StaleNATFlowID, Severity: finding.Warning, Flow: f}
}

func newRemedy(c *clock, d *fakeDeleter) *StaleFlows {
	return &StaleFlows{Grace: 10 * time.Second, Budget: &Budget{Max: 5, Interval: time.Minute}, Deleter: d,
		Recheck: func(*snapshot.Flow) error { return nil }, Now: c.now}
}

func results(as []Action) string {
	var out []string
	for _, a := range as {
		out = append(out, string(a.Result))
	}
	return strings.Join(out, ",")
}

func TestGracePeriodMustHoldContinuously(t *testing.T) {
	c := &clock{time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	d := &fakeDeleter{}
	r := newRemedy(c, d)
	f := staleFinding(1000)
	if as, err := r.Apply(ready(), []finding.Finding{f}); err != nil || results(as) != "pending" {
		t.Fatalf("first sight: %s, %v", results(as), err)
	}
	c.t = c.t.Add(5 * time.Second)
	// One audit without the finding: the grace period starts over.
	if as, _ := r.Apply(ready(), nil); len(as) != 0 {
		t.Fatalf("actions without findings: %v", as)
	}
	c.t = c.t.Add(6 * time.Second)
	if as, _ := r.Apply(ready(), []finding.Finding{f}); results(as) != "pending" {
		t.Fatalf("after a gap the grace period must restart: %s", results(as))
	}
	c.t = c.t.Add(10 * time.Second)
	as, err := r.Apply(ready(), []finding.Finding{f})
	if err != nil || results(as) != "deleted" || len(d.deleted) != 1 || d.deleted[0] != *f.Flow {
		t.Fatalf("after the grace period: %s, %v, deleted %v", results(as), err, d.deleted)
	}
}

func TestIncompleteEvidenceDoesNothingAndResetsGrace(t *testing.T) {
	c := &clock{time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	d := &fakeDeleter{}
	r := newRemedy(c, d)
	f := staleFinding(1000)
	r.Apply(ready(), []finding.Finding{f})
	c.t = c.t.Add(20 * time.Second)
	s := ready()
	s.Sources[0] = snapshot.SourceStatus{Name: "kube", Status: snapshot.StatusError, Detail: "watch stale"}
	as, err := r.Apply(s, []finding.Finding{f})
	if !errors.Is(err, ErrIncompleteEvidence) || len(as) != 0 || len(d.deleted) != 0 {
		t.Fatalf("with the API down: %v, %v, deleted %v", as, err, d.deleted)
	}
	if as, _ := r.Apply(ready(), []finding.Finding{f}); results(as) != "pending" {
		t.Fatalf("after incomplete evidence the grace period must restart: %s", results(as))
	}
}

func TestRecheckRefuses(t *testing.T) {
	c := &clock{time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	d := &fakeDeleter{}
	r := newRemedy(c, d)
	r.Grace = 0
	r.Recheck = func(*snapshot.Flow) error { return fmt.Errorf("10.244.3.47:8080 is an endpoint of ns/svc again") }
	as, err := r.Apply(ready(), []finding.Finding{staleFinding(1)})
	if err != nil || results(as) != "refused" || !strings.Contains(as[0].Reason, "endpoint of ns/svc again") || len(d.deleted) != 0 {
		t.Fatalf("%s %q %v %v", results(as), as[0].Reason, err, d.deleted)
	}
}

func TestBudgetRefusesTheWholeBatch(t *testing.T) {
	c := &clock{time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	d := &fakeDeleter{}
	r := newRemedy(c, d)
	r.Grace = 0
	var fs []finding.Finding
	for i := 0; i < 6; i++ {
		fs = append(fs, staleFinding(uint16(1000+i)))
	}
	as, err := r.Apply(ready(), fs)
	var be *BudgetError
	if !errors.As(err, &be) || be.Due != 6 || be.Remaining != 5 || len(d.deleted) != 0 {
		t.Fatalf("err %v, deleted %d", err, len(d.deleted))
	}
	if results(as) != "refused,refused,refused,refused,refused,refused" {
		t.Fatalf("results %s", results(as))
	}
	// Within budget it acts, and spends it.
	as, err = r.Apply(ready(), fs[:3])
	if err != nil || results(as) != "deleted,deleted,deleted" {
		t.Fatalf("%s %v", results(as), err)
	}
	if _, err := r.Apply(ready(), fs[3:6]); !errors.As(err, &be) || be.Remaining != 2 {
		t.Fatalf("the budget must remember what was spent: %v", err)
	}
}

func TestDryRunDeletesNothingAndNeedsNoBudget(t *testing.T) {
	c := &clock{time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	d := &fakeDeleter{}
	r := newRemedy(c, d)
	r.Grace, r.DryRun, r.Budget = 0, true, nil
	as, err := r.Apply(ready(), []finding.Finding{staleFinding(1), staleFinding(2)})
	if err != nil || results(as) != "dry-run,dry-run" || len(d.deleted) != 0 || !strings.Contains(as[0].Reason, "would delete") {
		t.Fatalf("%s %v %v", results(as), err, d.deleted)
	}
}

func TestKernelOutcomes(t *testing.T) {
	c := &clock{time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	for _, tc := range []struct {
		err  error
		want Result
	}{
		{fmt.Errorf("delete: %w", syscall.ENOENT), Gone},
		{fmt.Errorf("delete: %w", syscall.EPERM), Failed},
	} {
		r := newRemedy(c, &fakeDeleter{err: tc.err})
		r.Grace = 0
		as, err := r.Apply(ready(), []finding.Finding{staleFinding(1)})
		if err != nil || as[0].Result != tc.want {
			t.Errorf("kernel says %v: %s, %v; want %s", tc.err, results(as), err, tc.want)
		}
	}
}

func TestOtherRulesAreIgnored(t *testing.T) {
	c := &clock{time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	d := &fakeDeleter{}
	r := newRemedy(c, d)
	r.Grace = 0
	f := staleFinding(1)
	f.Rule = rule.MisdeliveredFlowID
	if as, err := r.Apply(ready(), []finding.Finding{f}); err != nil || len(as) != 0 || len(d.deleted) != 0 {
		t.Fatalf("acted on another rule's finding: %v %v", as, err)
	}
}
