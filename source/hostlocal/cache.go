package hostlocal

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"path"
	"slices"

	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source/nodefs"
)

// ResultsDir is where the runtimes' CNI library (libcni: containerd,
// CRI-O) caches the result of each ADD until its DEL: a file per network,
// container and interface.
const ResultsDir = "/var/lib/cni/results"

// cacheFile is what a cached result says that matters here.
type cacheFile struct {
	Kind        string      `json:"kind"`
	ContainerID string      `json:"containerId"`
	IfName      string      `json:"ifName"`
	NetworkName string      `json:"networkName"`
	CniArgs     [][2]string `json:"cniArgs"`
	Result      struct {
		IPs []struct {
			Address string `json:"address"`
		} `json:"ips"`
	} `json:"result"`
}

// readCache reads the runtimes' cached ADD results. A file that is not one
// is counted and skipped: the cache only helps to name a reservation's
// container, and nothing is judged on its absence.
func readCache(root string, h *snapshot.HostLocal) error {
	entries, err := nodefs.ReadDir(root, ResultsDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading the CNI result cache %s: %w", ResultsDir, err)
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		b, err := nodefs.ReadFileIn(root, path.Join(ResultsDir, e.Name()))
		if err != nil {
			return fmt.Errorf("reading the CNI result cache %s: %w", path.Join(ResultsDir, e.Name()), err)
		}
		r, ok := parseCache(b)
		if !ok {
			h.CacheSkipped++
			continue
		}
		r.File = path.Join(ResultsDir, e.Name())
		h.Cached = append(h.Cached, r)
	}
	slices.SortFunc(h.Cached, func(a, b snapshot.CachedResult) int { return cmp.Compare(a.File, b.File) })
	return nil
}

// parseCache reads one cached result: its network, container, interface,
// the pod the runtime named in its arguments, and the addresses.
func parseCache(b []byte) (snapshot.CachedResult, bool) {
	var c cacheFile
	if err := json.Unmarshal(b, &c); err != nil || c.Kind != "cniCacheV1" || c.ContainerID == "" || c.NetworkName == "" {
		return snapshot.CachedResult{}, false
	}
	r := snapshot.CachedResult{Network: c.NetworkName, ContainerID: c.ContainerID, IfName: c.IfName}
	for _, kv := range c.CniArgs {
		switch kv[0] {
		case "K8S_POD_NAMESPACE":
			r.PodNamespace = kv[1]
		case "K8S_POD_NAME":
			r.PodName = kv[1]
		case "K8S_POD_UID":
			r.PodUID = kv[1]
		}
	}
	for _, ip := range c.Result.IPs {
		if p, err := netip.ParsePrefix(ip.Address); err == nil && p.Addr().Zone() == "" {
			r.IPs = append(r.IPs, p.Addr().Unmap())
		}
	}
	return r, true
}
