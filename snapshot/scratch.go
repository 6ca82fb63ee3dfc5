package snapshot

import "sync"

// scratch holds what the rules of one pass derive from a snapshot and share
// (an index of its cluster objects, built once for every rule that reads
// it), for that pass only: the runner begins the pass when it takes the
// snapshot and ends it when the rules are done, and nothing a rule derived
// outlives it. Rules keep no state of their own.
type scratch struct {
	mu sync.Mutex
	m  map[any]any
}

// BeginPass starts the pass over s: from now on Derive keeps what it
// builds, until EndPass.
func (s *Snapshot) BeginPass() { s.scratch = &scratch{m: map[any]any{}} }

// EndPass ends the pass over s: what was derived from it is dropped.
func (s *Snapshot) EndPass() { s.scratch = nil }

// InPass reports whether a pass over s has begun and not ended.
func (s *Snapshot) InPass() bool { return s.scratch != nil }

// Derive returns what build derives from s, under key: built once per pass
// and shared by every caller that asks with an equal key, or built anew at
// each call when s is not in a pass (a snapshot judged on its own, a
// re-check's fresh read). Keys are compared with ==: make them comparable
// values that name what was derived and from what (the rule, the Kube it
// read). build runs under the pass's lock: it must not call Derive.
func Derive[T any](s *Snapshot, key any, build func() T) T {
	sc := s.scratch
	if sc == nil {
		return build()
	}
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if v, ok := sc.m[key]; ok {
		return v.(T)
	}
	v := build()
	sc.m[key] = v
	return v
}
