package cniresults

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"

	"github.com/ghostwatch/ghostwatch/internal/text"
	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source"
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

// maxFile bounds what is read of one cached result: a result is a few
// kilobytes, and a file that is not one must not cost the agent its
// memory.
const maxFile = 1 << 20

// Collect attaches the cache to s. It leaves s untouched when it returns
// an error; a node without the cache has no such ledger (unsupported).
func (src *Source) Collect(_ context.Context, s *snapshot.Snapshot) error {
	dir := filepath.Join(src.HostRoot, "var/lib/cni/results")
	entries, err := os.ReadDir(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return source.Unsupported("%s does not exist: no container runtime on this node caches CNI results", dir)
	}
	if err != nil {
		return err
	}
	rs := &Results{}
	for _, e := range entries {
		// A symlink or a FIFO under a host root is never followed nor
		// opened: reading it could block, or read outside the root.
		if !e.Type().IsRegular() {
			continue
		}
		path := filepath.Join(dir, e.Name())
		b, err := readFile(path)
		if err != nil {
			return err
		}
		r, err := Parse(b)
		if err != nil {
			return fmt.Errorf("%s: %w (a cached result libcni wrote, or a stray file: move it away)", path, err)
		}
		r.File = path
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

func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxFile+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxFile {
		return nil, fmt.Errorf("%s: larger than %d bytes: not a cached CNI result", path, maxFile)
	}
	return b, nil
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
