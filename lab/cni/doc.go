// Package cni runs CNI plugins as a container runtime does, for the tests
// that need the real host-local IPAM plugin (built by
// scripts/cni-plugins.sh, found with FindHostLocal): Plugin passes ADD,
// DEL and CHECK in CNI_* variables and the network configuration on stdin,
// and reads the result or the CNI error the plugin prints; HostLocal writes
// that configuration and names the network's Store, whose lock and
// reservation format Store.Lock and Locked.Reserve share with the plugin.
//
// # host-local's allocation order
//
// What the tests (hostlocal_test.go) verify against the plugin, v1.9.1.
// Every ADD takes one address from each range set, in order; range set i
// is walked under the store's lock as follows.
//
//   - Candidates: every address from a range's rangeStart to its rangeEnd,
//     both included. By default rangeStart is the subnet's address plus one
//     and rangeEnd its last address, minus one for IPv4: the network
//     address is never handed out, nor the IPv4 broadcast address, but the
//     last IPv6 address is. Set explicitly, both may be any address of the
//     subnet, the network and broadcast addresses too. The gateway
//     (default: the subnet's address plus one) is skipped wherever it falls
//     in the range; set elsewhere, .1 becomes an address like any other. A
//     subnet must be /30 or wider for IPv4, /126 for IPv6.
//   - Start: right after the address in last_reserved_ip.<i> when that
//     address lies in the range set; otherwise (no file, or an address out
//     of the set) at the first range's rangeStart.
//   - Walk: upward; past a range's rangeEnd to the next range's
//     rangeStart, past the last range back to the first. An address whose
//     file exists, whatever it holds, is skipped (the file is created with
//     O_EXCL). The first address whose file can be created is taken, and
//     last_reserved_ip.<i> is overwritten with it. Back at the start
//     without one, ADD fails: "no IP addresses available in range set:
//     START-END,...".
//   - So a freed address waits until the walk wraps; a wipe of the whole
//     store restarts at rangeStart and hands out the running pods'
//     addresses again, in order (seed 003); a wipe that keeps
//     last_reserved_ip.<i> goes on after it, past the running pods'
//     addresses until the walk wraps.
//   - An address asked for in CNI_ARGS (IP=) is taken as is, or ADD fails
//     when it is booked or is the gateway; it moves last_reserved_ip.<i>
//     too.
//
// # ADD, DEL and CHECK
//
// A second ADD of a container ID and interface that hold an address of the
// range set fails ("duplicate allocation is not allowed"): ADD is not
// idempotent. Another interface of the same container gets another
// address. DEL removes every file holding exactly "ID\r\nIFNAME" (or, when
// there is none, the ID alone, as older plugins wrote), leaves
// last_reserved_ip.<i> alone, and succeeds when there is nothing to
// remove. CHECK fails unless such a file exists.
//
// # The store
//
// DataDir/Name (DataDir defaults to /var/lib/cni/networks) holds a file
// per reserved address, named by it (net.IP's text form) with mode 0600,
// holding the container ID, "\r\n" and the interface name, without a
// trailing newline; last_reserved_ip.<i> with the address alone; and lock,
// an empty file host-local opens O_RDONLY|O_CREAT with mode 0750 (before
// the umask) and flocks exclusively (LOCK_EX, blocking) around each range
// set's allocation, each release and each CHECK. A reservation written
// under that flock (Store.Lock) cannot race an ADD: the ADD waits and then
// skips it.
//
// # Calling host-local
//
// It needs CNI_COMMAND, CNI_CONTAINERID, CNI_IFNAME and CNI_PATH, and
// CNI_NETNS for ADD and CHECK. It never enters the namespace, and the
// plugin library only compares it with its own after ADD and DEL, so a path
// that does not exist does. CNI_ARGS is optional, but the K8S_POD_* keys a
// runtime passes are refused unless IgnoreUnknown=1 is among them
// (PodArgs). The configuration needs name and cniVersion (1.0.0 here, up
// to 1.1.0) and host-local's settings under "ipam" (dataDir, ranges); it
// reads none at the top level, and not ipam.type, which only tells a
// runtime or a main plugin which IPAM plugin to run. Failures
// are CNI errors on stdout with exit status 1: code 4 for missing
// variables, 7 for an invalid network name, 999 for everything host-local
// itself refuses. When CNI_NETNS is the plugin's own namespace, ADD
// allocates, prints its result, then fails with code 8 and keeps the
// reservation; DEL frees it, then fails the same way.
package cni
