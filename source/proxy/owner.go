package proxy

import (
	"bufio"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Listener is a listening TCP socket as the kernel lists it in
// /proc/net/tcp and /proc/net/tcp6: its address, the uid that opened it,
// and, when this process may see it, the process that holds it. Unlike an
// answer on the socket, none of it can be forged by an unprivileged
// process: the kernel records the uid of whoever made the socket.
type Listener struct {
	Addr  netip.AddrPort
	UID   uint32
	Inode uint64
	// PID and Comm name the process holding the socket; zero and "" when
	// it is not found (another PID namespace, or not readable here).
	PID  int
	Comm string
}

// String says who listens: "a process of uid 65534", "cilium-agent (pid
// 812, uid 0)".
func (l Listener) String() string {
	if l.Comm != "" {
		return fmt.Sprintf("%s (pid %d, uid %d)", l.Comm, l.PID, l.UID)
	}
	return fmt.Sprintf("a process of uid %d", l.UID)
}

// tcpListen is the state of a listening socket in /proc/net/tcp.
const tcpListen = "0A"

// maxProcFDs bounds the file descriptors looked at to find a socket's
// process: the search is a courtesy for the message, not the evidence.
const maxProcFDs = 200000

// listeners returns the listening TCP sockets under proc ("/proc", or
// where the node's procfs is) that accept connections to addr: bound to it
// or to its family's unspecified address (an IPv6 one accepts IPv4 too).
// It looks for the process of each in proc's process directories.
func listeners(proc string, addr netip.AddrPort) ([]Listener, error) {
	var out []Listener
	for _, name := range []string{"net/tcp", "net/tcp6"} {
		f, err := os.Open(filepath.Join(proc, name))
		if os.IsNotExist(err) && name == "net/tcp6" {
			continue // IPv6 disabled
		}
		if err != nil {
			return nil, err
		}
		ls, err := parseListeners(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("%s: %w", filepath.Join(proc, name), err)
		}
		for _, l := range ls {
			if accepts(l.Addr, addr) {
				out = append(out, l)
			}
		}
	}
	findProcesses(proc, out)
	return out, nil
}

// accepts reports whether a socket listening on l takes a connection to a.
func accepts(l, a netip.AddrPort) bool {
	if l.Port() != a.Port() {
		return false
	}
	la, aa := l.Addr(), a.Addr().Unmap()
	switch {
	case la.Unmap() == aa:
		return true
	case la == netip.IPv4Unspecified():
		return aa.Is4()
	case la == netip.IPv6Unspecified():
		return true
	}
	return false
}

// parseListeners reads the listening sockets of a /proc/net/tcp{,6}
// table: "sl local_address rem_address st tx_queue:rx_queue tr:tm->when
// retrnsmt uid timeout inode ...", addresses in hex as the kernel holds
// them (each 32-bit word in this host's byte order), ports in hex.
func parseListeners(r io.Reader) ([]Listener, error) {
	var out []Listener
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 4096), 1<<16)
	first := true
	for sc.Scan() {
		if first {
			first = false
			continue // the header
		}
		f := strings.Fields(sc.Text())
		if len(f) < 10 {
			return nil, fmt.Errorf("a line of %d fields: %q", len(f), sc.Text())
		}
		if f[3] != tcpListen {
			continue
		}
		addr, err := parseHexAddrPort(f[1])
		if err != nil {
			return nil, fmt.Errorf("local address %q: %w", f[1], err)
		}
		uid, err := strconv.ParseUint(f[7], 10, 32)
		if err != nil {
			return nil, fmt.Errorf("uid %q: %w", f[7], err)
		}
		inode, err := strconv.ParseUint(f[9], 10, 64)
		if err != nil {
			return nil, fmt.Errorf("inode %q: %w", f[9], err)
		}
		out = append(out, Listener{Addr: addr, UID: uint32(uid), Inode: inode})
	}
	return out, sc.Err()
}

// parseHexAddrPort parses "0100007F:2697" (IPv4) or 32 hex digits and a
// port (IPv6).
func parseHexAddrPort(s string) (netip.AddrPort, error) {
	hexAddr, hexPort, ok := strings.Cut(s, ":")
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("no port")
	}
	port, err := strconv.ParseUint(hexPort, 16, 16)
	if err != nil {
		return netip.AddrPort{}, err
	}
	raw, err := hex.DecodeString(hexAddr)
	if err != nil || (len(raw) != 4 && len(raw) != 16) {
		return netip.AddrPort{}, fmt.Errorf("not an address")
	}
	// Each 32-bit word was printed as a number in this host's order.
	b := make([]byte, len(raw))
	for i := 0; i < len(raw); i += 4 {
		binary.NativeEndian.PutUint32(b[i:], binary.BigEndian.Uint32(raw[i:]))
	}
	a, _ := netip.AddrFromSlice(b)
	return netip.AddrPortFrom(a, uint16(port)), nil
}

// findProcesses names the process holding each listener's socket, where
// proc shows it: a link "socket:[inode]" among a process's descriptors.
func findProcesses(proc string, ls []Listener) {
	if len(ls) == 0 {
		return
	}
	want := map[string]int{}
	for i, l := range ls {
		want[fmt.Sprintf("socket:[%d]", l.Inode)] = i
	}
	entries, err := os.ReadDir(proc)
	if err != nil {
		return
	}
	found, seen := 0, 0
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 0 {
			continue
		}
		fdDir := filepath.Join(proc, e.Name(), "fd")
		fds, err := os.ReadDir(fdDir)
		if err != nil {
			continue
		}
		for _, fd := range fds {
			if seen++; seen > maxProcFDs {
				return
			}
			target, err := os.Readlink(filepath.Join(fdDir, fd.Name()))
			if err != nil {
				continue
			}
			i, ok := want[target]
			if !ok || ls[i].PID != 0 {
				continue
			}
			ls[i].PID = pid
			if b, err := os.ReadFile(filepath.Join(proc, e.Name(), "comm")); err == nil {
				ls[i].Comm = strings.TrimSpace(string(b))
			}
			if found++; found == len(ls) {
				return
			}
		}
	}
}

// untrusted returns the listeners of ls an unprivileged process holds.
func untrusted(ls []Listener) []Listener {
	return slices.DeleteFunc(slices.Clone(ls), func(l Listener) bool { return l.UID == 0 })
}
