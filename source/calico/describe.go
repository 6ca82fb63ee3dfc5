package calico

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/ghostwatch/ghostwatch/internal/text"
	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source"
)

// FileSource stands, as the source "calico", for the Calico objects
// source/kube's FileSource read from saved files into s.Calico: it reads
// nothing itself and runs after that source. It implements source.Source.
type FileSource struct{}

// Name returns "calico".
func (FileSource) Name() string { return Name }

// Collect succeeds when the files held Calico's objects. When they held
// none it returns source.ErrUnsupported, with the command that saves
// them; when the files could not be read, an error.
func (FileSource) Collect(_ context.Context, s *snapshot.Snapshot) error {
	if s.Calico != nil {
		return nil
	}
	if s.Kube == nil {
		return errors.New("the saved objects could not be read (see the kube source)")
	}
	return source.Unsupported("the saved objects hold no Calico IPAM object; save them with: %s", SaveCommand)
}

// Describe says how much of the ledger was read.
func (FileSource) Describe(s *snapshot.Snapshot) string { return describeCalico(s.Calico) }

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
