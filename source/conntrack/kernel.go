package conntrack

import (
	"context"

	"github.com/ghostwatch/ghostwatch/snapshot"
)

// KernelSource reads the conntrack table of the running kernel over netlink.
// It streams the table and keeps only the flows its readers need (see
// Narrow), so its memory grows with the kept flows, not with the table.
type KernelSource struct {
	// Open opens the socket each Collect reads through and closes; nil
	// means Open, in the calling thread's network namespace. A socket stays
	// in the namespace it was opened in, so a function that opens it in
	// another one reads that namespace's table.
	Open func() (*Conn, error)
	// Observe, when set, sees every flow read, kept or not: the agent seeds
	// its index with them. It must not retain the pointer.
	Observe func(f *snapshot.Flow)

	readers
}

// Name returns Name ("conntrack").
func (*KernelSource) Name() string { return Name }

// Describe says how many entries the last collection read and kept.
func (k *KernelSource) Describe(s *snapshot.Snapshot) string { return k.describe(s) }

// Collect dumps the whole table and sets s.Conntrack to the kept flows and
// the number of entries seen. On any error (no permission, no ctnetlink in
// the kernel, a dump cut short) it leaves s untouched: a partial table is
// never reported.
func (k *KernelSource) Collect(ctx context.Context, s *snapshot.Snapshot) error {
	keep := k.keep(s)
	open := k.Open
	if open == nil {
		open = Open
	}
	c, err := open()
	if err != nil {
		return err
	}
	defer c.Close()
	kept := &snapshot.Conntrack{}
	n, err := c.Dump(ctx, func(f *snapshot.Flow) error {
		if k.Observe != nil {
			k.Observe(f)
		}
		if keep(f) {
			kept.Keep(f)
		}
		return nil
	})
	if err != nil {
		return err
	}
	kept.Seen = n
	kept.Fit()
	s.Conntrack = kept
	return nil
}
