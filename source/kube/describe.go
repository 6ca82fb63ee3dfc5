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
	return strings.Join([]string{
		text.Count(len(k.Pods), "pod", "pods"), text.Count(len(k.Services), "service", "services"),
		text.Count(len(k.Endpoints), "endpoint", "endpoints"), text.Count(len(k.Nodes), "node", "nodes"),
	}, ", ")
}
