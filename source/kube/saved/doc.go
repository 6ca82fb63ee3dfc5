// Package saved reads the cluster objects the rules need (Pods, Services,
// EndpointSlices, Nodes and ServiceCIDRs) from what kubectl get -o
// yaml|json saved to files, for an offline scan: FileSource asks
// source/kubectl, which reads the files once for every ledger, for these
// kinds, and converts each with source/kube's conversions, as the API
// server's objects are. It refuses files that lack a kind the rules read
// or cannot be the whole cluster. It reads files only: it never talks to
// the API server, never judges whether something is a ghost, and knows no
// other ledger's kinds.
package saved
