package audit

import (
	"context"
	"fmt"
	"net/netip"
	"sort"
	"strings"
	"time"

	"github.com/ghostwatch/ghostwatch/finding"
	"github.com/ghostwatch/ghostwatch/rule"
	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source"
	"github.com/ghostwatch/ghostwatch/source/conntrack"
)

// Config says what one audit reads and judges.
type Config struct {
	// NodeName is the node whose conntrack table is read.
	NodeName string
	// Kube reads the cluster objects.
	Kube source.Source
	// Conntrack returns the conntrack source, given the filter that keeps
	// only flows to this node's service frontends. Nil skips conntrack.
	Conntrack func(keep conntrack.Keep) source.Source
	// NodePortAddresses is kube-proxy's --nodeport-addresses.
	NodePortAddresses []netip.Prefix
	// Rules to evaluate.
	Rules []rule.Rule
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// SuspectsOnly keeps, of the flows to a service frontend, only those a
	// rule could report (judged as the table streams by), so that memory
	// grows with the suspects and not with the table. The rules see no
	// healthy flow then, which none of them needs.
	SuspectsOnly bool
	// Judge configures the judgement SuspectsOnly makes: it must be the
	// conntrack rules' own configuration, or a suspect could be missed.
	Judge rule.ConntrackConfig
}

// Result is a Report plus what produced it.
type Result struct {
	finding.Report
	Snapshot *snapshot.Snapshot
	Skipped  []rule.Skipped
}

// Run collects and judges once. Sources run in order: kube first, so that
// the conntrack dump keeps only the flows that address a known frontend.
func Run(ctx context.Context, cfg Config) *Result {
	now := cfg.Now
	if now == nil {
		now = time.Now
	}
	var srcs []source.Source
	if cfg.Kube != nil {
		srcs = append(srcs, cfg.Kube)
	}
	s := source.Collect(ctx, now, cfg.NodeName, srcs...)
	if cfg.Conntrack != nil {
		keep := conntrack.Keep(conntrack.KeepDNAT)
		matched := 0
		if s.Kube != nil {
			match := rule.NewFrontends(s.Kube, cfg.NodeName, cfg.NodePortAddresses).Match
			keep = func(f *snapshot.Flow) bool {
				if !match(f) {
					return false
				}
				matched++
				return true
			}
			if cfg.SuspectsOnly {
				judge := rule.NewJudge(s, cfg.Judge)
				keep = func(f *snapshot.Flow) bool {
					if !match(f) {
						return false
					}
					matched++
					return judge.Suspect(f)
				}
			}
		}
		source.CollectInto(ctx, now, s, cfg.Conntrack(keep))
		if s.Conntrack != nil && s.Conntrack.Matched == 0 {
			s.Conntrack.Matched = matched
		}
	}
	describeSources(s)
	fs, skipped := rule.Run(s, cfg.Rules)
	sortFindings(fs)
	if fs == nil {
		fs = []finding.Finding{}
	}
	return &Result{
		Report:   finding.Report{Findings: fs, Sources: s.Sources},
		Snapshot: s,
		Skipped:  skipped,
	}
}

// Incomplete returns an error naming every source that was not read
// completely, or nil. A report with incomplete sources claims nothing about
// the ledgers those sources read.
func (r *Result) Incomplete() error {
	var bad []string
	for _, st := range r.Sources {
		if st.Status != snapshot.StatusOK {
			bad = append(bad, fmt.Sprintf("%s %s: %s", st.Name, st.Status, st.Detail))
		}
	}
	if len(bad) == 0 {
		return nil
	}
	return fmt.Errorf("%s", strings.Join(bad, "; "))
}

func sortFindings(fs []finding.Finding) {
	sort.SliceStable(fs, func(i, j int) bool {
		a, b := fs[i], fs[j]
		if a.Rule != b.Rule {
			return a.Rule < b.Rule
		}
		if a.Severity != b.Severity {
			return a.Severity > b.Severity
		}
		if a.Subject.Service != b.Subject.Service {
			return a.Subject.Service < b.Subject.Service
		}
		return a.Subject.Flow < b.Subject.Flow
	})
}

// describeSources says what each complete source read, for reports.
func describeSources(s *snapshot.Snapshot) {
	for i := range s.Sources {
		st := &s.Sources[i]
		if st.Status != snapshot.StatusOK || st.Detail != "" {
			continue
		}
		switch {
		case st.Name == "kube" && s.Kube != nil:
			k := s.Kube
			st.Detail = fmt.Sprintf("%d pods, %d services, %d endpoints, %d nodes", len(k.Pods), len(k.Services), len(k.Endpoints), len(k.Nodes))
		case st.Name == conntrack.Name && s.Conntrack != nil:
			st.Detail = fmt.Sprintf("%d entries, %d DNATed to a service frontend of node %s", s.Conntrack.Seen, s.Conntrack.Matched, s.NodeName)
		}
	}
}
