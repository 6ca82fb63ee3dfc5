package cli

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"slices"

	"github.com/ghostwatch/ghostwatch/internal/text"
	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source"
	"github.com/ghostwatch/ghostwatch/source/conntrack"
	"github.com/ghostwatch/ghostwatch/source/kube"
)

// A scan reads a node's own ledgers (its conntrack table, the proxy that
// translates its Services, its host-local store, Calico's node name) from
// the host it runs on, and judges them as the node it is told it runs on.
// Only a node the cluster knows has ledgers to judge: on a host that is
// no node of the cluster (a laptop with a kubeconfig, a bastion), its own
// table would be judged as a node's that does not exist, and its
// emptiness read as a clean node. The cluster-wide rules run wherever
// kubectl does.

// onNode is a source of one of the node's own ledgers, read on this host:
// it collects only when the cluster objects collected before it list the
// node, and otherwise says the ledger is not given, why, and how to give
// it. When the objects could not be read, it collects as src would: no
// rule that reads it runs without them.
type onNode struct {
	source.Source
	// node is the node's name, and from where it came ("--node-name",
	// "$NODE_NAME", "the hostname").
	node, from string
	// local, when set, returns this host's addresses, to name the node
	// that holds them when it is not node.
	local func() []netip.Addr
}

// Collect collects the ledger when the node is the cluster's.
func (o onNode) Collect(ctx context.Context, s *snapshot.Snapshot) error {
	var local []netip.Addr
	if o.local != nil {
		local = o.local()
	}
	if why := notClusterNode(s, o.node, o.from, local); why != "" {
		return source.NotGiven("%s", why)
	}
	return o.Source.Collect(ctx, s)
}

// Narrow tells the ledger's source its readers, when it keeps less than
// its whole ledger.
func (o onNode) Narrow(readers []any) {
	if n, ok := o.Source.(source.Narrower); ok {
		n.Narrow(readers)
	}
}

// Describe says what the ledger's source read.
func (o onNode) Describe(s *snapshot.Snapshot) string {
	if d, ok := o.Source.(source.Describer); ok {
		return d.Describe(s)
	}
	return ""
}

// notClusterNode says why node is not a node of the cluster s's objects
// list, with what to do, or "" when it is one, or when the objects were
// not read. local are this host's addresses: a node that holds one of
// them is named.
func notClusterNode(s *snapshot.Snapshot, node, from string, local []netip.Addr) string {
	k := s.Kube
	if k == nil || slices.Contains(k.Missing, "Node") {
		return ""
	}
	if _, ok := kube.LookupNode(k, node); ok && node != "" {
		return ""
	}
	var names []string
	var here []string
	for _, n := range k.Nodes {
		names = append(names, n.Name)
		for _, a := range n.Addresses {
			if slices.Contains(local, a) && !slices.Contains(here, n.Name) {
				here = append(here, n.Name)
			}
		}
	}
	nodes := "it lists no Node"
	if len(names) > 0 {
		nodes = "its nodes: " + text.List(names, 8)
	}
	why := fmt.Sprintf("this host is not a node of the cluster: %q (%s) is not among the cluster's nodes (%s), and a node's conntrack table, its Service proxy and its IPAM files are judged only as the node the cluster knows; run the scan on the node, or pass --node-name NODE with that node's saved evidence (--conntrack-file, --host-root)", node, from, nodes)
	if len(here) == 1 {
		why += fmt.Sprintf("; this host's addresses are node %s's: pass --node-name %s", here[0], here[0])
	}
	return why
}

// nodeNameFrom says where resolveNodeName found the node's name.
func nodeNameFrom(flag string) string {
	switch {
	case flag != "":
		return "--node-name"
	case os.Getenv("NODE_NAME") != "":
		return "$NODE_NAME"
	}
	return "the hostname"
}

// liveTable is this host's conntrack table read live. A node's table is
// never empty while it runs pods: an empty one is no node's table (read
// in a network namespace of its own, or on a host that runs no pod), and
// it is refused as an empty saved listing is, never judged as a clean
// node.
type liveTable struct {
	*conntrack.KernelSource
}

// Collect reads the table, and refuses it when it holds no entry.
func (l liveTable) Collect(ctx context.Context, s *snapshot.Snapshot) error {
	before := s.Conntrack
	if err := l.KernelSource.Collect(ctx, s); err != nil {
		return err
	}
	if s.Conntrack != nil && s.Conntrack.Seen == 0 {
		s.Conntrack = before
		return fmt.Errorf("this host's conntrack table holds no entries: a node's table is never empty while it runs pods, so this is no node's table (a network namespace of its own, as a pod's without hostNetwork, or a host that runs no pod); run the scan in the node's network namespace, or give a table saved there with --conntrack-file: %w", conntrack.ErrEmptyListing)
	}
	return nil
}
