// Package fresh reads afresh from the API server what a remedy's last
// re-check names of the cluster (Quorum): with quorum reads, as current as
// etcd, never from a cache that may lag, and converted by source/kube as
// everything else the rules read. source/kube/live's sources call it from
// their Fresh methods (Collect). Its reads are lists, so the permission to
// list what the informers watch, and IPAddresses (QuorumListed), is all it
// needs. It only reads what it is asked: it never watches, never writes to
// the cluster, never judges whether something is a ghost (the rule's
// Recheck does, on what it read), and knows no other ledger's objects.
package fresh
