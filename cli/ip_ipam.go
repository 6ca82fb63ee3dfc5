package cli

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source/calico"
)

// ipamRecord is what Calico's IPAM ledger books for an address, and
// whether that matches the pod that holds it.
type ipamRecord struct {
	// Ledger is "calico"; empty when the API server serves no Calico
	// IPAM (NotServed says so).
	Ledger    string `json:"ledger,omitempty"`
	NotServed string `json:"notServed,omitempty"`
	// Block is the IPAMBlock whose CIDR holds the address, its affinity
	// the node it serves first; empty when none does.
	Block    string `json:"block,omitempty"`
	CIDR     string `json:"cidr,omitempty"`
	Affinity string `json:"affinity,omitempty"`
	// Allocated says whether the block allocates the address, and to
	// which handle, booked under which node, for which pod, when.
	Allocated  bool      `json:"allocated"`
	Ordinal    int       `json:"ordinal,omitempty"`
	Handle     string    `json:"handle,omitempty"`
	BookedNode string    `json:"bookedNode,omitempty"`
	BookedPod  string    `json:"bookedPod,omitempty"`
	BookedAt   time.Time `json:"bookedAt,omitzero"`
	// Verdict compares the record with the pod that holds the address
	// now: "matches", or what is wrong.
	Verdict string `json:"verdict"`
}

var ipamBlocks = schema.GroupVersionResource{Group: calico.Group, Version: "v1", Resource: "ipamblocks"}

// calicoRecord reads Calico's IPAM blocks and returns what they book for
// ip, judged against pods (those the API server lists at ip).
func calicoRecord(ctx context.Context, dyn dynamic.Interface, ip netip.Addr, pods []snapshot.Pod) (ipamRecord, error) {
	l, err := dyn.Resource(ipamBlocks).List(ctx, metav1.ListOptions{})
	if apierrors.IsNotFound(err) {
		return ipamRecord{NotServed: "the API server serves no Calico IPAM (" + calico.Group + "/v1 ipamblocks)"}, nil
	}
	if err != nil {
		return ipamRecord{}, fmt.Errorf("listing Calico's IPAM blocks: %w", err)
	}
	var blocks []snapshot.IPAMBlock
	for _, o := range l.Items {
		blocks = append(blocks, calico.Block(o.Object))
	}
	return judgeCalico(blocks, ip, pods), nil
}

// judgeCalico finds ip in blocks and says whether its booking matches the
// pods of pods that hold it.
func judgeCalico(blocks []snapshot.IPAMBlock, ip netip.Addr, pods []snapshot.Pod) ipamRecord {
	var holders []snapshot.Pod
	for _, p := range pods {
		if p.HoldsPodIP() && p.HasIP(ip) {
			holders = append(holders, p)
		}
	}
	r := ipamRecord{Ledger: "calico"}
	var b *snapshot.IPAMBlock
	for i := range blocks {
		if !blocks[i].Deleted && blocks[i].CIDR.IsValid() && blocks[i].CIDR.Contains(ip) {
			b = &blocks[i]
			break
		}
	}
	if b != nil {
		r.Block, r.CIDR, r.Affinity = b.Name, b.CIDR.String(), b.Affinity
		for _, a := range b.Allocations {
			if a.IP == ip {
				r.Allocated, r.Ordinal, r.Handle, r.BookedNode, r.BookedAt = true, a.Ordinal, a.HandleID, a.Node, a.Timestamp
				if a.Pod != "" {
					r.BookedPod = a.Namespace + "/" + a.Pod
				}
			}
		}
	}
	switch {
	case len(holders) == 0 && !r.Allocated:
		r.Verdict = "matches: free, and no pod holds it"
	case len(holders) == 0:
		r.Verdict = fmt.Sprintf("booked for %s, but no running pod holds it: a leak, until Calico's collector frees it", r.BookedPod)
	case !r.Allocated && b == nil:
		r.Verdict = fmt.Sprintf("no Calico block holds it, yet pod %s does: not Calico's address", holders[0].Ref())
	case !r.Allocated:
		r.Verdict = fmt.Sprintf("free in block %s while pod %s holds it: the next pod may be given it (ipam-unbooked-ip)", b.Name, holders[0].Ref())
	case len(holders) > 1:
		r.Verdict = fmt.Sprintf("held by %d pods at once (duplicate-pod-ip)", len(holders))
	case r.BookedPod != "" && r.BookedPod != holders[0].Ref().String():
		r.Verdict = fmt.Sprintf("booked for %s, but pod %s holds it (ipam-unbooked-ip)", r.BookedPod, holders[0].Ref())
	case r.BookedNode != "" && r.BookedNode != holders[0].Node:
		r.Verdict = fmt.Sprintf("booked under node %s, but pod %s runs on %s: Calico's leak collector will free it while the pod runs (ipam-misbooked)", r.BookedNode, holders[0].Ref(), holders[0].Node)
	default:
		r.Verdict = "matches the pod that holds it"
	}
	return r
}
