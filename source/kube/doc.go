// Package kube reads the Kubernetes objects the rules need (Pods, Services,
// EndpointSlices and Nodes) into a trimmed snapshot.Kube: from the API server
// through informers, or from what kubectl get -o yaml|json saved to files,
// both converted by the same functions. It only reads and converts; it never
// writes to the cluster and never judges whether something is a ghost.
package kube
