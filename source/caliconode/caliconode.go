// Package caliconode reads, under a node's host root, the node name
// Calico's CNI plugin books pod addresses under. The plugin takes it from
// the "nodename" of its CNI configuration when set, else from its nodename
// file (the configuration's "nodename_file", default
// /var/lib/calico/nodename, read as is), else from the host name. A stale
// name in either, left by a re-imaged node or a template, books addresses
// under another node; Calico's leak collector later frees them while the
// pods run (calico#12257).
package caliconode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"

	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source"
	"github.com/ghostwatch/ghostwatch/source/nodefs"
)

// Name is the source's name in reports.
const Name = "calico-node"

// Where Calico's CNI plugin looks on a node.
const (
	ConfDir         = nodefs.CNIConfDir
	DefaultNodename = "/var/lib/calico/nodename"
)

// Source reads Calico's CNI node name files of one node.
type Source struct {
	// Root is the node's / as this process sees it ("" means "/").
	Root string
}

// Name returns Name.
func (*Source) Name() string { return Name }

// Collect reads the CNI configuration the kubelet uses, and the nodename
// file it names, into s.CalicoNode. A node whose CNI configurations name
// no calico plugin is unsupported.
func (src *Source) Collect(_ context.Context, s *snapshot.Snapshot) error {
	root := src.Root
	if root == "" {
		root = "/"
	}
	if _, err := os.Stat(root); err != nil {
		return fmt.Errorf("host root %s: %w (mount the node's / there, read-only)", root, err)
	}
	confs, err := nodefs.CNIConfigs(root)
	if err != nil {
		return err
	}
	n := &snapshot.CalicoNode{}
	for i, file := range confs {
		b, err := nodefs.ReadIn(root, file)
		if err != nil {
			return fmt.Errorf("reading the CNI configuration %s: %w", file, err)
		}
		c, ok, err := calicoConf(b)
		if err != nil {
			return fmt.Errorf("the CNI configuration %s is not valid JSON: %w", file, err)
		}
		if !ok {
			continue
		}
		n.Config, n.ConfigInUse, n.ConfNodename = file, i == 0, c.Nodename
		n.NodenameFile = c.NodenameFile
		if n.NodenameFile == "" {
			n.NodenameFile = DefaultNodename
		}
		break
	}
	if n.Config == "" {
		return source.Unsupported("no CNI configuration in %s gives pods to Calico", ConfDir)
	}
	b, err := nodefs.ReadIn(root, n.NodenameFile)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		if _, perr := nodefs.Stat(root, path.Dir(path.Clean("/"+n.NodenameFile))); perr != nil {
			return fmt.Errorf("Calico's nodename file %s cannot be read under %s: %s is missing too, so it is most likely not mounted into ghostwatch (mount the node's %s there, read-only)",
				n.NodenameFile, root, path.Dir(n.NodenameFile), path.Dir(n.NodenameFile))
		}
	case err != nil:
		return fmt.Errorf("reading Calico's nodename file %s: %w", n.NodenameFile, err)
	default:
		n.FileExists, n.FileNodename = true, string(b)
		if fi, err := nodefs.Stat(root, n.NodenameFile); err == nil {
			n.FileModified = fi.ModTime()
		}
	}
	s.CalicoNode = n
	return nil
}

// Describe says where the node name comes from.
func (src *Source) Describe(s *snapshot.Snapshot) string {
	n := s.CalicoNode
	switch {
	case n.ConfNodename != "":
		return fmt.Sprintf("%s names node %q", n.Config, n.ConfNodename)
	case n.FileExists:
		return fmt.Sprintf("%s holds %q (%s names no node)", n.NodenameFile, n.FileNodename, n.Config)
	}
	return fmt.Sprintf("no node name in %s nor %s: the host name", n.Config, n.NodenameFile)
}

type pluginConf struct {
	Type         string `json:"type"`
	Nodename     string `json:"nodename"`
	NodenameFile string `json:"nodename_file"`
}

// calicoConf returns the calico plugin's settings of one configuration
// file (a single plugin or a list), and whether it has one.
func calicoConf(b []byte) (pluginConf, bool, error) {
	var c struct {
		pluginConf
		Plugins []pluginConf `json:"plugins"`
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return pluginConf{}, false, err
	}
	for _, p := range append([]pluginConf{c.pluginConf}, c.Plugins...) {
		if p.Type == "calico" {
			return p, true, nil
		}
	}
	return pluginConf{}, false, nil
}
