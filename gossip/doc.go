// Package gossip is for applications that cluster their pods with
// hashicorp/memberlist, so that Kubernetes' recycling of pod IPs cannot
// make a new pod inherit, or be taken for, a dead pod's member (seed 000).
// NodeName names members after the pod UID, never the IP; LeaveOnDone
// leaves the cluster on SIGTERM; DefaultPodConfig is a configuration
// preset giving the reason for every value it changes; View serves the
// member list as this member sees it, over HTTP, for ghostwatch to read.
//
// It configures and observes memberlist; it never changes a cluster's
// membership on its own, and never names a member after an address.
package gossip
