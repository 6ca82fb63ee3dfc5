//go:build tools

// Package calico pins the commands scripts/calico-binaries.sh builds:
// calico-kube-controllers, calicoctl, and Calico's CNI plugin binary, run
// as its IPAM plugin calico-ipam.
package calico

import (
	_ "github.com/projectcalico/calico/calicoctl/calicoctl"
	_ "github.com/projectcalico/calico/cni-plugin/cmd/calico"
	_ "github.com/projectcalico/calico/kube-controllers/cmd/kube-controllers"
)
