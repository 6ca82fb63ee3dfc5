// Package calico runs Calico's real components against the test control
// plane (lab/controlplane), with Calico's datastore in the API server
// (DATASTORE_TYPE=kubernetes): it installs Calico's crd.projectcalico.org/v1
// CRDs, runs calico-kube-controllers, calicoctl and the calico-ipam CNI
// plugin built by scripts/calico-binaries.sh, and reads the IPAM objects
// they write. Its nodes are Node objects with their files (the Calico CNI
// configuration, the nodename file) in a directory each, and its pods are
// run on them as the kubelet runs them: the CNI ADD, then the status. It
// only runs Calico; deciding what Calico's bookkeeping means is for
// ghostwatch's sources and rules.
package calico
