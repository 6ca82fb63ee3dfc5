// Package conntrack reads the kernel's connection-tracking table into the
// snapshot: over netlink from the running kernel (streaming, one reused
// message buffer, keeping only the flows a caller asks for), or from the text
// that `conntrack -L` prints. For a long-running agent, Watch keeps an index
// of the table's DNATed flows by backend, fed by the kernel's events, so that
// a change in the cluster is judged without reading the table again. It
// reports what the table holds and never judges whether a flow is a ghost.
package conntrack
