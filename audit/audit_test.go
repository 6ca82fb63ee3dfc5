package audit

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/ghostwatch/ghostwatch/finding"
	"github.com/ghostwatch/ghostwatch/rule"
	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source"
)

// fakeSource records what it was told and what it saw of the snapshot.
type fakeSource struct {
	name     string
	err      error
	readers  []any
	narrowed bool
	sawKube  bool
	fill     func(s *snapshot.Snapshot)
}

func (f *fakeSource) Name() string { return f.name }

func (f *fakeSource) Narrow(readers []any) { f.narrowed, f.readers = true, readers }

func (f *fakeSource) Collect(_ context.Context, s *snapshot.Snapshot) error {
	f.sawKube = s.Kube != nil
	if f.err != nil {
		return f.err
	}
	if f.fill != nil {
		f.fill(s)
	}
	return nil
}

func (f *fakeSource) Describe(*snapshot.Snapshot) string { return f.name + " read" }

// fakeRule reports one finding per run, on the sources it names.
type fakeRule struct {
	id      string
	sources []string
}

func (r *fakeRule) Info() rule.Info { return rule.Info{ID: r.id, Sources: r.sources} }

func (r *fakeRule) Evaluate(*snapshot.Snapshot) []finding.Finding {
	return []finding.Finding{{Rule: r.id, Severity: finding.Warning}}
}

// The audit runs any sources and rules: in order, each source seeing what
// the earlier ones collected and told which rules will read it; each rule
// run only on complete sources, and skipped with the reason otherwise.
func TestRunIsGeneric(t *testing.T) {
	kube := &fakeSource{name: "kube", fill: func(s *snapshot.Snapshot) { s.Kube = &snapshot.Kube{} }}
	ledger := &fakeSource{name: "ledger"}
	broken := &fakeSource{name: "broken", err: errors.New("cannot read /var/lib/thing: permission denied")}
	absent := &fakeSource{name: "absent", err: fmt.Errorf("%w: not on this host", source.ErrUnsupported)}
	a := &fakeRule{"reads-ledger", []string{"kube", "ledger"}}
	b := &fakeRule{"reads-broken", []string{"kube", "broken"}}
	c := &fakeRule{"reads-absent", []string{"absent"}}
	d := &fakeRule{"reads-nothing-collected", []string{"elsewhere"}}
	res := Run(context.Background(), Config{Sources: []source.Source{kube, ledger, broken, absent}, Rules: []rule.Rule{a, b, c, d}})

	if !ledger.sawKube {
		t.Error("a source did not see what the source before it collected")
	}
	if !ledger.narrowed || len(ledger.readers) != 1 || ledger.readers[0] != a {
		t.Errorf("the ledger was told its readers are %v", ledger.readers)
	}
	if len(kube.readers) != 2 {
		t.Errorf("kube was told of %d readers, want 2", len(kube.readers))
	}
	if len(res.Findings) != 1 || res.Findings[0].Rule != "reads-ledger" {
		t.Errorf("findings %+v", res.Findings)
	}
	skipped := map[string]string{}
	for _, s := range res.Skipped {
		skipped[s.Rule] = s.Reason
	}
	for id, want := range map[string]string{
		"reads-broken":            "broken: error: cannot read /var/lib/thing: permission denied",
		"reads-absent":            "absent: unsupported",
		"reads-nothing-collected": "elsewhere: not collected",
	} {
		if !strings.Contains(skipped[id], want) {
			t.Errorf("%s skipped with %q, want it to say %q", id, skipped[id], want)
		}
	}
	if st, _ := res.Snapshot.Source("ledger"); st.Detail != "ledger read" {
		t.Errorf("a complete source's detail = %q", st.Detail)
	}
	// Only a failed source makes the pass incomplete; a ledger that does
	// not exist here does not.
	if err := res.Incomplete(); err == nil || !strings.Contains(err.Error(), "broken error") || strings.Contains(err.Error(), "absent") {
		t.Errorf("Incomplete() = %v", err)
	}
}

// Findings sort by address, not by text: 10.0.0.9 before 10.0.0.10, and
// client port 999 before 1000.
func TestSortComparesAddressesAsAddresses(t *testing.T) {
	flowTo := func(ip string, sport uint16) finding.Finding {
		f := snapshot.Flow{Proto: snapshot.ProtoTCP,
			Orig:  snapshot.Tuple{Src: netip.MustParseAddr("10.244.1.5"), Dst: netip.MustParseAddr("10.96.0.1"), SrcPort: sport, DstPort: 80},
			Reply: snapshot.Tuple{Src: netip.MustParseAddr(ip), SrcPort: 8080}}
		return finding.Finding{Rule: "r", Severity: finding.Warning, Subject: finding.Subject{Service: "ns/s", IP: ip, Flow: f.String()},
			Target: finding.NewFlowTarget("ns/s", f)}
	}
	fs := []finding.Finding{flowTo("10.0.0.10", 1), flowTo("10.0.0.9", 1000), flowTo("10.0.0.9", 999), flowTo("10.0.0.100", 1)}
	Sort(fs)
	var got []string
	for _, f := range fs {
		got = append(got, f.Subject.Flow+" to "+f.Subject.IP)
	}
	want := []string{
		"tcp 10.244.1.5:999 -> 10.96.0.1:80 to 10.0.0.9",
		"tcp 10.244.1.5:1000 -> 10.96.0.1:80 to 10.0.0.9",
		"tcp 10.244.1.5:1 -> 10.96.0.1:80 to 10.0.0.10",
		"tcp 10.244.1.5:1 -> 10.96.0.1:80 to 10.0.0.100",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Errorf("order:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}
