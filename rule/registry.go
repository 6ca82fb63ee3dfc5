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

// All returns every rule, in catalog order. This is the one place rules are
// registered.
func All(cfg Config) []Rule {
	return []Rule{
		StaleNATFlow{Config: cfg.Conntrack},
		MisdeliveredFlow{Config: cfg.Conntrack},
	}
}

// Select returns the rules whose IDs are listed, or all of them when ids is
// empty. An unknown ID is an error that lists the known ones.
func Select(cfg Config, ids []string) ([]Rule, error) {
	all := All(cfg)
	if len(ids) == 0 {
		return all, nil
	}
	byID := map[string]Rule{}
	var known []string
	for _, r := range all {
		byID[r.Info().ID] = r
		known = append(known, r.Info().ID)
	}
	sort.Strings(known)
	var out []Rule
	for _, id := range ids {
		r, ok := byID[id]
		if !ok {
			return nil, fmt.Errorf("unknown rule %q (known rules: %s)", id, strings.Join(known, ", "))
		}
		out = append(out, r)
	}
	return out, nil
}
