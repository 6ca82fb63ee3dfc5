// Package nodefs reads a node's files under a host root (the node's / as
// mounted into ghostwatch, or a copy of it): small files, bounded, and the
// CNI configuration files in the order the kubelet reads them. The sources
// of a node's ledgers (host-local's store, Calico's node name) share it.
package nodefs

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"slices"
)

// CNIConfDir is where the kubelet reads CNI configurations.
const CNIConfDir = "/etc/cni/net.d"

// MaxFile bounds what ReadFile reads: a reservation, a node name or a CNI
// configuration is bytes to kilobytes.
const MaxFile = 1 << 20

// ReadFile reads the file at p (a path of this process), refusing one
// larger than MaxFile.
func ReadFile(p string) ([]byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxFile+1))
	if err != nil {
		return nil, err
	}
	if len(b) > MaxFile {
		return nil, fmt.Errorf("larger than %d bytes", MaxFile)
	}
	return b, nil
}

// CNIConfigs lists the CNI configuration files under root (*.conf,
// *.conflist, *.json), as the node names them, sorted: the kubelet uses
// the first that holds a network. None when the directory is missing.
func CNIConfigs(root string) ([]string, error) {
	entries, err := os.ReadDir(filepath.Join(root, CNIConfDir))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading the CNI configurations in %s: %w", CNIConfDir, err)
	}
	var out []string
	for _, e := range entries {
		switch filepath.Ext(e.Name()) {
		case ".conf", ".conflist", ".json":
			if !e.IsDir() {
				out = append(out, path.Join(CNIConfDir, e.Name()))
			}
		}
	}
	slices.Sort(out)
	return out, nil
}
