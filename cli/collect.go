package cli

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	networkingv1 "k8s.io/api/networking/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/ghostwatch/ghostwatch/internal/buildinfo"
	"github.com/ghostwatch/ghostwatch/internal/cmdline"
	"github.com/ghostwatch/ghostwatch/internal/text"
	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source"
	"github.com/ghostwatch/ghostwatch/source/calico"
	"github.com/ghostwatch/ghostwatch/source/conntrack"
	"github.com/ghostwatch/ghostwatch/source/gossip"
	"github.com/ghostwatch/ghostwatch/source/host"
	"github.com/ghostwatch/ghostwatch/source/hostlocal"
	"github.com/ghostwatch/ghostwatch/source/kube"
	"github.com/ghostwatch/ghostwatch/source/kube/history"
	"github.com/ghostwatch/ghostwatch/source/nodefs"
	"github.com/ghostwatch/ghostwatch/source/proxy"
)

// The files of a bundle, as collect writes them and analyze reads them.
const (
	bundleManifest  = "manifest.json"
	bundleObjects   = "cluster/objects.json"
	bundleCalico    = "cluster/calico.json"
	bundleConntrack = "node/conntrack.txt"
	bundleAddresses = "node/addresses.json"
	bundleProxy     = "node/proxy.json"
	bundleHost      = "node/host"
	bundleSysctls   = "node/sysctls.json"
	bundleHistory   = "controller/history.json"
	bundleGossip    = "controller/gossip.json"
)

// bundleDirs are the node's directories a bundle copies, as scan's
// --host-root reads them.
var bundleDirs = []string{"/etc/cni/net.d", "/var/lib/cni/networks", "/var/lib/calico"}

// manifest says what a bundle holds and what it does not, and why.
type manifest struct {
	Version    string    `json:"version"`
	Node       string    `json:"node"`
	CapturedAt time.Time `json:"capturedAt"`
	// Collected lists each file of the bundle and what it is.
	Collected []bundleFile `json:"collected"`
	// NotCollected lists what was not, and why.
	NotCollected []notCollected `json:"notCollected"`
}

type bundleFile struct {
	Path string `json:"path"`
	What string `json:"what"`
	// Redacted are the values of the file (JSON paths) that held
	// credentials and hold "REDACTED" instead.
	Redacted []string `json:"redacted,omitempty"`
}

// savedServiceProxy is what the proxy source said on the node: who
// translates Services, or why their flows do not show in conntrack.
type savedServiceProxy struct {
	ServiceProxy *snapshot.ServiceProxy `json:"serviceProxy,omitempty"`
	Unsupported  string                 `json:"unsupported,omitempty"`
}

type notCollected struct {
	What string `json:"what"`
	Why  string `json:"why"`
	// Absent says the ledger does not exist here (a resource the API
	// server does not serve): nothing was missed.
	Absent bool `json:"absent,omitempty"`
	// Withheld says it was left out on purpose: it holds, or may hold, a
	// credential, which no bundle holds. Nothing a rule reads is missed.
	Withheld bool `json:"withheld,omitempty"`
}

type collectOptions struct {
	kubeFlags *genericclioptions.ConfigFlags
	output    string
	nodeName  string
	hostRoot  string
	replicaFlags
	timeout time.Duration
}

