// Package conntrack reads the kernel's connection-tracking table into the
// snapshot: over netlink from the running kernel (streaming, one reused
// message buffer, keeping only the flows a caller asks for), or from the text
// that `conntrack -L` prints. It reports what the table holds and never
// judges whether a flow is a ghost.
package conntrack
