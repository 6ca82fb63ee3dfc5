//go:build tools

// Package consul pins the Consul release scripts/consul-binary.sh builds.
package consul

import (
	_ "github.com/hashicorp/consul"
)
