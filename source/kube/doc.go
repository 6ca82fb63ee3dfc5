// Package kube is what the readers of the cluster's objects share: the
// conversions of the objects the rules need (Pods, Services,
// EndpointSlices, Nodes and ServiceCIDRs) into a trimmed snapshot.Kube,
// the informer transforms that trim them (TrimPod, TrimNode,
// TrimMeta), what a snapshot.Kube holds in a report (Describe), the names
// of the resources and what an API error about one means (DescribeError),
// and the client set-up (ClientFromFlags, ClientForConfig, Probe).
//
// The readers are the packages under it: source/kube/live watches the
// objects (the sources of the node agent, of the controller and of a
// scan), source/kube/fresh reads afresh what a remedy's re-check names,
// and source/kube/saved reads what kubectl saved to files. It imports none
// of them, and lists and watches nothing itself: the one request it makes
// is Probe's. It never writes to the cluster, never judges whether
// something is a ghost, and knows no other ledger's objects.
package kube
