// Package calico reads Calico's IPAM ledger (IPAMBlocks, IPAMHandles,
// BlockAffinities, IPPools and the leak collector's configuration) into a
// snapshot.Calico: from the API server, where Calico's kubernetes datastore
// keeps them as crd.projectcalico.org/v1 objects, once for a scan
// (APISource) or kept current by informers for the controller (Watch);
// and from what kubectl saved of them, which source/kubectl reads from the
// files the cluster's objects are read from. Every path converts the
// objects with the same functions, which keep whatever Calico wrote, wrong
// or unreadable parts included, and say what is wrong rather than drop it.
// It never writes to the cluster and never judges whether an allocation is
// a ghost.
package calico
