package cli

import (
	"archive/tar"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"path"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/ghostwatch/ghostwatch/internal/cmdline"
	"github.com/ghostwatch/ghostwatch/snapshot"
)

// Bounds of what analyze unpacks: a table of millions of flows as text is
// hundreds of megabytes; every other file is small.
const (
	maxBundleFile  = 2 << 30
	maxBundleTotal = 4 << 30
)

func newAnalyzeCommand(streams genericiooptions.IOStreams) *cobra.Command {
	o := &scanOptions{}
	cmd := &cobra.Command{
		Use:   "analyze BUNDLE",
		Short: "Run every rule on a bundle ghostwatch collect wrote, as a scan at that moment would",
		Long: `analyze reads a bundle (ghostwatch collect) and runs every rule on what it
holds, as ghostwatch scan on that node at the capture would: the cluster's
objects and Calico's, the node's conntrack table with its capture time, its
addresses and Service proxy, its copy of the node's files, and the gossip
clusters' member lists the controller read. Nothing live is read. The report is scan's; a rule whose evidence the bundle lacks is not
judged, and the report says so (the bundle's manifest says why it is missing).

Exit codes as scan's: 0 nothing at or above --fail-on, 1 findings, 2 could
not run or the evidence was incomplete.`,
		Example: `  ghostwatch analyze incident-42.tar.gz
  ghostwatch analyze incident-42.tar.gz -o json --rule stale-nat-flow`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			dir, err := os.MkdirTemp("", "ghostwatch-analyze-")
			if err != nil {
				return cmdline.WithCode(ExitError, err)
			}
			defer os.RemoveAll(dir)
			m, err := unpackBundle(args[0], dir)
			if err != nil {
				return cmdline.WithCode(ExitError, err)
			}
			if err := o.fromBundle(dir, m); err != nil {
				return cmdline.WithCode(ExitError, fmt.Errorf("%s: %w", args[0], err))
			}
			return o.run(cmd, streams)
		},
	}
	f := cmd.Flags()
	f.StringVarP(&o.output, "output", "o", "table", "output format: table, json or yaml")
	f.StringVar(&o.failOn, "fail-on", "warning", "exit 1 when a finding is at least this severe: info, warning, critical, or none")
	f.StringSliceVar(&o.rules, "rule", nil, "run only these rules (default all)")
	return cmd
}

// fromBundle sets o to scan what the unpacked bundle at dir holds.
func (o *scanOptions) fromBundle(dir string, m manifest) error {
	has := func(name string) bool {
		_, err := os.Stat(filepath.Join(dir, filepath.FromSlash(name)))
		return err == nil
	}
	o.nodeName = m.Node
	// collect lists every namespace.
	o.kubeObjects, o.objectsWhole = []string{filepath.Join(dir, "cluster")}, true
	if has(bundleConntrack) {
		o.conntrackFile = filepath.Join(dir, filepath.FromSlash(bundleConntrack))
		o.capturedAt = m.CapturedAt.UTC().Format(time.RFC3339Nano)
	}
	o.hostRoot, o.hostRootSet = filepath.Join(dir, filepath.FromSlash(bundleHost)), true
	if has(bundleAddresses) {
		b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(bundleAddresses)))
		if err != nil {
			return err
		}
		o.savedAddresses = []netip.Addr{}
		if err := json.Unmarshal(b, &o.savedAddresses); err != nil {
			return fmt.Errorf("%s: %w", bundleAddresses, err)
		}
	}
	if has(bundleGossip) {
		b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(bundleGossip)))
		if err != nil {
			return err
		}
		o.savedGossip = &snapshot.Gossip{}
		if err := json.Unmarshal(b, o.savedGossip); err != nil {
			return fmt.Errorf("%s: %w", bundleGossip, err)
		}
	}
	if has(bundleProxy) {
		b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(bundleProxy)))
		if err != nil {
			return err
		}
		o.savedProxy = &savedServiceProxy{}
		if err := json.Unmarshal(b, o.savedProxy); err != nil || (o.savedProxy.ServiceProxy == nil && o.savedProxy.Unsupported == "") {
			return fmt.Errorf("%s: not a saved Service proxy (%v)", bundleProxy, err)
		}
	}
	return nil
}

// unpackBundle unpacks the bundle at file into dir and returns its
// manifest. Only regular files and directories are unpacked, each under
// dir and bounded in size; anything else is an error naming it.
func unpackBundle(file, dir string) (manifest, error) {
	var m manifest
	f, err := os.Open(file)
	if err != nil {
		return m, err
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		return m, fmt.Errorf("%s: not a bundle ghostwatch collect wrote (a tar.gz): %w", file, err)
	}
	tr := tar.NewReader(gz)
	var total int64
	seen := false
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return m, fmt.Errorf("%s: %w", file, err)
		}
		name := path.Clean(h.Name)
		if path.IsAbs(name) || name == ".." || strings.HasPrefix(name, "../") {
			return m, fmt.Errorf("%s: %q lies outside the bundle", file, h.Name)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			// A directory that was there, empty or not.
			if err := os.MkdirAll(filepath.Join(dir, filepath.FromSlash(name)), 0o700); err != nil {
				return m, err
			}
			continue
		case tar.TypeReg:
		default:
			return m, fmt.Errorf("%s: %s is not a regular file (type %q): a bundle holds none", file, h.Name, h.Typeflag)
		}
		if h.Size > maxBundleFile || total+h.Size > maxBundleTotal {
			return m, fmt.Errorf("%s: %s is %d bytes: more than a bundle holds", file, h.Name, h.Size)
		}
		total += h.Size
		dst := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(dst), 0o700); err != nil {
			return m, err
		}
		out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
		if err != nil {
			return m, fmt.Errorf("%s: %s: %w", file, h.Name, err)
		}
		_, err = io.Copy(out, io.LimitReader(tr, h.Size))
		if cerr := out.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			return m, err
		}
		if name == bundleManifest {
			seen = true
		}
	}
	if !seen {
		return m, fmt.Errorf("%s: no %s: not a bundle ghostwatch collect wrote", file, bundleManifest)
	}
	b, err := os.ReadFile(filepath.Join(dir, bundleManifest))
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal(b, &m); err != nil {
		return m, fmt.Errorf("%s: its %s: %w", file, bundleManifest, err)
	}
	if m.Node == "" || m.CapturedAt.IsZero() {
		return m, fmt.Errorf("%s: its %s names no node or capture time", file, bundleManifest)
	}
	if _, err := os.Stat(filepath.Join(dir, "cluster")); err != nil {
		if err := os.MkdirAll(filepath.Join(dir, "cluster"), 0o700); err != nil {
			return m, err
		}
	}
	return m, nil
}
