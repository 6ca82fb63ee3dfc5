// Package live keeps the cluster's objects current for the programs that
// run long, and reads them once for a scan: Informers (every Pod, Service,
// EndpointSlice, Node and ServiceCIDR, or a node's share of them),
// APISource (a one-shot scan through them), Watch (the node agent's live
// source: its node's Informers, and Holders, the pods elsewhere looked up
// by address) and ClusterWatch (the controller's: every Pod and Node, the
// pods indexed by IP). What they hold is converted by source/kube; what a
// remedy's re-check names is read afresh by source/kube/fresh, never from
// these caches. It only lists and watches; it never writes to the cluster,
// never judges whether something is a ghost, and knows no other ledger's
// objects.
package live