func newCollectCommand(streams genericiooptions.IOStreams) *cobra.Command {
	o := &collectOptions{kubeFlags: genericclioptions.NewConfigFlags(true)}
	o.kubeFlags.Namespace = nil
	cmd := &cobra.Command{
		Use:   "collect",
		Short: "Save the evidence of this node and the cluster in one tarball, for ghostwatch analyze",
		Long: `collect saves, in one tar.gz, what every rule of a scan on this node reads, at
one moment: from the cluster, the objects the rules read (Pods, Services,
EndpointSlices, Nodes, ServiceCIDRs), trimmed to what the rules read (no pod's
containers or environment, no annotation but ghostwatch's), and Calico's IPAM
objects where they are served; from the node, its conntrack table (as
conntrack -L -o extended,id prints it, with the time it was read) and its
settings (net.netfilter.nf_conntrack_*), its addresses, which proxy translates
Services here, and a copy of its CNI configurations, host-local's stores and
Calico's node name file.

From the controller's replicas (through a port-forward, as ghostwatch ip does),
its address history and the gossip clusters' member lists its leader last read
(never the credentials they were read with).

A bundle holds no credential. Nothing is read from Secrets. Of the node's
files, a kubeconfig (Calico's calico-kubeconfig, Multus's) and a private key
are left out; in a JSON CNI configuration the value of every key whose name
says token, password, secret, key, certificate-data or credential (Calico's
k8s_auth_token) is replaced by REDACTED; any other file of /etc/cni/net.d is
left out, and one elsewhere that reads like a credential. The API server's
address is not recorded, not even in why something was not collected.

manifest.json inside lists every file and what it is (with the values
redacted in it), and what was not collected and why (a resource not served,
a symbolic link or a named pipe under the host root, no CAP_NET_ADMIN, a
file left out for its credentials).

ghostwatch analyze BUNDLE runs every rule on it, as a scan on this node at
that moment would.

Exit codes: 0 everything the rules read was collected (a file left out for
its credentials is no rule's evidence), 2 something was not (the bundle is
written all the same, and its manifest says what is missing).`,
		Example: `  # on a node, as root (CAP_NET_ADMIN reads the table)
  ghostwatch collect -f incident-42.tar.gz
  ghostwatch analyze incident-42.tar.gz`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return o.run(cmd.Context(), streams) },
	}
	f := cmd.Flags()
	o.kubeFlags.AddFlags(f)
	f.StringVarP(&o.output, "file", "f", "", "the tarball to write (default ghostwatch-NODE-TIME.tar.gz in the current directory)")
	f.StringVar(&o.nodeName, "node-name", "", "this node's name (default $NODE_NAME, else the hostname)")
	f.StringVar(&o.hostRoot, "host-root", "/", "where the node's / is mounted (in a pod: the hostPath mount)")
	o.replicaFlags.addFlags(f)
	f.DurationVar(&o.timeout, "timeout", time.Minute, "how long to wait for the API server and the controller's replicas")
	return cmd
}

// bundleWriter writes a tar.gz and its manifest.
type bundleWriter struct {
	tw *tar.Writer
	m  manifest
}

func (b *bundleWriter) add(name string, data []byte, what string) error {
	return b.addFrom(name, bytes.NewReader(data), int64(len(data)), what)
}

// addFrom adds the size bytes r reads as the file name.
func (b *bundleWriter) addFrom(name string, r io.Reader, size int64, what string) error {
	if err := b.tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: size, ModTime: b.m.CapturedAt, Typeflag: tar.TypeReg}); err != nil {
		return err
	}
	if _, err := io.CopyN(b.tw, r, size); err != nil {
		return err
	}
	b.m.Collected = append(b.m.Collected, bundleFile{Path: name, What: what})
	return nil
}

// dir records an (empty) directory.
func (b *bundleWriter) dir(name string) error {
	return b.tw.WriteHeader(&tar.Header{Name: strings.TrimSuffix(name, "/") + "/", Mode: 0o755, ModTime: b.m.CapturedAt, Typeflag: tar.TypeDir})
}

func (b *bundleWriter) miss(what, why string) {
	b.m.NotCollected = append(b.m.NotCollected, notCollected{What: what, Why: why})
}

// absent records a ledger that does not exist here.
func (b *bundleWriter) absent(what, why string) {
	b.m.NotCollected = append(b.m.NotCollected, notCollected{What: what, Why: why, Absent: true})
}

// withhold records a file left out because it holds a credential.
func (b *bundleWriter) withhold(what, why string) {
	b.m.NotCollected = append(b.m.NotCollected, notCollected{What: what, Why: why, Withheld: true})
}

// addNodeFile adds the node's file nodePath, as screenNodeFile screens
// it: whole, with its credentials redacted, or not at all.
func (b *bundleWriter) addNodeFile(name, nodePath string, data []byte) error {
	sc := screenNodeFile(nodePath, data)
	if sc.data == nil {
		b.withhold(nodePath, sc.withheld)
		return nil
	}
	what := "the node's " + nodePath
	if len(sc.redacted) > 0 {
		what += fmt.Sprintf(", %s redacted (%s)", text.Count(len(sc.redacted), "credential", "credentials"), strings.Join(sc.redacted, ", "))
	}
	if err := b.add(name, sc.data, what); err != nil {
		return err
	}
	b.m.Collected[len(b.m.Collected)-1].Redacted = sc.redacted
	return nil
}

