//go:build tools

// Package tools pins Prometheus's version; scripts/prometheus-binary.sh
// builds its command.
package tools

import _ "github.com/prometheus/prometheus/cmd/prometheus"
