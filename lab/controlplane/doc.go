// Package controlplane runs a real Kubernetes control plane for the
// end-to-end tests and the lab: etcd, kube-apiserver (serving certificates,
// token authentication, RBAC) and kube-controller-manager (the EndpointSlice
// controller) on 127.0.0.1, and per node network namespace a real kube-proxy
// and a small stand-in for the kubelet. It installs CustomResourceDefinitions
// (InstallCRDs) and runs a test's own further processes beside its own
// (Run), such as a network plugin's controller. The binaries are built by
// scripts/kube-binaries.sh; this package only runs them, and stops every
// process and removes every file it made, also when a start fails.
package controlplane