func (o *collectOptions) run(ctx context.Context, streams genericiooptions.IOStreams) error {
	node := resolveNodeName(o.nodeName)
	captured := time.Now().UTC()
	out := o.output
	if out == "" {
		out = fmt.Sprintf("ghostwatch-%s-%s.tar.gz", cmpOr(node, "node"), captured.Format("20060102T150405Z"))
	}
	if o.timeout <= 0 {
		return cmdline.WithCode(ExitError, fmt.Errorf("--timeout %s: must be positive", o.timeout))
	}
	if err := checkURLs("--history-url", o.historyURLs); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	klog.SetSlogLogger(slog.New(slog.DiscardHandler))
	// The kubeconfig is checked before anything is read.
	restConfig, err := kube.ConfigFromFlags(o.kubeFlags)
	if err != nil {
		return cmdline.WithCode(ExitError, err)
	}
	client, _, err := kube.ClientForConfig(restConfig)
	if err != nil {
		return cmdline.WithCode(ExitError, err)
	}
	dyn, err := dynamic.NewForConfig(restConfig)
	if err != nil {
		return cmdline.WithCode(ExitError, err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(out), ".ghostwatch-bundle-*")
	if err != nil {
		return cmdline.WithCode(ExitError, fmt.Errorf("writing the bundle: %w", err))
	}
	defer os.Remove(tmp.Name())
	gz := gzip.NewWriter(tmp)
	b := &bundleWriter{tw: tar.NewWriter(gz), m: manifest{Version: buildinfo.Read().Version, Node: node, CapturedAt: captured, Collected: []bundleFile{}, NotCollected: []notCollected{}}}

	// The node first, the table before all: the moment the bundle stands
	// for is its capture.
	if err := collectConntrack(ctx, b, captured); err != nil {
		return cmdline.WithCode(ExitError, err)
	}
	if err := collectSysctls(b); err != nil {
		return cmdline.WithCode(ExitError, err)
	}
	var s snapshot.Snapshot
	if err := (&host.Addresses{}).Collect(ctx, &s); err != nil {
		b.miss("this node's addresses", err.Error())
	} else if data, err := json.Marshal(s.LocalAddresses); err == nil {
		if err := b.add(bundleAddresses, data, "this node's addresses, for kube-proxy's default NodePort frontends"); err != nil {
			return cmdline.WithCode(ExitError, err)
		}
	}
	var sp savedServiceProxy
	switch err := (&proxy.Source{}).Collect(ctx, &s); {
	case errors.Is(err, source.ErrUnsupported):
		sp.Unsupported = err.Error()
	case err != nil:
		b.miss("which proxy translates Services here", err.Error())
	default:
		sp.ServiceProxy = s.ServiceProxy
	}
	if sp.ServiceProxy != nil || sp.Unsupported != "" {
		data, err := json.Marshal(sp)
		if err != nil {
			return cmdline.WithCode(ExitError, err)
		}
		if err := b.add(bundleProxy, data, "which proxy translates Services on this node, and in which mode"); err != nil {
			return cmdline.WithCode(ExitError, err)
		}
	}
	dirs := slices.Clone(bundleDirs)
	if dataDirs, err := hostlocal.DataDirs(o.hostRoot); err != nil {
		b.miss("host-local's data directories", err.Error())
	} else {
		for _, d := range dataDirs {
			if !slices.Contains(dirs, d) {
				dirs = append(dirs, d)
			}
		}
	}
	for _, dir := range dirs {
		if err := copyHostDir(b, o.hostRoot, dir); err != nil {
			return cmdline.WithCode(ExitError, err)
		}
	}
	if err := collectObjects(ctx, b, dyn, restConfig.Host); err != nil {
		return cmdline.WithCode(ExitError, err)
	}
	if err := o.collectController(ctx, b, restConfig, client); err != nil {
		return cmdline.WithCode(ExitError, err)
	}
	data, err := json.MarshalIndent(b.m, "", "  ")
	if err != nil {
		return cmdline.WithCode(ExitError, err)
	}
	if err := b.tw.WriteHeader(&tar.Header{Name: bundleManifest, Mode: 0o644, Size: int64(len(data)), ModTime: captured, Typeflag: tar.TypeReg}); err != nil {
		return cmdline.WithCode(ExitError, err)
	}
	if _, err := b.tw.Write(data); err != nil {
		return cmdline.WithCode(ExitError, err)
	}
	for _, c := range []io.Closer{b.tw, gz, tmp} {
		if err := c.Close(); err != nil {
			return cmdline.WithCode(ExitError, fmt.Errorf("writing the bundle: %w", err))
		}
	}
	if err := os.Rename(tmp.Name(), out); err != nil {
		return cmdline.WithCode(ExitError, fmt.Errorf("writing the bundle: %w", err))
	}
	// A file's name and an error are the node's and the API server's:
	// printed escaped (text.Fprintf), each on its own line.
	text.Fprintf(streams.ErrOut, "wrote %s: %d files, captured at %s\n", out, len(b.m.Collected), captured.Format(time.RFC3339))
	missed := 0
	for _, n := range b.m.NotCollected {
		switch {
		case n.Absent:
			text.Fprintf(streams.ErrOut, "  not here: %s: %s\n", n.What, n.Why)
			continue
		case n.Withheld:
			text.Fprintf(streams.ErrOut, "  left out: %s: %s\n", n.What, n.Why)
			continue
		}
		missed++
		text.Fprintf(streams.ErrOut, "  not collected: %s: %s\n", n.What, n.Why)
	}
	if missed > 0 {
		return cmdline.WithCode(ExitError, fmt.Errorf("%d items not collected (the manifest in %s lists them, and why)", missed, out))
	}
	return nil
}

// collectConntrack writes the node's table as conntrack -L prints it.
func collectConntrack(ctx context.Context, b *bundleWriter, captured time.Time) error {
	if err := conntrack.CheckNetAdmin(); err != nil {
		b.miss("this node's conntrack table", err.Error())
		return nil
	}
	c, err := conntrack.Open()
	if err != nil {
		b.miss("this node's conntrack table", err.Error())
		return nil
	}
	defer c.Close()
	// Through a file, not memory: a table of millions of entries is
	// hundreds of megabytes of text.
	tmp, err := os.CreateTemp("", "ghostwatch-conntrack-*.txt")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	defer tmp.Close()
	w := conntrack.NewTextWriter(tmp, captured)
	n, err := c.Dump(ctx, func(f *snapshot.Flow) error { return w.Write(f) })
	if err == nil {
		err = w.Flush()
	}
	if err != nil {
		b.miss("this node's conntrack table", fmt.Sprintf("read %d entries, then: %v", n, err))
		return nil
	}
	size, err := tmp.Seek(0, io.SeekCurrent)
	if err != nil {
		return err
	}
	if _, err := tmp.Seek(0, io.SeekStart); err != nil {
		return err
	}
	return b.addFrom(bundleConntrack, tmp, size, fmt.Sprintf("this node's conntrack table, %d entries, as conntrack -L -o extended,id prints it", n))
}

// copyHostDir copies the regular files under dir of the node's tree, as
// nodefs reads them: every component resolved inside the host root (a link
// is followed as the node follows it, never out of root), nothing but
// regular files, each bounded; what it skips is said.
func copyHostDir(b *bundleWriter, root, dir string) error {
	fi, err := nodefs.Stat(root, dir)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		// No such directory here; that its parent exists is evidence
		// (host-local reads a wiped store as empty, a missing mount as
		// unknown): the parent goes in, empty.
		if fi, err := nodefs.Stat(root, path.Dir(dir)); err == nil && fi.IsDir() {
			return b.dir(path.Join(bundleHost, path.Dir(dir)))
		}
		return nil
	case err != nil:
		b.miss(dir, err.Error())
		return nil
	case !fi.IsDir():
		b.miss(dir, fmt.Sprintf("not a directory (%s): not read", fi.Mode().Type()))
		return nil
	}
	return copyNodeDir(b, root, dir, 0)
}

