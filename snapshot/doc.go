// Package snapshot holds the immutable, timestamped view of every ledger that
// rules judge: the trimmed Kubernetes objects, the conntrack flows, and the
// status of each source that produced them. It owns data types only; it does
// no I/O and makes no judgement.
package snapshot
