package rule

import (
	"fmt"
	"net/netip"
	"strings"

	"github.com/ghostwatch/ghostwatch/finding"
	"github.com/ghostwatch/ghostwatch/snapshot"
)

// IPAMLedgerCorruptID is the stable ID of the ipam-ledger-corrupt rule.
const IPAMLedgerCorruptID = "ipam-ledger-corrupt"

// IPAMLedgerCorrupt finds Calico IPAM objects that do not hold together:
// what calicoctl ipam check counts as malformed blocks, handles referencing
// missing blocks, and blocks naming handles that do not exist; and any
// object whose fields cannot be read. Calico's own operations trust these
// objects: a block that lists an allocated address as free hands it to a
// second pod (critical); the others make releases fail or leak addresses.
type IPAMLedgerCorrupt struct{}

// Info describes the rule.
func (*IPAMLedgerCorrupt) Info() Info {
	return Info{
		ID:      IPAMLedgerCorruptID,
		Sources: []string{"calico"},
		Scope:   ScopeCluster,
		Columns: []string{"node"},
		Detail: func(f finding.Finding) string {
			return fmt.Sprintf("%v: %v", f.Evidence["object"], f.Evidence["first_problem"])
		},
		Summary: "a Calico IPAM object does not hold together: Calico may hand out an address in use, fail to release one, or leak it",
		Fix:     "back up the IPAM objects (kubectl get ipamblocks,ipamhandles -o yaml), then repair with calicoctl ipam check and calicoctl ipam release --from-report",
		Runbook: "docs/runbooks/ipam-ledger-corrupt.md",
	}
}

// Evaluate returns one finding per object that does not hold together.
func (r *IPAMLedgerCorrupt) Evaluate(s *snapshot.Snapshot) []finding.Finding {
	c := s.Calico
	if c == nil {
		return nil
	}
	blocks := make(map[netip.Prefix]bool, len(c.Blocks))
	for i := range c.Blocks {
		if b := &c.Blocks[i]; b.CIDR.IsValid() && !b.Deleted {
			blocks[b.CIDR.Masked()] = true
		}
	}
	handles := make(map[string]bool, len(c.Handles))
	for i := range c.Handles {
		if !c.Handles[i].Deleted {
			handles[c.Handles[i].ID] = true
		}
	}
	var out []finding.Finding
	for i := range c.Blocks {
		b := &c.Blocks[i]
		problems := append([]string(nil), b.Malformed...)
		missing := map[string]bool{}
		for _, a := range b.Allocations {
			if a.HandleID != "" && a.HandleID != snapshot.WindowsReservedHandle && !handles[a.HandleID] && !missing[a.HandleID] {
				missing[a.HandleID] = true
				problems = append(problems, fmt.Sprintf("allocation %d (%s) names handle %s, which does not exist: releasing by handle will not free it", a.Ordinal, a.IP, a.HandleID))
			}
		}
		if len(problems) == 0 {
			continue
		}
		sev := finding.Warning
		var ips []string
		for _, a := range b.Reissuable {
			ips = append(ips, a.String())
		}
		if len(ips) > 0 {
			sev = finding.Critical
		}
		out = append(out, corrupt(sev, "IPAMBlock", b.Name, b.Affinity, problems, ips))
	}
	for i := range c.Handles {
		h := &c.Handles[i]
		problems := append([]string(nil), h.Malformed...)
		for _, hb := range h.Blocks {
			if hb.CIDR.IsValid() && hb.Count > 0 && !blocks[hb.CIDR.Masked()] {
				problems = append(problems, fmt.Sprintf("it counts %d addresses in block %s, which does not exist", hb.Count, hb.CIDR))
			}
		}
		if len(problems) > 0 {
			out = append(out, corrupt(finding.Warning, "IPAMHandle", h.Name, "", problems, nil))
		}
	}
	for i := range c.Affinities {
		if a := &c.Affinities[i]; len(a.Malformed) > 0 {
			out = append(out, corrupt(finding.Warning, "BlockAffinity", a.Name, a.Node, a.Malformed, nil))
		}
	}
	for i := range c.Pools {
		if p := &c.Pools[i]; len(p.Malformed) > 0 {
			out = append(out, corrupt(finding.Warning, "IPPool", p.Name, "", p.Malformed, nil))
		}
	}
	return out
}

func corrupt(sev finding.Severity, kind, name, node string, problems, reissuable []string) finding.Finding {
	ev := map[string]any{
		"ledger":        "calico",
		"object":        kind + "/" + name,
		"problems":      problems,
		"first_problem": problems[0],
	}
	msg := fmt.Sprintf("Calico %s %s does not hold together: %s", kind, name, strings.Join(problems, "; "))
	if len(reissuable) > 0 {
		ev["reissuable"] = reissuable
		msg += fmt.Sprintf(" — Calico may hand %s, allocated, to another pod", strings.Join(reissuable, ", "))
	}
	return finding.Finding{
		Rule:     IPAMLedgerCorruptID,
		Severity: sev,
		Message:  msg,
		Subject:  finding.Subject{Node: node},
		Evidence: ev,
	}
}
