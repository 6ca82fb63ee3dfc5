package cniresults

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"path"

	"github.com/ghostwatch/ghostwatch/internal/text"
	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source"
	"github.com/ghostwatch/ghostwatch/source/nodefs"
)

// Name is the source's stable name: rules name it in Info.Sources, and
// metrics and reports by it.
const Name = "cni-results"

// Source reads libcni's result cache under HostRoot.
type Source struct {
	// HostRoot is where the host's filesystem is mounted (--host-root):
	// every host path is under it, so that tests point it at fixtures.
	HostRoot string
}

// Name returns Name.
func (*Source) Name() string { return Name }

// resultsDir is where libcni caches its results, as the node names it.
const resultsDir = "/var/lib/cni/results"

// Collect attaches the cache to s. It leaves s untouched when it returns
// an error; a node without the cache has no such ledger (unsupported).
func (src *Source) Collect(_ context.Context, s *snapshot.Snapshot) error {
	// nodefs resolves every component inside the host root, as the node
	// resolves it: no link, in a parent directory either, leads out.
	entries, err := nodefs.ReadDir(src.HostRoot, resultsDir)
	if errors.Is(err, fs.ErrNotExist) {
		return source.Unsupported("%s does not exist: no container runtime on this node caches CNI results", resultsDir)
	}
	if err != nil {
		return err
	}
	rs := &Results{}
	for _, e := range entries {
		// A symlink or a FIFO in the cache is not a result: it is neither
		// followed nor opened (reading a FIFO would block).
		if !e.Type().IsRegular() {
			continue
		}
		name := path.Join(resultsDir, e.Name())
		// Bounded in size and time: a file that is not a result must not
		// cost the agent its memory, nor a hung mount its loop.
		b, err := nodefs.ReadFileIn(src.HostRoot, name)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		r, err := Parse(b)
		if err != nil {
			return fmt.Errorf("%s: %w (a cached result libcni wrote, or a stray file: move it away)", name, err)
		}
		r.File = name
		rs.Entries = append(rs.Entries, r)
	}
	snapshot.Attach(s, Name, rs)
	return nil
}

// Describe says what a complete collection read, for the report's
// Sources.
func (*Source) Describe(s *snapshot.Snapshot) string {
	if rs := snapshot.LedgerOf[Results](s, Name); rs != nil {
		return text.Count(len(rs.Entries), "cached result", "cached results")
	}
	return ""
}

// cached is libcni's cache file, as far as the rules read it.
type cached struct {
	Kind        string      `json:"kind"`
	ContainerID string      `json:"containerId"`
	IfName      string      `json:"ifName"`
	NetworkName string      `json:"networkName"`
	CNIArgs     [][2]string `json:"cniArgs"`
	Result      struct {
		IPs []struct {
			Address string `json:"address"`
		} `json:"ips"`
	} `json:"result"`
}

// Parse reads one cached result. It fails on anything that is not one: a
// parser of a host's files never guesses.
func Parse(b []byte) (Result, error) {
	var c cached
	if err := json.Unmarshal(b, &c); err != nil {
		return Result{}, err
	}
	if c.Kind != "cniCacheV1" {
		return Result{}, fmt.Errorf("kind %q: not libcni's cniCacheV1", c.Kind)
	}
	r := Result{Network: c.NetworkName, ContainerID: c.ContainerID, IfName: c.IfName}
	for _, a := range c.CNIArgs {
		switch a[0] {
		case "K8S_POD_NAMESPACE":
			r.PodNamespace = a[1]
		case "K8S_POD_NAME":
			r.PodName = a[1]
		case "K8S_POD_UID":
			r.PodUID = a[1]
		}
	}
	for _, ip := range c.Result.IPs {
		p, err := netip.ParsePrefix(ip.Address)
		if err != nil {
			return Result{}, fmt.Errorf("result address %q: %w", ip.Address, err)
		}
		r.IPs = append(r.IPs, p.Addr())
	}
	return r, nil
}
