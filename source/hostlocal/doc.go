// Package hostlocal reads the ledger of the CNI host-local IPAM plugin on a
// node into the snapshot: which addresses it reserved, for which container,
// where its next allocation starts, and the ranges it allocates from. It
// reads, from under a host root (the node's / as mounted into the agent,
// or a copy of it):
//
//   - the CNI configurations in etc/cni/net.d (*.conf, *.conflist, *.json),
//     for every network whose IPAM is host-local: its name, its data
//     directory (dataDir, default /var/lib/cni/networks) and its range
//     sets, with host-local's defaults applied;
//   - every network directory under those data directories: a file per
//     reserved address (named by it, holding the container ID, "\r\n" and
//     the interface name, or the ID alone before CNI plugins v0.8.0),
//     last_reserved_ip.<i> per range set, and the lock file.
//
// It never writes, and never judges: a missing or unreadable directory is
// an error that says which, not an empty ledger, so that no rule mistakes a
// missing mount for "every pod is unbooked". So is an entry named by an
// address that is not a regular file (a named pipe, a socket, a link, a
// directory): host-local counts its address as reserved, and ghostwatch
// cannot say for which container, so the store is not judged rather than
// the address read as free. Every path is resolved inside the host root
// (nodefs): a parent directory linked elsewhere on the node is followed
// there, never out of the root. A network a configuration
// names whose own directory is missing while its data directory exists is
// read as holding no reservation: that is what host-local sees too.
package hostlocal