// maxHostDepth bounds how deep copyHostDir descends: the directories it
// copies are two or three levels deep.
const maxHostDepth = 8

// copyNodeDir copies what dir holds, depth levels below what was asked.
func copyNodeDir(b *bundleWriter, root, dir string, depth int) error {
	if depth > maxHostDepth {
		b.miss(dir, fmt.Sprintf("more than %d directories deep: not read", maxHostDepth))
		return nil
	}
	entries, err := nodefs.ReadDir(root, dir)
	if err != nil {
		b.miss(dir, err.Error())
		return nil
	}
	for _, e := range entries {
		nodePath := path.Join(dir, e.Name())
		switch {
		case e.IsDir():
			if err := copyNodeDir(b, root, nodePath, depth+1); err != nil {
				return err
			}
		case !e.Type().IsRegular():
			b.miss(nodePath, fmt.Sprintf("not a regular file (%s): not read", e.Type()))
		default:
			data, err := nodefs.ReadFileIn(root, nodePath)
			if err != nil {
				b.miss(nodePath, err.Error())
				continue
			}
			if err := b.addNodeFile(path.Join(bundleHost, strings.TrimPrefix(nodePath, "/")), nodePath, data); err != nil {
				return err
			}
		}
	}
	return nil
}

// objectKinds are the cluster's objects the rules read, each trimmed to
// what they read as the agent's and the controller's caches trim it: a
// pod's containers (their environment), its annotations but the gossip
// ones, every object's managed fields and last-applied configuration stay
// in the cluster.
var objectKinds = []struct {
	gvr  schema.GroupVersionResource
	kind string
	trim func(obj runtime.Object) (any, error)
}{
	{schema.GroupVersionResource{Version: "v1", Resource: "pods"}, "Pod", trimAs[corev1.Pod](kube.TrimPodKeeping(gossip.AnnotationPrefix))},
	{schema.GroupVersionResource{Version: "v1", Resource: "services"}, "Service", trimAs[corev1.Service](kube.TrimMeta)},
	{schema.GroupVersionResource{Group: "discovery.k8s.io", Version: "v1", Resource: "endpointslices"}, "EndpointSlice", trimAs[discoveryv1.EndpointSlice](kube.TrimMeta)},
	{schema.GroupVersionResource{Version: "v1", Resource: "nodes"}, "Node", trimAs[corev1.Node](kube.TrimNode)},
	{schema.GroupVersionResource{Group: "networking.k8s.io", Version: "v1", Resource: "servicecidrs"}, "ServiceCIDR", trimAs[networkingv1.ServiceCIDR](kube.TrimMeta)},
}

