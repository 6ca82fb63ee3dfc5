// Package build builds the binaries the lab runs but does not link (the
// Kubernetes control plane, Calico, the CNI host-local plugin, Consul) into
// the cache internal/testenv.BinDir reads, for a user who has the
// ghostwatch-lab binary and no checkout. It carries copies of the
// repository's recipes (scripts/*.sh and tools/<name>/, held to the
// originals by a test) and runs the script with bash and the go command
// found on PATH; it never runs a lab, and nothing outside the lab's binary
// may import it.
package build
