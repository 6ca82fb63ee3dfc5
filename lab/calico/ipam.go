package calico

import (
	"context"
	"fmt"
	"net/netip"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// NetworkName is the CNI network name of Calico's manifests; the CNI plugin
// names an allocation's handle NetworkName + "." + the container ID.
const NetworkName = "k8s-pod-network"

// The stored IPAM resources, as Calico's kubernetes datastore keeps them.
var (
	IPAMBlocks      = resource("ipamblocks")
	IPAMHandles     = resource("ipamhandles")
	BlockAffinities = resource("blockaffinities")
	IPPools         = resource("ippools")
)

func resource(plural string) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: "crd.projectcalico.org", Version: "v1", Resource: plural}
}

// List returns every object of a Calico resource, as stored.
func (c *Cluster) List(ctx context.Context, r schema.GroupVersionResource) ([]unstructured.Unstructured, error) {
	l, err := c.dyn.Resource(r).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}

// Get returns one object of a Calico resource, as stored.
func (c *Cluster) Get(ctx context.Context, r schema.GroupVersionResource, name string) (*unstructured.Unstructured, error) {
	return c.dyn.Resource(r).Get(ctx, name, metav1.GetOptions{})
}

// IPAMBlock is an IPAMBlock's spec as Calico stores it: ordinal i of
// Allocations is the address CIDR's base + i, null when free, otherwise an
// index into Attributes.
type IPAMBlock struct {
	CIDR           string          `json:"cidr"`
	Affinity       *string         `json:"affinity,omitempty"`
	StrictAffinity bool            `json:"strictAffinity"`
	Allocations    []*int          `json:"allocations"`
	Unallocated    []int           `json:"unallocated"`
	Attributes     []IPAMAttribute `json:"attributes"`
	Deleted        bool            `json:"deleted,omitempty"`
	SequenceNumber uint64          `json:"sequenceNumber"`
	// SequenceNumberForAllocation maps an ordinal (as a string) to the
	// block's SequenceNumber when that address was allocated.
	SequenceNumberForAllocation map[string]uint64 `json:"sequenceNumberForAllocation,omitempty"`
}

// IPAMAttribute is what an allocation records: its handle and, for a pod,
// the node, namespace, pod and timestamp the CNI plugin gave.
type IPAMAttribute struct {
	HandleID  *string           `json:"handle_id,omitempty"`
	Secondary map[string]string `json:"secondary,omitempty"`
}

// Allocation is one allocated address of a block.
type Allocation struct {
	IP netip.Addr
	IPAMAttribute
}

// Spec decodes a Calico object's spec as T (IPAMBlock, IPAMHandle,
// BlockAffinity).
func Spec[T any](obj *unstructured.Unstructured) (T, error) {
	var spec T
	m, ok := obj.Object["spec"].(map[string]any)
	if !ok {
		return spec, fmt.Errorf("%s %s: no spec", obj.GetKind(), obj.GetName())
	}
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(m, &spec); err != nil {
		return spec, fmt.Errorf("%s %s: %w", obj.GetKind(), obj.GetName(), err)
	}
	return spec, nil
}

// AllocationsOf lists b's allocated addresses with their attributes.
func (b IPAMBlock) AllocationsOf() ([]Allocation, error) {
	p, err := netip.ParsePrefix(b.CIDR)
	if err != nil {
		return nil, fmt.Errorf("block %s: %w", b.CIDR, err)
	}
	var out []Allocation
	ip := p.Masked().Addr()
	for ord, idx := range b.Allocations {
		if ord > 0 {
			ip = ip.Next()
		}
		if idx == nil {
			continue
		}
		if *idx < 0 || *idx >= len(b.Attributes) {
			return nil, fmt.Errorf("block %s: ordinal %d points at attribute %d of %d", b.CIDR, ord, *idx, len(b.Attributes))
		}
		out = append(out, Allocation{IP: ip, IPAMAttribute: b.Attributes[*idx]})
	}
	return out, nil
}

// Booked returns the block whose CIDR holds ip, as stored, and ip's
// allocation in it: nil when the block lists ip as free. Both are nil when
// no block holds ip.
func (c *Cluster) Booked(ctx context.Context, ip netip.Addr) (*IPAMBlock, *Allocation, error) {
	blocks, err := c.List(ctx, IPAMBlocks)
	if err != nil {
		return nil, nil, err
	}
	for i := range blocks {
		b, err := Spec[IPAMBlock](&blocks[i])
		if err != nil {
			return nil, nil, err
		}
		if p, err := netip.ParsePrefix(b.CIDR); err != nil || !p.Contains(ip) {
			continue
		}
		allocs, err := b.AllocationsOf()
		if err != nil {
			return nil, nil, err
		}
		for _, a := range allocs {
			if a.IP == ip {
				return &b, &a, nil
			}
		}
		return &b, nil, nil
	}
	return nil, nil, nil
}

// HandleExists reports whether the IPAMHandle of the handle ID exists.
func (c *Cluster) HandleExists(ctx context.Context, handleID string) (bool, error) {
	_, err := c.Get(ctx, IPAMHandles, HandleName(handleID))
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	return err == nil, err
}

// NodePools is a manifest of one IPPool per node (up to 64), in order from
// 10.244.0.0, each a single block of four addresses for that node alone
// (its nodeSelector): every address is the same at every run, and a
// freed address comes round again once the block's three others are
// taken. Calico's pools default to blocks of 64 addresses, any node's.
func NodePools(nodes ...string) string {
	var b strings.Builder
	for i, n := range nodes {
		if i > 0 {
			b.WriteString("---\n")
		}
		fmt.Fprintf(&b, `apiVersion: projectcalico.org/v3
kind: IPPool
metadata:
  name: %[1]s
spec:
  cidr: %[2]s
  blockSize: 30
  ipipMode: Never
  vxlanMode: Never
  nodeSelector: kubernetes.io/hostname == '%[1]s'
`, n, NodePoolCIDR(i))
	}
	return b.String()
}

// NodePoolCIDR is the CIDR of NodePools' pool for its i-th node.
func NodePoolCIDR(i int) netip.Prefix {
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{10, 244, 0, byte(4 * i)}), 30)
}

// IPAMHandle is an IPAMHandle's spec: how many addresses the handle holds
// in each block (by the block's CIDR).
type IPAMHandle struct {
	HandleID string         `json:"handleID"`
	Block    map[string]int `json:"block"`
	Deleted  bool           `json:"deleted,omitempty"`
}

// HandleName is the IPAMHandle object's name for a handle ID: Calico
// lowercases it.
func HandleName(handleID string) string { return strings.ToLower(handleID) }

// BlockAffinity is a BlockAffinity's spec: node claims the block at cidr.
// Deleted is the string "false" or "true".
type BlockAffinity struct {
	CIDR    string `json:"cidr"`
	Node    string `json:"node"`
	State   string `json:"state"`
	Type    string `json:"type,omitempty"`
	Deleted string `json:"deleted"`
}
