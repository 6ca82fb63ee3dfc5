package hostlocal

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"path"
	"slices"
	"strings"

	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source/nodefs"
)

// conf is a network whose IPAM is host-local, from one CNI configuration.
type conf struct {
	file      string // as the node sees it
	name      string
	dataDir   string
	rangeSets []snapshot.RangeSet
}

// netConf is what a CNI configuration file says that matters here: a
// single plugin (*.conf, *.json) or a list of them (*.conflist).
type netConf struct {
	Name    string       `json:"name"`
	Type    string       `json:"type"`
	IPAM    *ipamConf    `json:"ipam"`
	Plugins []pluginConf `json:"plugins"`
}

// mainType is the type of the configuration's first plugin: the one that
// gives the pod its interface.
func (nc *netConf) mainType() string {
	if len(nc.Plugins) > 0 {
		return nc.Plugins[0].Type
	}
	return nc.Type
}

// configs are the host-local networks of a node's CNI configurations.
type configs struct {
	nets []conf
	// kubelet is the network of the first configuration, which the
	// kubelet uses: its name and its first plugin's type.
	kubeletNet, kubeletType string
	// unjudged says what is not read, and why.
	unjudged []string
}

type pluginConf struct {
	Type string    `json:"type"`
	IPAM *ipamConf `json:"ipam"`
}

type ipamConf struct {
	Type    string `json:"type"`
	DataDir string `json:"dataDir"`
	// The single range of old configurations, inline.
	rangeConf
	Ranges [][]rangeConf `json:"ranges"`
}

type rangeConf struct {
	Subnet     string `json:"subnet"`
	RangeStart string `json:"rangeStart"`
	RangeEnd   string `json:"rangeEnd"`
	Gateway    string `json:"gateway"`
}

// DataDirs returns host-local's data directories on the node whose files
// are under root: the default one, and each its CNI configurations name.
func DataDirs(root string) ([]string, error) {
	confs, err := readConfigs(root)
	if err != nil {
		return nil, err
	}
	dirs := []string{DefaultDataDir}
	for _, c := range confs.nets {
		if !slices.Contains(dirs, c.dataDir) {
			dirs = append(dirs, c.dataDir)
		}
	}
	return dirs, nil
}

// readConfigs returns the host-local networks of the CNI configurations in
// root's ConfDir, in the order the kubelet reads the files (by name); a
// network named twice keeps its first configuration. A network whose name
// CNI refuses allocates nothing: it is left out, and said.
func readConfigs(root string) (*configs, error) {
	files, err := nodefs.CNIConfigs(root)
	if err != nil {
		return nil, err
	}
	out := &configs{}
	seen := map[string]bool{}
	for i, file := range files {
		b, err := nodefs.ReadIn(root, file)
		if err != nil {
			return nil, fmt.Errorf("reading the CNI configuration %s: %w", file, err)
		}
		cs, nc, err := parseConfig(file, b)
		var bad badName
		switch {
		case errors.As(err, &bad):
			out.unjudged = append(out.unjudged, bad.Error())
			continue
		case err != nil:
			return nil, err
		}
		if i == 0 {
			out.kubeletNet, out.kubeletType = nc.Name, nc.mainType()
		}
		for _, c := range cs {
			if !seen[c.name] {
				seen[c.name] = true
				out.nets = append(out.nets, c)
			}
		}
	}
	return out, nil
}

// badName is a configuration whose host-local network has a name CNI
// refuses (nodefs.ValidNetworkName).
type badName struct{ file, name string }

func (b badName) Error() string {
	return fmt.Sprintf("the CNI configuration %s names its network %q, which CNI refuses (letters, digits, _ . and -, starting with a letter or a digit): nothing is allocated from it, and it is not read", b.file, b.name)
}

// parseConfig returns the host-local networks one configuration file
// defines (none when its IPAM is another plugin's).
func parseConfig(file string, b []byte) ([]conf, *netConf, error) {
	var nc netConf
	if err := json.Unmarshal(b, &nc); err != nil {
		return nil, nil, fmt.Errorf("the CNI configuration %s is not valid JSON: %w", file, err)
	}
	ipams := []*ipamConf{nc.IPAM}
	for _, p := range nc.Plugins {
		ipams = append(ipams, p.IPAM)
	}
	var out []conf
	for _, ic := range ipams {
		if ic == nil || ic.Type != "host-local" {
			continue
		}
		if nc.Name == "" {
			return nil, nil, fmt.Errorf("the CNI configuration %s gives host-local a network without a name", file)
		}
		if !nodefs.ValidNetworkName(nc.Name) {
			return nil, nil, badName{file, nc.Name}
		}
		c := conf{file: file, name: nc.Name, dataDir: DefaultDataDir}
		if ic.DataDir != "" {
			c.dataDir = path.Clean("/" + ic.DataDir)
		}
		raw := ic.Ranges
		if ic.rangeConf.Subnet != "" {
			raw = append([][]rangeConf{{ic.rangeConf}}, raw...)
		}
		for i, set := range raw {
			var rs snapshot.RangeSet
			for j, r := range set {
				ir, err := canonical(r)
				if err != nil {
					return nil, nil, fmt.Errorf("the CNI configuration %s, network %s, range %d of set %d: %w", file, nc.Name, j, i, err)
				}
				rs = append(rs, ir)
			}
			c.rangeSets = append(c.rangeSets, rs)
		}
		out = append(out, c)
	}
	return out, &nc, nil
}

// canonical applies host-local's defaults (snapshot.DefaultRange) to one
// range, then what the configuration sets.
func canonical(r rangeConf) (snapshot.IPRange, error) {
	var ir snapshot.IPRange
	if strings.TrimSpace(r.Subnet) == "" {
		return ir, errors.New("no subnet")
	}
	p, err := netip.ParsePrefix(r.Subnet)
	if err != nil {
		return ir, fmt.Errorf("subnet %q: %w", r.Subnet, err)
	}
	if p.Addr().Is4In6() {
		return ir, fmt.Errorf("subnet %s: an IPv4-mapped IPv6 subnet (write it as IPv4)", p)
	}
	p = p.Masked()
	ir, ok := snapshot.DefaultRange(p)
	if !ok {
		return ir, fmt.Errorf("subnet %s is too small to allocate from", p)
	}
	for _, f := range []struct {
		name string
		s    string
		to   *netip.Addr
	}{{"rangeStart", r.RangeStart, &ir.Start}, {"rangeEnd", r.RangeEnd, &ir.End}, {"gateway", r.Gateway, &ir.Gateway}} {
		if f.s == "" {
			continue
		}
		a, err := netip.ParseAddr(f.s)
		if err != nil {
			return ir, fmt.Errorf("%s %q: %w", f.name, f.s, err)
		}
		a = a.Unmap()
		if f.name != "gateway" && !p.Contains(a) {
			return ir, fmt.Errorf("%s %s is outside subnet %s", f.name, a, p)
		}
		*f.to = a
	}
	if ir.End.Less(ir.Start) {
		return ir, fmt.Errorf("rangeEnd %s is before rangeStart %s", ir.End, ir.Start)
	}
	return ir, nil
}
