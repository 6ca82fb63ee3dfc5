// Package cniresults is the worked example of a node ledger in
// docs/development.md: libcni's cache of CNI results. In the tree, its
// type would be snapshot/cniresults.go, its source source/cniresults/
// and its rule rule/cni_result_orphan.go.
package cniresults

import "net/netip"

// Results is libcni's cache of the results of CNI ADDs on one node
// (/var/lib/cni/results): what the container runtime believes each pod
// sandbox was given. A trimmed, immutable view: only what rules read.
type Results struct {
	Entries []Result
}

// Result is one cached ADD: the sandbox, the pod it was for, the
// addresses it got.
type Result struct {
	// File is where it was read, for findings and errors.
	File                         string
	Network, ContainerID, IfName string
	PodNamespace, PodName        string
	// PodUID is empty when the runtime did not pass it.
	PodUID string
	IPs    []netip.Addr
}