// trimAs converts an object the dynamic client listed to T and trims it.
func trimAs[T any](trim func(obj any) (any, error)) func(obj runtime.Object) (any, error) {
	return func(obj runtime.Object) (any, error) {
		u, ok := obj.(*unstructured.Unstructured)
		if !ok {
			return nil, fmt.Errorf("%T is not an unstructured object", obj)
		}
		t := new(T)
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, t); err != nil {
			return nil, err
		}
		return trim(t)
	}
}

// collectObjects writes the cluster's objects the rules read, trimmed
// (objectKinds), and Calico's IPAM objects where they are served, as
// kubectl get -o json lists them, without managed fields or last-applied
// annotations. What it says of a failure names neither the API server
// (server, the REST config's Host) nor the credentials it was reached
// with.
func collectObjects(ctx context.Context, b *bundleWriter, dyn dynamic.Interface, server string) error {
	list := func(gvr schema.GroupVersionResource, trim func(runtime.Object) (any, error)) ([]any, error) {
		l, err := dyn.Resource(gvr).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		var out []any
		for i := range l.Items {
			it := &l.Items[i]
			if trim != nil {
				apiVersion, kind := it.GetAPIVersion(), it.GetKind()
				t, err := trim(it)
				if err != nil {
					return nil, fmt.Errorf("%s %s: %w", kind, it.GetName(), err)
				}
				m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(t)
				if err != nil {
					return nil, fmt.Errorf("%s %s: %w", kind, it.GetName(), err)
				}
				m["apiVersion"], m["kind"] = apiVersion, kind
				out = append(out, m)
				continue
			}
			obj := it.Object
			if md, ok := obj["metadata"].(map[string]any); ok {
				delete(md, "managedFields")
				if ann, ok := md["annotations"].(map[string]any); ok {
					delete(ann, "kubectl.kubernetes.io/last-applied-configuration")
				}
			}
			out = append(out, obj)
		}
		return out, nil
	}
	write := func(name, what string, items []any) error {
		data, err := json.Marshal(map[string]any{"apiVersion": "v1", "kind": "List", "items": items})
		if err != nil {
			return err
		}
		return b.add(name, data, what)
	}
	var objects []any
	var kinds []string
	for _, k := range objectKinds {
		items, err := list(k.gvr, k.trim)
		if apierrors.IsNotFound(err) {
			b.absent(k.gvr.Resource, "not served by this API server")
			continue
		}
		if err != nil {
			b.miss(k.gvr.Resource, apiServerError(err, server))
			continue
		}
		objects = append(objects, items...)
		kinds = append(kinds, fmt.Sprintf("%d %s", len(items), k.gvr.Resource))
	}
	if err := write(bundleObjects, "the cluster's objects the rules read, trimmed to what they read: "+strings.Join(kinds, ", "), objects); err != nil {
		return err
	}
	var ledger []any
	var counts []string
	failed := false
	for _, r := range calico.Listed() {
		items, err := list(schema.GroupVersionResource{Group: r.Group, Version: "v1", Resource: r.Resource}, nil)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			b.miss(r.String(), apiServerError(err, server))
			failed = true
			continue
		}
		ledger = append(ledger, items...)
		counts = append(counts, fmt.Sprintf("%d %s", len(items), r.Resource))
	}
	switch {
	case len(counts) == 0 && failed:
		// Not known to be absent: each failure is said above.
		return nil
	case len(counts) == 0:
		b.absent("Calico's IPAM objects", "the API server serves none ("+calico.Group+")")
		return nil
	}
	slices.Sort(counts)
	return write(bundleCalico, "Calico's IPAM objects: "+strings.Join(counts, ", "), ledger)
}

