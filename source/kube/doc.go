// Package kube holds what the readers of the Kubernetes objects the rules
// need (Pods, Services, EndpointSlices, Nodes and ServiceCIDRs) share: the
// conversions into a trimmed snapshot.Kube and the informer transforms
// that trim them, the resource names and what an API error about one
// means, and the client set-up. source/kube/live watches the objects and
// source/kube/saved reads them from what kubectl saved, both converted
// here. It also reads afresh, with quorum reads, what a remedy's re-check
// names (Quorum). It only reads and converts; it never writes to the
// cluster, never judges whether something is a ghost, and knows no other
// ledger's objects.
package kube
