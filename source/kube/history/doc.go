// Package history remembers who held each pod IP, and when: a bounded
// record of tenures (pod, UID, node, from, until, how it ended) kept from a
// watch of the cluster's Pods, so that once a pod is gone something still
// says it held its address. Every controller replica keeps one, leading or
// not, so that a leader change loses nothing; it is served on the
// replica's loopback (Handler) for `ghostwatch ip`.
//
// It records what the API server said; it judges nothing, and it writes
// nothing to the cluster.
package history
