// Package netbed builds test beds of network namespaces that behave like a
// Kubernetes node: a node namespace that routes for pod and client
// namespaces joined to it by veth pairs, with Service DNAT rules (nftables)
// and its own conntrack table. The lab and the kernel tests use it. It never
// touches the host namespace's links, routes, rules or conntrack table: every
// change it makes lives in a namespace it created and dies with it. Outside
// them it keeps only a lock file per prefix in use, under /run/ghostwatch,
// which tells a running bed's namespaces from a dead one's (see Claim).
package netbed
