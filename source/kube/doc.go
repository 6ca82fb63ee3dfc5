// Package kube reads the Kubernetes objects the rules need (Pods, Services,
// EndpointSlices, Nodes and ServiceCIDRs) into a trimmed snapshot.Kube:
// from the API server through informers, or from what kubectl get -o
// yaml|json saved to files (FileSource, which source/kubectl reads), both
// converted by the same functions. It only reads and converts; it never
// writes to the cluster, never judges whether something is a ghost, and
// knows no other ledger's objects.
package kube
