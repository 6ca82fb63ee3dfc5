// Package calico reads Calico's IPAM ledger (IPAMBlocks, IPAMHandles,
// BlockAffinities, IPPools and the leak collector's configuration) into a
// snapshot.Calico: from the API server, where Calico's kubernetes datastore
// keeps them as crd.projectcalico.org/v1 objects, and, through source/kube,
// from what kubectl saved of them. Both paths convert the objects with the
// same functions, which keep whatever Calico wrote, wrong or unreadable
// parts included, and say what is wrong rather than drop it. It never writes
// to the cluster and never judges whether an allocation is a ghost.
package calico
