package calico

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"strings"

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

// IPAMRequest is one CNI ADD for a pod, as the container runtime makes it.
type IPAMRequest struct {
	// Nodename is the node name the plugin books the allocation under. The
	// plugin reads it from its nodename file when the network configuration
	// names none, as Calico's manifests ship it: AssignIP writes it there,
	// so a stale name here is issue #12257's stale /var/lib/calico/nodename.
	Nodename string
	// Namespace and Pod name the pod (K8S_POD_NAMESPACE, K8S_POD_NAME).
	Namespace, Pod string
	// ContainerID is the sandbox's ID (CNI_CONTAINERID).
	ContainerID string
}

// HandleID is the IPAM handle the plugin books r's allocation under.
func (r IPAMRequest) HandleID() string { return NetworkName + "." + r.ContainerID }

// AssignIP runs calico-ipam's ADD for r, which picks an address from the
// blocks of r.Nodename's pools (claiming a block for that node when it has
// none with room), and returns it. The plugin's own log goes to the error
// when it fails.
func (c *Cluster) AssignIP(ctx context.Context, r IPAMRequest) (netip.Addr, error) {
	nodenameFile := filepath.Join(c.Dir, "nodename-"+r.ContainerID)
	if err := os.WriteFile(nodenameFile, []byte(r.Nodename), 0o644); err != nil {
		return netip.Addr{}, err
	}
	out, err := c.ipam(ctx, "ADD", r, nodenameFile)
	if err != nil {
		return netip.Addr{}, err
	}
	var res struct {
		IPs []struct {
			Address string `json:"address"`
		} `json:"ips"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		return netip.Addr{}, fmt.Errorf("calico-ipam result %q: %w", out, err)
	}
	if len(res.IPs) != 1 {
		return netip.Addr{}, fmt.Errorf("calico-ipam result %q: want one address", out)
	}
	p, err := netip.ParsePrefix(res.IPs[0].Address)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("calico-ipam result %q: %w", out, err)
	}
	return p.Addr(), nil
}

// ReleaseIP runs calico-ipam's DEL for r, as the runtime does when the
// sandbox goes: the plugin releases the addresses of r's handle.
func (c *Cluster) ReleaseIP(ctx context.Context, r IPAMRequest) error {
	_, err := c.ipam(ctx, "DEL", r, filepath.Join(c.Dir, "nodename-"+r.ContainerID))
	return err
}

// ipam runs calico-ipam with the CNI command for r and returns its stdout.
func (c *Cluster) ipam(ctx context.Context, command string, r IPAMRequest, nodenameFile string) ([]byte, error) {
	conf, err := json.Marshal(map[string]any{
		"cniVersion":     "0.3.1",
		"name":           NetworkName,
		"type":           "calico",
		"datastore_type": "kubernetes",
		"nodename_file":  nodenameFile,
		"ipam_lock_file": filepath.Join(c.Dir, "ipam.lock"),
		"log_level":      "info",
		"kubernetes":     map[string]string{"kubeconfig": c.Kubeconfig},
		"ipam":           map[string]string{"type": "calico-ipam"},
	})
	if err != nil {
		return nil, err
	}
	args := "IgnoreUnknown=1;K8S_POD_NAMESPACE=" + r.Namespace + ";K8S_POD_NAME=" + r.Pod +
		";K8S_POD_INFRA_CONTAINER_ID=" + r.ContainerID
	return c.run(ctx, []string{
		"CNI_COMMAND=" + command, "CNI_CONTAINERID=" + r.ContainerID, "CNI_IFNAME=eth0",
		// The IPAM plugin never enters the sandbox; the path only has to be set.
		"CNI_NETNS=/var/run/netns/cni-" + r.ContainerID, "CNI_PATH=" + c.bin, "CNI_ARGS=" + args,
	}, conf, "calico-ipam")
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
