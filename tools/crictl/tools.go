//go:build tools

// Package crictl pins the command scripts/crictl-binary.sh builds.
package crictl

import (
	_ "sigs.k8s.io/cri-tools/cmd/crictl"
)
