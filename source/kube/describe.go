package kube

import (
	"fmt"

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
	return fmt.Sprintf("%d pods, %d services, %d endpoints, %d nodes", len(k.Pods), len(k.Services), len(k.Endpoints), len(k.Nodes))
}
