// Package kube reads the Kubernetes objects the rules need (Pods, Services,
// EndpointSlices, Nodes and ServiceCIDRs) into a trimmed snapshot.Kube from
// the API server, through informers, and holds the conversions that
// source/kube/saved also converts what kubectl get -o yaml|json saved to
// files with. It only reads and converts; it never writes to the cluster,
// never judges whether something is a ghost, and knows no other ledger's
// objects.
package kube
