package rule

import (
	"fmt"
	"sort"
	"strings"
)

// Config holds the settings of every rule.
type Config struct {
	Conntrack ConntrackConfig
}

// All returns every rule, in catalog order. This is the one place rules and
// their remedies are registered: scan, the agent and the controller take
// them from here, and nothing outside this package names a rule.
func All(cfg Config) []Rule {
	ct := newConntrackRules(cfg.Conntrack)
	return []Rule{
		&StaleNATFlow{ct},
		&MisdeliveredFlow{ct},
		&DuplicatePodIP{},
		&IPAMUnbookedIP{},
		&IPAMLeakedIP{},
		&StaleNodenameFile{},
		&IPAMMisbooked{},
		&IPAMLedgerCorrupt{},
		&GossipGhostMember{},
		&GossipIPIdentity{},
	}
}

// Select returns the rules whose IDs are listed, or all of them when ids is
// empty. An unknown ID is an error that lists the known ones.
func Select(cfg Config, ids []string) ([]Rule, error) {
	all := All(cfg)
	if len(ids) == 0 {
		return all, nil
	}
	var out []Rule
	for _, id := range ids {
		r, ok := Find(all, id)
		if !ok {
			return nil, fmt.Errorf("unknown rule %q (known rules: %s)", id, strings.Join(IDs(all), ", "))
		}
		out = append(out, r)
	}
	return out, nil
}

// Find returns the rule with the given ID.
func Find(rules []Rule, id string) (Rule, bool) {
	for _, r := range rules {
		if r.Info().ID == id {
			return r, true
		}
	}
	return nil, false
}

// IDs returns the rules' IDs, sorted.
func IDs(rules []Rule) []string {
	var out []string
	for _, r := range rules {
		out = append(out, r.Info().ID)
	}
	sort.Strings(out)
	return out
}

// InScope returns the rules that run in the given scope, in catalog order.
func InScope(rules []Rule, scope Scope) []Rule {
	var out []Rule
	for _, r := range rules {
		if r.Info().RunsIn(scope) {
			out = append(out, r)
		}
	}
	return out
}

// ByRemedy returns the rule whose remedy has the given ID.
func ByRemedy(rules []Rule, id string) (Rule, bool) {
	for _, r := range rules {
		if rem := r.Info().Remedy; rem != nil && rem.ID == id {
			return r, true
		}
	}
	return nil, false
}

// RemedyIDs returns the IDs of the rules' remedies, sorted.
func RemedyIDs(rules []Rule) []string {
	var out []string
	for _, r := range rules {
		if rem := r.Info().Remedy; rem != nil {
			out = append(out, rem.ID)
		}
	}
	sort.Strings(out)
	return out
}
