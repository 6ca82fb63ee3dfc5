package calico

import (
	"fmt"
	"strings"

	"github.com/ghostwatch/ghostwatch/internal/text"
	"github.com/ghostwatch/ghostwatch/snapshot"
)

// Describe says how much of the ledger was read.
func (a *APISource) Describe(s *snapshot.Snapshot) string { return describeCalico(s.Calico) }

func describeCalico(c *snapshot.Calico) string {
	if c == nil {
		return ""
	}
	allocs, cooling, malformed := 0, 0, 0
	for _, b := range c.Blocks {
		allocs += len(b.Allocations)
		cooling += len(b.Cooldown)
		if len(b.Malformed) > 0 {
			malformed++
		}
	}
	for _, h := range c.Handles {
		if len(h.Malformed) > 0 {
			malformed++
		}
	}
	for _, a := range c.Affinities {
		if len(a.Malformed) > 0 {
			malformed++
		}
	}
	for _, p := range c.Pools {
		if len(p.Malformed) > 0 {
			malformed++
		}
	}
	parts := []string{
		text.Count(len(c.Blocks), "block", "blocks") + " (" + text.Count(allocs, "allocation", "allocations") + ")",
		text.Count(len(c.Handles), "handle", "handles"),
		text.Count(len(c.Affinities), "affinity", "affinities"),
		text.Count(len(c.Pools), "pool", "pools"),
	}
	if cooling > 0 {
		parts = append(parts, fmt.Sprintf("%d addresses in cooldown", cooling))
	}
	if malformed > 0 {
		parts = append(parts, text.Count(malformed, "malformed object", "malformed objects"))
	}
	if c.LeakGC == nil {
		parts = append(parts, fmt.Sprintf("leak grace period %s (Calico's default: no KubeControllersConfiguration default)", snapshot.DefaultLeakGracePeriod))
	} else {
		parts = append(parts, fmt.Sprintf("leak grace period %s", c.LeakGC.GracePeriod))
	}
	return strings.Join(parts, ", ")
}