// collectController asks every controller replica for its address history
// (merged: a replica restarted later knows less) and the leader for the
// gossip clusters' views of its last pass.
func (o *collectOptions) collectController(ctx context.Context, b *bundleWriter, cfg *rest.Config, client kubernetes.Interface) error {
	type said struct {
		all   history.Answer
		views gossipViews
	}
	ask := func(ctx context.Context, base, _ string) (said, error) {
		var s said
		if err := getJSON(ctx, base+history.AllPath, &s.all); err != nil {
			return s, err
		}
		return s, getJSON(ctx, base+GossipViewsPath, &s.views)
	}
	answers, missed := askAll(ctx, 4, replicaTargets(ctx, o.replicaFlags, cfg, client, ask))
	for _, m := range missed {
		// Finding the replicas, or a port-forward to one, asks the API
		// server, whose address the bundle does not hold.
		b.miss("the controller replica "+m.Replica, scrubServer(m.Error, cfg.Host))
	}
	if len(answers) == 0 {
		b.miss("the controller's address history and gossip views", "no replica answered")
		return nil
	}
	merged := history.Answer{}
	var told [][]history.Tenure
	var replicas []string
	var views *snapshot.Gossip
	leading := false
	for _, a := range answers {
		replicas = append(replicas, a.all.Replica)
		if merged.Since.IsZero() || a.all.Since.Before(merged.Since) {
			merged.Since = a.all.Since
		}
		told = append(told, a.all.Tenures)
		if a.views.Leading {
			leading, views = true, a.views.Gossip
		}
	}
	merged.Tenures = history.Merge(told...)
	slices.Sort(replicas)
	merged.Replica = strings.Join(replicas, ",")
	data, err := json.Marshal(merged)
	if err != nil {
		return err
	}
	if err := b.add(bundleHistory, data, fmt.Sprintf("the controller's address history, %d tenures, merged from %s", len(merged.Tenures), merged.Replica)); err != nil {
		return err
	}
	switch {
	case !leading:
		b.miss("the gossip clusters' member lists", "no leading controller replica answered")
	case views == nil:
		b.absent("the gossip clusters' member lists", "the controller reads no gossip cluster (none declared, or no pod annotated)")
	default:
		data, err := json.Marshal(views)
		if err != nil {
			return err
		}
		return b.add(bundleGossip, data, fmt.Sprintf("the gossip clusters' member lists, %d views, as the controller's leader last read them", len(views.Views)))
	}
	return nil
}

// sysctlDir holds the conntrack settings of this network namespace.
const sysctlDir = "/proc/sys/net/netfilter"

// collectSysctls writes this network namespace's conntrack settings
// (net.netfilter.nf_conntrack_*: the table's size and count, the
// timeouts, timestamps, events, the TCP window checks), by name.
func collectSysctls(b *bundleWriter) error {
	entries, err := os.ReadDir(sysctlDir)
	if err != nil {
		b.miss("the conntrack settings (net.netfilter.nf_conntrack_*)", err.Error())
		return nil
	}
	out := map[string]string{}
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), "nf_conntrack_") || e.IsDir() {
			continue
		}
		v, err := os.ReadFile(filepath.Join(sysctlDir, e.Name()))
		if err != nil {
			b.miss("net.netfilter."+e.Name(), err.Error())
			continue
		}
		out["net.netfilter."+e.Name()] = strings.TrimSpace(string(v))
	}
	data, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return err
	}
	return b.add(bundleSysctls, data, fmt.Sprintf("this node's conntrack settings, %d of them (net.netfilter.nf_conntrack_*)", len(out)))
}
