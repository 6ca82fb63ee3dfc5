package kube

import (
	"strings"

	"github.com/ghostwatch/ghostwatch/internal/text"

	"github.com/ghostwatch/ghostwatch/snapshot"
)

// Describe says how many objects of each kind were read.
func (a *APISource) Describe(s *snapshot.Snapshot) string { return describeKube(s.Kube) }

// Describe says how many objects of each kind were read.
func (f *FileSource) Describe(s *snapshot.Snapshot) string { return describeKube(s.Kube) }

func describeKube(k *snapshot.Kube) string {
	if k == nil {
		return ""
	}
	parts := []string{
		text.Count(len(k.Pods), "pod", "pods"), text.Count(len(k.Services), "service", "services"),
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
