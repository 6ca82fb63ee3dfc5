package hostlocal

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"

	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source"
	"github.com/ghostwatch/ghostwatch/source/nodefs"
)

// Name is the source's name in reports.
const Name = "hostlocal"

// Where host-local and the CNI configurations live on a node.
const (
	DefaultDataDir = "/var/lib/cni/networks"
	ConfDir        = nodefs.CNIConfDir
)

// Source reads the node's host-local ledger.
type Source struct {
	// Root is the node's / as this process sees it ("" means "/").
	Root string
}

// Name returns Name.
func (*Source) Name() string { return Name }

// Collect reads every host-local network of the node into s.HostLocal. It
// fails, leaving s untouched, when the root, a configuration or a network
// directory cannot be read, and when a data directory a configuration
// names is missing with its parent (not mounted here); a data directory
// missing under a parent that exists is an empty store, as host-local
// sees it. It returns source.ErrUnsupported when the node has no
// host-local network at all.
func (src *Source) Collect(ctx context.Context, s *snapshot.Snapshot) error {
	root := src.Root
	if root == "" {
		root = "/"
	}
	if fi, err := os.Stat(root); err != nil {
		return fmt.Errorf("host root %s: %w (mount the node's / there, read-only)", root, err)
	} else if !fi.IsDir() {
		return fmt.Errorf("host root %s is not a directory", root)
	}
	confs, err := readConfigs(root)
	if err != nil {
		return err
	}
	h := &snapshot.HostLocal{Unjudged: confs.unjudged}
	byDir := map[string]int{}
	add := func(n snapshot.HostLocalNetwork) *snapshot.HostLocalNetwork {
		if i, ok := byDir[n.Dir]; ok {
			return &h.Networks[i]
		}
		byDir[n.Dir] = len(h.Networks)
		h.Networks = append(h.Networks, n)
		return &h.Networks[len(h.Networks)-1]
	}
	// Each data directory once: the default one, and each a configuration
	// names.
	dataDirs := []string{DefaultDataDir}
	named := map[string]string{}
	for _, c := range confs.nets {
		if !slices.Contains(dataDirs, c.dataDir) {
			dataDirs = append(dataDirs, c.dataDir)
		}
		if named[c.dataDir] == "" {
			named[c.dataDir] = c.file
		}
	}
	// notDir are the entries of the data directories, named as a network,
	// that are not directories, by path.
	notDir := map[string]fs.FileMode{}
	for _, dd := range dataDirs {
		if err := ctx.Err(); err != nil {
			return err
		}
		if fi, err := nodefs.Lstat(root, dd); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
			return fmt.Errorf("host-local's data directory %s is a symbolic link: ghostwatch does not follow it (under its host root it would resolve elsewhere than on the node); mount the directory it points to at %s", dd, dd)
		}
		entries, err := nodefs.ReadDir(root, dd)
		switch {
		case errors.Is(err, fs.ErrNotExist) && named[dd] == "":
			continue
		case errors.Is(err, fs.ErrNotExist):
			// Its parent is there: the data directory was never made (no
			// pod started on the network yet) or was wiped, and host-local
			// sees an empty store. Without its parent, the path is most
			// likely not mounted here: nothing can be said.
			if _, perr := nodefs.Stat(root, path.Dir(dd)); perr != nil {
				return fmt.Errorf("host-local's data directory %s (dataDir of %s) cannot be read under %s: %s is missing too, so it is most likely not mounted into ghostwatch (mount the node's %s there, read-only)",
					dd, named[dd], root, path.Dir(dd), path.Dir(dd))
			}
			continue
		case err != nil:
			return fmt.Errorf("reading host-local's data directory %s: %w", dd, err)
		}
		for _, e := range entries {
			switch {
			case !nodefs.ValidNetworkName(e.Name()):
				// host-local makes dataDir/<network>, and CNI refuses
				// such a network's name: not a store.
				continue
			case e.Type()&fs.ModeSymlink != 0:
				return fmt.Errorf("host-local network %s is a symbolic link: host-local's store is the directory %s itself, and ghostwatch does not follow a link (under its host root it would resolve elsewhere than on the node)", path.Join(dd, e.Name()), path.Join(dd, e.Name()))
			case !e.IsDir():
				// Not a store; one a configuration names is said below,
				// never read as an empty one.
				notDir[path.Join(dd, e.Name())] = e.Type()
				continue
			}
			n := add(snapshot.HostLocalNetwork{Name: e.Name(), Dir: path.Join(dd, e.Name())})
			if err := readNetwork(root, n); err != nil {
				return err
			}
		}
	}
	for _, c := range confs.nets {
		dir := path.Join(c.dataDir, c.name)
		if m, ok := notDir[dir]; ok {
			// host-local cannot reserve in it, and what it is says
			// nothing of the addresses handed out: not an empty store.
			return fmt.Errorf("host-local network %s (of %s) is %s, not a directory: its store cannot be read, so its reservations are not judged (remove it, or make it the directory host-local keeps)", dir, c.file, kind(m))
		}
		n := add(snapshot.HostLocalNetwork{Name: c.name, Dir: dir, Missing: true})
		if n.Config == "" {
			n.Config, n.RangeSets = c.file, c.rangeSets
		}
	}
	// A store no configuration names is judged on the Node's pod CIDRs only
	// where the node's network hands it to host-local without saying so:
	// flannel's plugin delegates to host-local under the network's own
	// name, in the default data directory. Anywhere else it is a leftover
	// (of a CNI the node ran before): its reservations say nothing of the
	// pods running now.
	for i := range h.Networks {
		n := &h.Networks[i]
		if n.Config != "" {
			continue
		}
		if confs.kubeletType == "flannel" && n.Name == confs.kubeletNet && n.Dir == path.Join(DefaultDataDir, n.Name) {
			continue
		}
		n.Unjudged = fmt.Sprintf("no CNI configuration names it, and the node's network (%s) does not hand out its addresses: a leftover store", orUnknown(confs.kubeletNet, confs.kubeletType))
	}
	if len(h.Networks) > 0 {
		if err := readCache(root, h); err != nil {
			return err
		}
	}
	if len(h.Networks) == 0 {
		return source.Unsupported("no host-local network on this node (no directory under %s, no configuration in %s gives host-local)",
			DefaultDataDir, ConfDir)
	}
	s.HostLocal = h
	return nil
}

