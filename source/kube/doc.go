// Package kube reads the Kubernetes objects the rules need (Pods, Services,
// EndpointSlices and Nodes) into a trimmed snapshot.Kube: from the API server
// through informers, or from what kubectl get -o yaml|json saved to files,
// both converted by the same functions. Files may hold Calico's IPAM objects
// too, which source/calico converts into a snapshot.Calico. It only reads and
// converts; it never writes to the cluster and never judges whether something
// is a ghost.
package kube
