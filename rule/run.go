package rule

import (
	"fmt"
	"slices"
	"strings"

	"github.com/ghostwatch/ghostwatch/finding"
	"github.com/ghostwatch/ghostwatch/snapshot"
)

// Run evaluates every rule whose sources are ready in s. A rule whose
// evidence is incomplete or unsupported is skipped, with the reason, never
// run on partial data: an unreachable API server must not look like "every
// backend is gone".
func Run(s *snapshot.Snapshot, rules []Rule) ([]finding.Finding, []finding.Skipped) {
	var each [][]finding.Finding
	var skipped []finding.Skipped
	n := 0
	for _, r := range rules {
		info := r.Info()
		if cause := guarded(s, info.Guards); cause != "" {
			skipped = append(skipped, finding.Skipped{Rule: info.ID, Reason: "not judged here (" + cause + ")", Causes: []string{cause}, NotApplicable: true, Blind: true})
			continue
		}
		bad, kinds := s.NotReady(info.Sources...), missingKinds(s, r)
		switch {
		case len(bad) > 0:
			na, ng := unsupported(s, info.Sources, false)
			causes := missed(s, info.Sources)
			if kinds != "" && !na {
				// A ledger that does not exist here misses nothing; one
				// not given, or failed, misses as much as the kinds.
				bad, causes = append(bad, kinds), append(causes, kinds)
			}
			skipped = append(skipped, finding.Skipped{Rule: info.ID, Reason: "sources not ready (" + strings.Join(bad, "; ") + ")", Causes: causes,
				NotApplicable: na, NotGiven: ng})
			continue
		case kinds != "":
			skipped = append(skipped, finding.Skipped{Rule: info.ID, Reason: "sources not ready (" + kinds + ")", Causes: []string{kinds}, NotGiven: true})
			continue
		}
		if err := anyLedger(s, info.Ledgers); err != nil {
			names := ledgerSources(info.Ledgers)
			na, ng := unsupported(s, names, true)
			skipped = append(skipped, finding.Skipped{Rule: info.ID, Reason: err.Error(), Causes: missed(s, names), NotApplicable: na, NotGiven: ng})
			continue
		}
		fs := r.Evaluate(s)
		each = append(each, fs)
		n += len(fs)
	}
	if len(each) == 1 {
		return each[0], skipped
	}
	var out []finding.Finding
	if n > 0 {
		out = make([]finding.Finding, 0, n)
	}
	for _, fs := range each {
		out = append(out, fs...)
	}
	return out, skipped
}

// guarded returns why a guard collected in s says the rule cannot see its
// ledger here, or "".
func guarded(s *snapshot.Snapshot, guards []string) string {
	for _, g := range guards {
		if st, ok := s.Source(g); ok && st.Status == snapshot.StatusUnsupported {
			return g + ": " + st.Detail
		}
	}
	return ""
}

// missed returns why each of the named sources is not ready, leaving out
// those whose ledger does not exist here (unsupported) when another is
// missed: that one missed nothing.
func missed(s *snapshot.Snapshot, names []string) []string {
	var out, absent []string
	for _, n := range names {
		st, ok := s.Source(n)
		bad := s.NotReady(n)
		switch {
		case len(bad) == 0:
		case ok && st.Status == snapshot.StatusUnsupported:
			absent = append(absent, bad...)
		default:
			out = append(out, bad...)
		}
	}
	if len(out) == 0 {
		return absent
	}
	return out
}

// missingKinds says, when r reads kinds of cluster objects that saved
// objects lack (snapshot.Kube.Missing), which: "kube: not given: no
// Service, no EndpointSlice in the objects given; save them with: ...".
func missingKinds(s *snapshot.Snapshot, r Rule) string {
	k := s.Kube
	if k == nil || len(k.Missing) == 0 || !slices.Contains(r.Info().Reads(), "kube") {
		return ""
	}
	var lack []string
	for _, kind := range snapshot.KindsOf(r) {
		if slices.Contains(k.Missing, kind) {
			lack = append(lack, kind)
		}
	}
	if len(lack) == 0 {
		return ""
	}
	res := make([]string, len(lack))
	for i, kind := range lack {
		res[i] = strings.ToLower(kind) + "s"
	}
	return fmt.Sprintf("kube: %s: no %s in the objects given; save them with: "+k.SaveMissing, snapshot.StatusNotGiven, strings.Join(lack, ", no "), strings.Join(res, ","))
}

// ReadersOf returns, as a source's Narrow expects them, the rules that read
// the named source.
func ReadersOf(rules []Rule, source string) []any {
	var out []any
	for _, r := range rules {
		for _, name := range r.Info().Reads() {
			if name == source {
				out = append(out, r)
				break
			}
		}
	}
	return out
}

// unsupported reports, of the sources of names that are not ready,
// whether each was found unsupported (na: the ledger does not exist here,
// nothing was missed), or each absent and one of them not given (ng: a
// scan of saved evidence had no file of it; what it would judge is not
// judged, and said). With absentToo, a source not collected at all counts
// as unsupported: a ledger this process does not read (the agent reads no
// Calico datastore, the controller no node's files).
func unsupported(s *snapshot.Snapshot, names []string, absentToo bool) (na, ng bool) {
	na, absent := true, true
	for _, n := range names {
		st, ok := s.Source(n)
		switch {
		case !ok && absentToo, ok && st.Status == snapshot.StatusOK:
		case ok && st.Status == snapshot.StatusUnsupported:
		case ok && st.Status == snapshot.StatusNotGiven:
			na, ng = false, true
		default:
			na, absent = false, false
		}
	}
	return na, ng && absent
}

// anyLedger returns nil when ledgers is empty or one of them is ready, and
// otherwise why none is.
func anyLedger(s *snapshot.Snapshot, ledgers []Ledger) error {
	if len(ledgers) == 0 {
		return nil
	}
	names := ledgerSources(ledgers)
	for _, n := range names {
		if s.Ready(n) == nil {
			return nil
		}
	}
	return fmt.Errorf("no IPAM ledger ready: %w", s.Ready(names...))
}

func ledgerSources(ledgers []Ledger) []string {
	var out []string
	for _, l := range ledgers {
		out = append(out, l.Source)
	}
	return out
}

// ready reports whether the source name is ready in s: a rule with
// Ledgers judges each ledger for which it is.
func ready(s *snapshot.Snapshot, name string) bool { return s.Ready(name) == nil }
