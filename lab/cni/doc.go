// Package cni runs CNI plugins as a container runtime does, for the tests
// that need the real host-local IPAM plugin (built by
// scripts/cni-plugins.sh, found with FindHostLocal): Plugin passes ADD,
// DEL and CHECK in CNI_* variables and the network configuration on stdin,
// and reads the result or the CNI error the plugin prints.
package cni
