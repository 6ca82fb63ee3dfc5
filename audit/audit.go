package audit

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/ghostwatch/ghostwatch/finding"
	"github.com/ghostwatch/ghostwatch/rule"
	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source"
)

// Config says what one audit reads and judges.
type Config struct {
	// NodeName is the node the snapshot is taken on (whose conntrack table
	// is read); empty for a cluster-wide pass.
	NodeName string
	// Sources run in order, each seeing what the earlier ones collected:
	// the cluster objects first, so that a ledger read after them can keep
	// only what concerns them. A source that implements source.Narrower is
	// told, before it collects, which of the Rules will read it; one that
	// implements source.Resolver completes its collection once every
	// source has collected.
	Sources []source.Source
	// Rules to evaluate. A rule runs only when every source it reads was
	// collected completely; otherwise the report says why it was skipped.
	Rules []rule.Rule
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Result is a Report plus the snapshot that produced it.
type Result struct {
	finding.Report
	Snapshot *snapshot.Snapshot
	// WrongNode, when set, says that the conntrack table judged was most
	// likely read on another node than the snapshot's (rule.WrongNode).
	WrongNode error
}

// Run collects and judges once.
func Run(ctx context.Context, cfg Config) *Result {
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	s := &snapshot.Snapshot{Taken: now(), NodeName: cfg.NodeName}
	// What the rules derive from the snapshot (their filters while the
	// sources collect, their indexes while they judge) lives for this pass
	// only.
	s.BeginPass()
	defer s.EndPass()
	for _, src := range cfg.Sources {
		if n, ok := src.(source.Narrower); ok {
			n.Narrow(rule.ReadersOf(cfg.Rules, src.Name()))
		}
		source.CollectInto(ctx, now, s, src)
	}
	source.Resolve(ctx, now, s, cfg.Sources...)
	res := Judge(s, cfg.Rules)
	res.WrongNode = rule.WrongNode(cfg.Rules, s)
	return res
}

// Judge evaluates rules on a snapshot that is already collected, in one
// pass.
func Judge(s *snapshot.Snapshot, rules []rule.Rule) *Result {
	if !s.InPass() {
		s.BeginPass()
		defer s.EndPass()
	}
	fs, skipped := rule.Run(s, rules)
	Sort(fs)
	if fs == nil {
		fs = []finding.Finding{}
	}
	return &Result{
		Report: finding.Report{Node: s.NodeName, CapturedAt: capturedAt(s), Summary: finding.Summarize(fs),
			Findings: fs, Sources: s.Sources, Skipped: skipped},
		Snapshot: s,
	}
}

// capturedAt is when s's evidence was captured: when a saved listing was
// (snapshot.Snapshot.CapturedAt), else when s was taken, to the second.
func capturedAt(s *snapshot.Snapshot) time.Time {
	t := s.Taken
	if !s.CapturedAt.IsZero() {
		t = s.CapturedAt
	}
	if t.IsZero() {
		return t
	}
	return t.UTC().Truncate(time.Second)
}

// Incomplete returns an error naming every source that failed, or nil. A
// report with a failed source claims nothing about the ledger that source
// reads. A source whose ledger does not exist here (unsupported) is not a
// failure; the rules that read it are skipped and say so.
func (r *Result) Incomplete() error { return r.IncompleteOf() }

// IncompleteOf is Incomplete for the named sources only (every source when
// none is named).
func (r *Result) IncompleteOf(names ...string) error {
	var bad []string
	for _, st := range r.Sources {
		if len(names) > 0 && !slices.Contains(names, st.Name) {
			continue
		}
		if st.Status == snapshot.StatusError {
			bad = append(bad, fmt.Sprintf("%s %s: %s", st.Name, st.Status, st.Detail))
		}
	}
	if len(bad) == 0 {
		return nil
	}
	return fmt.Errorf("%s", strings.Join(bad, "; "))
}

// Sort orders findings by rule, then worst first, then by subject: the
// Service, the IP and the flow's tuple, addresses compared as addresses
// (10.0.0.9 before 10.0.0.10).
func Sort(fs []finding.Finding) {
	sort.SliceStable(fs, func(i, j int) bool {
		a, b := &fs[i], &fs[j]
		if a.Rule != b.Rule {
			return a.Rule < b.Rule
		}
		if a.Severity != b.Severity {
			return a.Severity > b.Severity
		}
		if a.Subject.Service != b.Subject.Service {
			return a.Subject.Service < b.Subject.Service
		}
		// Targets that order themselves do (flows by their addresses as
		// the kernel holds them); the others by their subject's address.
		if o, ok := a.Target.(finding.Ordered); ok && b.Target != nil && a.Target.Kind() == b.Target.Kind() {
			if c := o.Compare(b.Target); c != 0 {
				return c < 0
			}
		} else if c := compareAddrs(a.Subject.IP, b.Subject.IP); c != 0 {
			return c < 0
		}
		return a.Subject.Flow < b.Subject.Flow
	})
}

// compareAddrs compares two addresses as addresses when both parse, and
// as text otherwise.
func compareAddrs(a, b string) int {
	pa, erra := netip.ParseAddr(a)
	pb, errb := netip.ParseAddr(b)
	if erra == nil && errb == nil {
		return pa.Compare(pb)
	}
	return strings.Compare(a, b)
}
