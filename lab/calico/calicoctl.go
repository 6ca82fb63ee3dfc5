package calico

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// CheckReport is the JSON report of calicoctl ipam check -o FILE.
type CheckReport struct {
	Version                    string `json:"version"`
	ClusterGUID                string `json:"clusterGUID"`
	DatastoreLocked            bool   `json:"datastoreLocked"`
	ClusterInformationRevision string `json:"clusterInformationRevision"`
	ClusterType                string `json:"clusterType"`
	// Allocations are keyed by address; an address booked twice has two.
	Allocations map[string][]CheckAllocation `json:"allocations"`
	// LeakedHandles are handles that no block allocates from (absent when
	// there are none). Their fields are Go's names: the report does not
	// rename them.
	LeakedHandles []struct {
		ID       string
		UID      *string
		Revision string
	} `json:"leakedHandles,omitempty"`
}

// CheckAllocation is one allocation as the report tells it.
type CheckAllocation struct {
	IP                string  `json:"ip"`
	Handle            string  `json:"handle,omitempty"`
	SequenceNumber    *uint64 `json:"sequenceNumber,omitempty"`
	Pod               string  `json:"pod,omitempty"`
	Namespace         string  `json:"namespace,omitempty"`
	Node              string  `json:"node,omitempty"`
	Type              string  `json:"type,omitempty"`
	CreationTimestamp string  `json:"creationTimestamp,omitempty"`
	// InUse is whether a workload endpoint (in the kubernetes datastore:
	// a pod's status.podIPs), a node's tunnel address or the like has the
	// address.
	InUse bool `json:"inUse"`
	// Borrowed is whether the block is affine to another node than the
	// allocation's.
	Borrowed bool `json:"borrowed,omitempty"`
	// Owners name what uses the address (Pod(ns/name) for a pod).
	Owners []string `json:"owners"`
}

// IPAMCheck runs calicoctl ipam check --show-problem-ips with a report file
// and returns the report, the file's bytes, and what calicoctl printed.
func (c *Cluster) IPAMCheck(ctx context.Context) (*CheckReport, []byte, string, error) {
	f, err := os.CreateTemp(c.Dir, "ipam-check-*.json")
	if err != nil {
		return nil, nil, "", err
	}
	f.Close()
	defer os.Remove(f.Name())
	out, err := c.Calicoctl(ctx, "ipam", "check", "--show-problem-ips", "-o", f.Name())
	if err != nil {
		return nil, nil, string(out), err
	}
	b, err := os.ReadFile(f.Name())
	if err != nil {
		return nil, nil, string(out), err
	}
	var r CheckReport
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, b, string(out), fmt.Errorf("calicoctl ipam check report %s: %w", filepath.Base(f.Name()), err)
	}
	return &r, b, string(out), nil
}
