//go:build tools

// Package cni pins the plugin scripts/cni-plugins.sh builds.
package cni

import (
	_ "github.com/containernetworking/plugins/plugins/ipam/host-local"
)
