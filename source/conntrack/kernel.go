package conntrack

import (
	"context"

	"github.com/ghostwatch/ghostwatch/snapshot"
)

// KernelSource reads the conntrack table of the running kernel over netlink,
// in the network namespace of the calling thread. It streams the table and
// keeps only the flows Keep accepts, so its memory grows with the kept flows,
// not with the table.
type KernelSource struct {
	// Keep selects the flows to keep; nil means KeepDNAT.
	Keep Keep
}

// Name returns Name ("conntrack").
func (KernelSource) Name() string { return Name }

// Collect dumps the whole table and sets s.Conntrack to the kept flows and
// the number of entries seen. On any error (no permission, no ctnetlink in
// the kernel, a dump cut short) it leaves s untouched: a partial table is
// never reported.
func (k KernelSource) Collect(ctx context.Context, s *snapshot.Snapshot) error {
	keep := k.Keep
	if keep == nil {
		keep = KeepDNAT
	}
	c, err := Open()
	if err != nil {
		return err
	}
	defer c.Close()
	var kept flowChunks
	n, err := c.Dump(ctx, func(f *snapshot.Flow) error {
		if keep(f) {
			kept.add(f)
		}
		return nil
	})
	if err != nil {
		return err
	}
	s.Conntrack = &snapshot.Conntrack{Flows: kept.flows(), Seen: n}
	return nil
}
