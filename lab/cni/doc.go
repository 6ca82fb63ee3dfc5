// Package cni runs CNI plugins as a container runtime does, for the tests
// that need the real host-local IPAM plugin (built by
// scripts/cni-plugins.sh, found with FindHostLocal): Plugin passes ADD,
// DEL and CHECK in CNI_* variables and the network configuration on stdin,
// and reads the result or the CNI error the plugin prints; HostLocal writes
// that configuration and names the network's Store, whose lock and
// reservation format Store.Lock and Locked.Reserve share with the plugin.
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