// orUnknown names the node's network by its name and first plugin.
func orUnknown(name, typ string) string {
	if name == "" && typ == "" {
		return "none configured"
	}
	return fmt.Sprintf("%s, plugin %s", name, typ)
}

// Describe says what was read.
func (src *Source) Describe(s *snapshot.Snapshot) string {
	var parts []string
	for _, n := range s.HostLocal.Networks {
		p := fmt.Sprintf("%s %d reserved", n.Name, len(n.Reservations))
		if n.Missing {
			p = fmt.Sprintf("%s empty (no %s)", n.Name, n.Dir)
		}
		switch {
		case n.Unjudged != "":
			p += ", not judged: " + n.Unjudged
		case n.RangeSets == nil:
			p += ", no configuration"
		}
		if n.Ignored > 0 {
			p += fmt.Sprintf(", %d other files ignored (%s)", n.Ignored, n.IgnoredExample)
		}
		parts = append(parts, p)
	}
	parts = append(parts, s.HostLocal.Unjudged...)
	return strings.Join(parts, "; ")
}

// readNetwork reads one network directory into n.
func readNetwork(root string, n *snapshot.HostLocalNetwork) error {
	entries, err := nodefs.ReadDir(root, n.Dir)
	if err != nil {
		return fmt.Errorf("reading host-local network %s: %w", n.Dir, err)
	}
	n.Missing = false
	for _, e := range entries {
		name := e.Name()
		switch {
		case name == "lock":
			continue
		case strings.HasPrefix(name, "last_reserved_ip."):
			i, err := strconv.Atoi(strings.TrimPrefix(name, "last_reserved_ip."))
			if err != nil || i < 0 {
				ignore(n, name)
				continue
			}
			b, err := nodefs.ReadFileIn(root, path.Join(n.Dir, name))
			if err != nil {
				return fmt.Errorf("reading %s: %w", path.Join(n.Dir, name), err)
			}
			a, err := netip.ParseAddr(strings.TrimSpace(string(b)))
			if err != nil {
				return fmt.Errorf("%s holds %q, not an address: host-local would start its next allocation at the range's start", path.Join(n.Dir, name), truncate(b))
			}
			if n.LastReserved == nil {
				n.LastReserved = map[int]netip.Addr{}
			}
			n.LastReserved[i] = a.Unmap()
		default:
			a, err := netip.ParseAddr(name)
			if err != nil || a.Zone() != "" {
				ignore(n, name)
				continue
			}
			// host-local counts any entry named by an address as
			// reserved (it creates the file exclusively): one that cannot
			// be read as a reservation leaves the store unread, never the
			// address free.
			if !e.Type().IsRegular() {
				return fmt.Errorf("reservation %s is %s, not a regular file: host-local counts the address as reserved, but ghostwatch cannot read for which container, so the store %s is not judged (replace it with the container's reservation, or remove it if no pod holds %s)", path.Join(n.Dir, name), kind(e.Type()), n.Dir, a.Unmap())
			}
			b, err := nodefs.ReadFileIn(root, path.Join(n.Dir, name))
			if err != nil {
				return fmt.Errorf("reading reservation %s: %w", path.Join(n.Dir, name), err)
			}
			fi, err := e.Info()
			if err != nil {
				return fmt.Errorf("reading reservation %s: %w", path.Join(n.Dir, name), err)
			}
			id, ifName, _ := strings.Cut(string(b), "\r\n")
			n.Reservations = append(n.Reservations, snapshot.Reservation{
				IP: a.Unmap(), ContainerID: strings.TrimSpace(id), IfName: strings.TrimSpace(ifName), Modified: fi.ModTime(),
			})
		}
	}
	slices.SortFunc(n.Reservations, func(a, b snapshot.Reservation) int { return a.IP.Compare(b.IP) })
	return nil
}

// kind names a file's type as an error says it: "a named pipe".
func kind(m fs.FileMode) string {
	switch {
	case m&fs.ModeSymlink != 0:
		return "a symbolic link"
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a named pipe"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeDevice != 0:
		return "a device"
	case m.IsRegular():
		return "a regular file"
	}
	return "a file of type " + m.String()
}

func truncate(b []byte) string {
	if len(b) > 40 {
		return string(b[:40]) + "…"
	}
	return string(b)
}

// ignore counts an entry of n's directory that is not host-local's.
func ignore(n *snapshot.HostLocalNetwork, name string) {
	if n.Ignored == 0 {
		n.IgnoredExample = name
	}
	n.Ignored++
}
