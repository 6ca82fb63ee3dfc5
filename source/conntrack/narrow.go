package conntrack

import (
	"fmt"
	"github.com/ghostwatch/ghostwatch/internal/text"
	"strings"

	"github.com/ghostwatch/ghostwatch/snapshot"
)

// readers holds what Narrow was given and builds, at each collection, the
// filter of the flows to keep: the union of what the readers' filters
// keep, configured from what earlier sources collected.
type readers struct {
	narrowed bool
	list     []any
	// last are the filters of the last collection, for Describe.
	last []snapshot.FlowFilter
	kept int
}

// Narrow records the rules that will read the flows (source.Narrower).
// Each rule that implements snapshot.FlowReader says which flows it needs;
// one that does not makes the source keep every flow. With no reader at
// all, the table is read and counted but no flow is kept. A source never
// narrowed keeps every flow.
func (r *readers) Narrow(list []any) {
	r.narrowed, r.list = true, list
}

// keep returns the filter for a collection into s, counting what it keeps.
func (r *readers) keep(s *snapshot.Snapshot) func(*snapshot.Flow) bool {
	r.kept = 0
	if !r.narrowed {
		r.last = nil
		return func(*snapshot.Flow) bool { r.kept++; return true }
	}
	keep, filters := Filter(r.list, s)
	r.last = filters
	return func(f *snapshot.Flow) bool {
		if keep(f) {
			r.kept++
			return true
		}
		return false
	}
}

// Filter returns what a collection into s keeps for readers (rules, as
// rule.ReadersOf returns them): the flows any reader's snapshot.FlowFilter
// keeps, every flow when a reader has no filter, none without readers.
// Identical filters (rules sharing one judgement) are asked once per flow;
// the distinct filters are returned too.
func Filter(readers []any, s *snapshot.Snapshot) (func(*snapshot.Flow) bool, []snapshot.FlowFilter) {
	var filters []snapshot.FlowFilter
	for _, rd := range readers {
		fr, ok := rd.(snapshot.FlowReader)
		if !ok {
			return func(*snapshot.Flow) bool { return true }, nil
		}
		f := fr.FlowFilter(s)
		if f == nil {
			return func(*snapshot.Flow) bool { return true }, nil
		}
		dup := false
		for _, g := range filters {
			dup = dup || g == f
		}
		if !dup {
			filters = append(filters, f)
		}
	}
	return func(fl *snapshot.Flow) bool {
		for _, f := range filters {
			if f.Keep(fl) {
				return true
			}
		}
		return false
	}, filters
}

// describe says what a complete collection read: how many entries, how
// many were kept, and what the filters say of what they saw.
func (r *readers) describe(s *snapshot.Snapshot) string {
	if s.Conntrack == nil {
		return ""
	}
	d := text.Count(s.Conntrack.Seen, "entry", "entries") + fmt.Sprintf(" read, %d kept for the rules", r.kept)
	var more []string
	for _, f := range r.last {
		if st, ok := f.(fmt.Stringer); ok && st.String() != "" {
			more = append(more, st.String())
		}
	}
	if len(more) > 0 {
		d += " (" + strings.Join(more, "; ") + ")"
	}
	return d
}
