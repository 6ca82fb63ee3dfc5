package kube

import (
	"fmt"
	"maps"
	"net/netip"
	"slices"
	"strings"

	"github.com/ghostwatch/ghostwatch/internal/text"

	"github.com/ghostwatch/ghostwatch/snapshot"
)

// Describe says how many objects of each kind k holds, for a source's
// report (source.Describer): pods, services, endpoints, nodes and service
// CIDRs, or why there are none of the last; of a node's partial pods, which
// were looked up and which could not be. It returns "" for nil.
func Describe(k *snapshot.Kube) string {
	if k == nil {
		return ""
	}
	pods := text.Count(len(k.Pods), "pod", "pods")
	if k.PodsPartial {
		pods = describePartial(k)
	}
	parts := []string{
		pods, text.Count(len(k.Services), "service", "services"),
		text.Count(len(k.Endpoints), "endpoint", "endpoints"), text.Count(len(k.Nodes), "node", "nodes"),
	}
	// Without a service range, a flow to a deleted Service cannot be told
	// from any other flow (--service-cidr gives one).
	switch {
	case k.NoServiceCIDRAPI:
		parts = append(parts, "no ServiceCIDR API (Kubernetes before 1.33)")
	case len(k.ServiceCIDRs) == 0:
		parts = append(parts, "no ServiceCIDR objects")
	default:
		parts = append(parts, text.Count(len(k.ServiceCIDRs), "service CIDR", "service CIDRs"))
	}
	return strings.Join(parts, ", ")
}

// describePartial says which pods a node's informers hold: the node's,
// those found at the addresses looked up, and the addresses that could
// not be looked up, with why: what they concern is not judged.
func describePartial(k *snapshot.Kube) string {
	local := 0
	for i := range k.Pods {
		if k.Pods[i].Node == k.PodNode {
			local++
		}
	}
	d := text.Count(local, "pod", "pods") + " of node " + k.PodNode
	if len(k.Looked) > 0 {
		d += fmt.Sprintf(" and %d elsewhere, looked up at %s", len(k.Pods)-local, text.Count(len(k.Looked), "address", "addresses"))
	}
	if len(k.Unlooked) > 0 {
		why := map[string][]string{}
		var order []string
		addrs := slices.SortedFunc(maps.Keys(k.Unlooked), func(a, b netip.Addr) int { return a.Compare(b) })
		for _, a := range addrs {
			w := k.Unlooked[a]
			if _, ok := why[w]; !ok {
				order = append(order, w)
			}
			why[w] = append(why[w], a.String())
		}
		for _, w := range order {
			d += fmt.Sprintf("; not judged: what concerns %s (%s), whose holders cannot be looked up: %s",
				text.Count(len(why[w]), "address", "addresses"), text.List(why[w], 3), w)
		}
	}
	return d
}
