// Package lab rebuilds ghostwatch's incidents on the real kernel: node and
// pod network namespaces joined by veth pairs, Service DNAT rules, real
// conntrack, and an in-memory Kubernetes API that ghostwatch reads through
// the same kube source it uses in production. Scenarios print a timeline of
// what the client saw, what the kernel still maps, and what ghostwatch found.
// The gossip scenario runs real memberlist members and Serf agents on
// loopback addresses instead, its pods stated as the API server would list
// them.
// The lab only ever touches namespaces it created, and its lock file.
package lab
