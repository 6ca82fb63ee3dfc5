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
	"github.com/ghostwatch/ghostwatch/source/gossip"
	"github.com/ghostwatch/ghostwatch/source/nodefs"
)

// Bounds of what analyze unpacks, by what each entry decompresses to: a
// bundle is gzipped, and 1.4 MB of one held an annotation of 300 MB. A
// table of millions of flows as text is hundreds of megabytes, and so are
// the objects of a large cluster: both are read as streams (an object at a
// time, bounded by kubectl.MaxObject). What is decoded whole is bounded by
// what collect writes for the largest cluster.
const (
	maxBundleFile    = 2 << 30 // the conntrack table, the objects
	maxBundleTotal   = 4 << 30
	maxBundleEntries = 1_000_000
)

// bundleEntryBound bounds the entries decoded whole, and those of the
// node's files, which collect copies at most nodefs.MaxFile each (a JSON
// configuration it redacts is indented, which may double it).
var bundleEntryBound = map[string]int64{
	// A file of the node's is a line of the manifest: a host-local store
	// of tens of thousands of reservations is a few MiB of it.
	bundleManifest:  16 << 20,
	bundleAddresses: 1 << 20,
	bundleProxy:     1 << 20,
	bundleSysctls:   1 << 20,
	// The gossip clusters' views, bounded as member lists are
	// (gossip.ReadViews): four views of 100,000 members.
	bundleGossip:  256 << 20,
	bundleHistory: 256 << 20,
}

// entryBound is what the bundle's entry name may decompress to.
func entryBound(name string) int64 {
	if b, ok := bundleEntryBound[name]; ok {
		return b
	}
	if strings.HasPrefix(name, bundleHost+"/") {
		return 2 * nodefs.MaxFile
	}
	return maxBundleFile
}

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
		if o.savedGossip, err = gossip.ReadViews(bundleGossip, b); err != nil {
			return err
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

// mib says a bound in MiB.
func mib(n int64) string { return fmt.Sprintf("%d MiB", n>>20) }

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
	for entries := 0; ; entries++ {
		if entries == maxBundleEntries {
			return m, fmt.Errorf("%s: more than %d entries: more than collect writes", file, maxBundleEntries)
		}
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
		// The header says how much the entry decompresses to, and the
		// reader gives that much, no more.
		if bound := entryBound(name); h.Size > bound {
			return m, fmt.Errorf("%s: bundle entry %s: decompresses to more than %s (%d bytes), more than collect writes", file, h.Name, mib(bound), h.Size)
		}
		if total+h.Size > maxBundleTotal {
			return m, fmt.Errorf("%s: bundle entry %s: the bundle decompresses to more than %s, more than collect writes", file, h.Name, mib(maxBundleTotal))
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
