package cli

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/ghostwatch/ghostwatch/audit"
	"github.com/ghostwatch/ghostwatch/finding"
	"github.com/ghostwatch/ghostwatch/internal/buildinfo"
	"github.com/ghostwatch/ghostwatch/internal/cmdline"
	"github.com/ghostwatch/ghostwatch/internal/redact"
	"github.com/ghostwatch/ghostwatch/rule"
	"github.com/ghostwatch/ghostwatch/sink"
	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source"
	"github.com/ghostwatch/ghostwatch/source/calico"
	"github.com/ghostwatch/ghostwatch/source/caliconode"
	"github.com/ghostwatch/ghostwatch/source/conntrack"
	"github.com/ghostwatch/ghostwatch/source/gossip"
	"github.com/ghostwatch/ghostwatch/source/host"
	"github.com/ghostwatch/ghostwatch/source/hostlocal"
	"github.com/ghostwatch/ghostwatch/source/kube"
	"github.com/ghostwatch/ghostwatch/source/kube/live"
	"github.com/ghostwatch/ghostwatch/source/kube/saved"
	"github.com/ghostwatch/ghostwatch/source/kubectl"
	"github.com/ghostwatch/ghostwatch/source/proxy"
)

type scanOptions struct {
	kubeFlags         *genericclioptions.ConfigFlags
	kubeObjects       []string
	conntrackFile     string
	gossipMembers     []string
	consulAddrs       []string
	plaintextToken    bool
	serfAddrs         []string
	serfAuth          string
	capturedAt        string
	nodeName          string
	nodePortAddresses []string
	serviceCIDRs      []string
	failOn            string
	output            string
	rules             []string
	syncTimeout       time.Duration
	clockSkew         time.Duration
	hostRoot          string
	live              bool

	// What a bundle saved (ghostwatch analyze): the node's addresses and
	// its Service proxy, read as the live scan reads them; hostRootSet
	// says hostRoot is a bundle's copy of the node's files.
	savedAddresses []netip.Addr
	savedProxy     *savedServiceProxy
	savedGossip    *snapshot.Gossip
	hostRootSet    bool
	objectsWhole   bool
}

func newScanCommand(streams genericiooptions.IOStreams) *cobra.Command {
	o := &scanOptions{kubeFlags: genericclioptions.NewConfigFlags(true)}
	// The scan always reads every namespace.
	o.kubeFlags.Namespace = nil
	cmd := &cobra.Command{
		Use:   "scan",
		Short: "Audit this node and the cluster once and report every ghost found",
		Long: `scan reads the cluster objects (Services, EndpointSlices, Pods, Nodes), this
node's conntrack table and its host-local IPAM store, and runs every rule (--rule
picks some; each reads only what it needs):

` + ruleList(rule.All(rule.Config{})) + `
Online it talks to the API server like kubectl does (--kubeconfig, --context,
...) and reads the kernel table over netlink, which needs CAP_NET_ADMIN on the
node. Offline it reads files instead: --kube-objects (what kubectl get -o yaml
or -o json prints) and --conntrack-file (what conntrack -L prints).

Exit codes: 0 nothing at or above --fail-on, 1 findings, 2 could not run or a
source was incomplete (then no finding is claimed for what it would have read).`,
		Example: `  # on a node (as a DaemonSet pod, or over SSH with a kubeconfig)
  ghostwatch scan

  # offline, from saved evidence
  kubectl get pods,services,endpointslices,nodes,servicecidrs -A -o yaml > objects.yaml
  sudo conntrack -L -o extended,id > conntrack.txt   # on the node, as root
  ghostwatch scan --kube-objects objects.yaml --conntrack-file conntrack.txt --node-name worker-3

  # a Serf cluster's members, read live from an agent's RPC, judged against the pods
  SERF_RPC_AUTH=... ghostwatch scan --rule gossip-ghost-member,gossip-ip-identity --serf 127.0.0.1:7373

  # in CI or a cron job: machine-readable, fail only on critical findings
  ghostwatch scan -o json --fail-on critical`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return o.run(cmd, streams) },
	}
	f := cmd.Flags()
	o.kubeFlags.AddFlags(f)
	f.StringArrayVar(&o.kubeObjects, "kube-objects", nil, "read cluster objects from this file, or the .json, .yaml and .yml files of this directory, instead of the API server (kubectl get ... -o yaml|json output; repeatable)")
	f.StringVar(&o.conntrackFile, "conntrack-file", "", "read flows from this `FILE`, a conntrack -L listing, instead of the kernel (\"-\" for stdin)")
	f.StringArrayVar(&o.gossipMembers, "gossip-members", nil, "read a gossip cluster's member list from this `FILE` (repeatable, one cluster's view each, \"-\" for stdin): consul members -detailed, the Consul API's /v1/agent/members, serf members -format=json, or the member list of the ghostwatch/gossip package; the format is detected from the content")
	f.StringArrayVar(&o.consulAddrs, "consul", nil, "read the members of the Consul agent at this `ADDR` live (http://host:8500 or https://host:8501; repeatable), with CONSUL_HTTP_TOKEN (or CONSUL_HTTP_TOKEN_FILE) and CONSUL_CACERT as consul's CLI reads them; the token goes over http to a loopback address only, unless --allow-plaintext-token")
	f.BoolVar(&o.plaintextToken, "allow-plaintext-token", false, "send CONSUL_HTTP_TOKEN over plain http to a --consul address that is not loopback")
	f.StringArrayVar(&o.serfAddrs, "serf", nil, "read the members of the Serf agent whose RPC listens at this `ADDR` live (host:port, as serf agent -rpc-addr; repeatable)")
	f.StringVar(&o.serfAuth, "serf-auth", "", "the Serf agents' RPC auth `KEY` (serf agent -rpc-auth); default $SERF_RPC_AUTH, which keeps it out of the process list")
	f.StringVar(&o.nodeName, "node-name", "", "the Node this scan runs on: its addresses are the NodePort frontends (default $NODE_NAME, else the hostname)")
	f.StringSliceVar(&o.serviceCIDRs, "service-cidr", nil, "the cluster's service IP ranges (kube-apiserver's --service-cluster-ip-range), in addition to its ServiceCIDR objects: a flow to an address in one that no Service holds was opened to a deleted Service. Needed only before Kubernetes 1.33 or when the saved objects hold no ServiceCIDR")
	f.StringSliceVar(&o.nodePortAddresses, "nodeport-addresses", nil, "CIDRs on which NodePorts are served, as kube-proxy's --nodeport-addresses (default: the Node's addresses and, read live, every address of this host, as kube-proxy's default)")
	f.StringVar(&o.failOn, "fail-on", "warning", "exit 1 when a finding is at least this severe: info, warning, critical, or none")
	f.StringSliceVar(&o.rules, "rule", nil, "run only these rules (default: all)")
	f.StringVar(&o.capturedAt, "captured-at", "", "with --conntrack-file: when the listing was captured (RFC 3339, e.g. 2026-11-22T14:05:00Z); flow ages (delta-time=) count from it. Default: the file's modification time; for stdin, unknown")
	f.DurationVar(&o.syncTimeout, "sync-timeout", 30*time.Second, "how long to wait for the API server to list the objects")
	f.DurationVar(&o.clockSkew, "clock-skew", 2*time.Second, "how far the node clock may be ahead of the API server's when proving a flow predates a pod")
	f.BoolVar(&o.live, "live", false, "with saved evidence (--kube-objects, --conntrack-file, --gossip-members), read what none of them gives live, from this host and the API server, and judge the saved evidence with it (only when it was saved just now); without it, what is not given is not judged")
	f.StringVar(&o.hostRoot, "host-root", "/", "the node's / as this process sees it: host-local's store, the CNI configurations and Calico's nodename file are read under it ("+hostlocal.DefaultDataDir+", "+hostlocal.ConfDir+", "+caliconode.DefaultNodename+"); offline (with --kube-objects or --conntrack-file) they are read only when this is given, from a copy")
	cmdline.AddOutputFlag(cmd, &o.output, `text is the table ("table" works too), json and yaml the report as one object`)
	cmdline.CompleteWith(cmd, "fail-on", "info", "warning", "critical", "none")
	cmdline.CompleteWith(cmd, "rule", rule.IDs(rule.All(rule.Config{}))...)
	return cmd
}

// scanPlan is what a scan reads and runs.
type scanPlan struct {
	sources []source.Source
	rules   []rule.Rule
	node    string
	npa     []netip.Prefix
	failOn  finding.Severity
	output  string
}

// plan builds the scan's sources and rules from its options.
func (o *scanOptions) plan(cmd *cobra.Command, streams genericiooptions.IOStreams) (*scanPlan, error) {
	var failOn finding.Severity
	if o.failOn != "none" {
		var err error
		if failOn, err = finding.ParseSeverity(o.failOn); err != nil {
			return nil, cmdline.WithCode(ExitError, fmt.Errorf("--fail-on %q: want info, warning, critical or none", o.failOn))
		}
	}
	output, err := cmdline.CheckOutput(o.output, map[string]string{"table": "text"})
	if err != nil {
		return nil, err
	}
	npa, err := parsePrefixes(o.nodePortAddresses)
	if err != nil {
		return nil, cmdline.WithCode(ExitError, fmt.Errorf("--nodeport-addresses: %w", err))
	}
	scidrs, err := parsePrefixes(o.serviceCIDRs)
	if err != nil {
		return nil, cmdline.WithCode(ExitError, fmt.Errorf("--service-cidr: %w", err))
	}
	cfg := rule.Config{Conntrack: rule.ConntrackConfig{NodePortAddresses: npa, ServiceCIDRs: scidrs, ClockSkew: o.clockSkew}}
	rules, err := rule.Select(cfg, o.rules)
	if err != nil {
		return nil, cmdline.WithCode(ExitError, fmt.Errorf("--rule: %w", err))
	}
	// A scan of saved evidence reads nothing live that it was not asked
	// to: not this host's conntrack table, addresses or files, not the
	// API server. What no flag gives is not given, and the rules that
	// read it are not judged (the report says so once, with how to give
	// it), unless --live asks to judge the saved evidence with live reads.
	offline := len(o.kubeObjects) > 0 || o.conntrackFile != "" || len(o.gossipMembers) > 0
	readLive := !offline || o.live
	if o.live && !offline {
		return nil, cmdline.WithCode(ExitError, errors.New("--live: this scan reads everything live already; it mixes live reads into a scan of saved evidence (--kube-objects, --conntrack-file, --gossip-members)"))
	}
	readStore := readLive || o.hostRootSet || cmd.Flags().Changed("host-root")
	node := resolveNodeName(o.nodeName)

	if n := stdinUses(o.kubeObjects, o.conntrackFile) + stdinUses(o.gossipMembers, ""); n > 1 {
		return nil, cmdline.WithCode(ExitError, errors.New(`"-" (stdin) is given more than once: stdin can feed only one input; save the others to files`))
	}
	var (
		kubeSrc source.Source
		// objects are the --kube-objects files, which the cluster's and
		// Calico's sources read, once for both.
		objects *kubectl.Files
	)
	if len(o.kubeObjects) > 0 {
		objects = &kubectl.Files{Paths: o.kubeObjects, Stdin: streams.In}
		fs := saved.NewFileSource(objects)
		fs.Whole = o.objectsWhole
		kubeSrc = fs
	} else if !readLive {
		kubeSrc = source.Absent{Source: kube.Name, Why: "no cluster objects: pass --kube-objects FILE, saved when the rest was (" + saved.SaveCommand + " > objects.yaml), or --live to judge the rest against the API server as it is now"}
	} else {
		client, _, err := kube.ClientFromFlags(o.kubeFlags)
		if err != nil {
			return nil, cmdline.WithCode(ExitError, err)
		}
		kubeSrc = &live.APISource{Client: client, Timeout: o.syncTimeout}
	}
	// The conntrack table, and the host's addresses it is judged with, only
	// when a rule reads it: the cluster rules run anywhere kubectl does.
	readsTable := len(rule.ReadersOf(rules, conntrack.Name)) > 0
	if !readsTable && (o.conntrackFile != "" || o.capturedAt != "") {
		var given []string
		for _, f := range []string{"conntrack-file", "captured-at"} {
			if cmd.Flags().Changed(f) {
				given = append(given, "--"+f)
			}
		}
		if len(given) > 0 {
			return nil, cmdline.WithCode(ExitError, fmt.Errorf("%s: no rule of this scan reads the conntrack table (%s)", strings.Join(given, " and "), strings.Join(rule.IDs(rules), ", ")))
		}
		// A bundle's table, which no rule of this analysis reads.
		o.conntrackFile, o.capturedAt = "", ""
	}
	// This host's own ledgers are judged only as a node the cluster
	// knows (onNode).
	from := nodeNameFrom(o.nodeName)
	local := sync.OnceValue(func() []netip.Addr {
		as, _ := host.Local()
		return as
	})
	onThisNode := func(src source.Source) source.Source {
		return onNode{Source: src, node: node, from: from, local: local}
	}
	var ctSrc source.Source = onThisNode(liveTable{&conntrack.KernelSource{}})
	if !readLive {
		ctSrc = source.Absent{Source: conntrack.Name, Why: "no conntrack listing: pass --conntrack-file FILE (on the node: sudo conntrack -L -o extended,id > conntrack.txt), or --live to read this host's table"}
	}
	if o.conntrackFile != "" {
		fs := &conntrack.FileSource{Path: o.conntrackFile, Stdin: streams.In}
		if o.capturedAt != "" {
			t, err := time.Parse(time.RFC3339, o.capturedAt)
			if err != nil {
				return nil, cmdline.WithCode(ExitError, fmt.Errorf("--captured-at %q: want a time as RFC 3339 writes it, e.g. 2026-11-22T14:05:00Z", o.capturedAt))
			}
			fs.CapturedAt = t
		}
		ctSrc = fs
	} else if o.capturedAt != "" {
		return nil, cmdline.WithCode(ExitError, errors.New("--captured-at needs --conntrack-file: a live table's ages count from now"))
	}

	// The cluster objects first: the conntrack dump keeps only the flows
	// the rules judge, and which those are depends on the Services (and,
	// live, on this host's addresses: kube-proxy's default NodePort
	// frontends).
	sources := []source.Source{kubeSrc}
	if len(rule.ReadersOf(rules, calico.Name)) > 0 {
		if objects == nil && !readLive {
			sources = append(sources, source.Absent{Source: calico.Name, Why: "no cluster objects (Calico's IPAM objects are saved with them): pass --kube-objects FILE"})
		} else {
			src, err := o.calicoSource(objects)
			if err != nil {
				return nil, cmdline.WithCode(ExitError, err)
			}
			sources = append(sources, src)
		}
	}
	memberFlags := o.memberFlags()
	if o.serfAuth != "" && len(o.serfAddrs) == 0 {
		return nil, cmdline.WithCode(ExitError, errors.New("--serf-auth needs --serf: it is the key of the Serf agents' RPC"))
	}
	if len(rule.ReadersOf(rules, gossip.Name)) > 0 {
		switch {
		case len(memberFlags) > 1:
			return nil, cmdline.WithCode(ExitError, fmt.Errorf("%s: give one kind of member list per scan (saved files, Consul agents or Serf agents), and scan once for each", strings.Join(memberFlags, " and ")))
		case len(o.gossipMembers) > 0:
			sources = append(sources, &gossip.FileSource{Paths: o.gossipMembers, Stdin: streams.In})
		case len(o.consulAddrs) > 0:
			src := &gossip.LiveSource{}
			for _, a := range o.consulAddrs {
				c, err := gossip.ConsulFromEnv(a)
				if err != nil {
					return nil, cmdline.WithCode(ExitError, redact.Error(fmt.Errorf("--consul %s: %w", redact.Addr(a), err), a))
				}
				c.AllowPlaintext = c.AllowPlaintext || o.plaintextToken
				src.Agents = append(src.Agents, c)
			}
			sources = append(sources, src)
		case len(o.serfAddrs) > 0:
			src := &gossip.LiveSource{}
			for _, a := range o.serfAddrs {
				src.Agents = append(src.Agents, gossip.SerfFromEnv(a, o.serfAuth))
			}
			sources = append(sources, src)
		case o.savedGossip != nil:
			sources = append(sources, savedGossip{*o.savedGossip})
		default:
			sources = append(sources, gossip.NotGiven{})
		}
	} else if len(memberFlags) > 0 {
		return nil, cmdline.WithCode(ExitError, fmt.Errorf("%s: no rule of this scan reads gossip members (%s)", strings.Join(memberFlags, ", "), strings.Join(rule.IDs(rules), ", ")))
	}
	if readsTable && o.conntrackFile == "" && readLive && len(npa) == 0 {
		sources = append(sources, onThisNode(&host.Addresses{}))
	}
	if readsTable && o.savedAddresses != nil && len(npa) == 0 {
		saved := o.savedAddresses
		sources = append(sources, &host.Addresses{Read: func() ([]netip.Addr, error) { return saved, nil }})
	}
	if readsTable {
		sources = append(sources, ctSrc)
		if o.savedProxy != nil {
			sources = append(sources, savedProxy{*o.savedProxy})
		}
		if readLive && o.conntrackFile == "" {
			// Who translates Services on this host: kube-proxy's mode
			// decides which addresses are NodePort frontends, and an eBPF
			// load balancer leaves no flow to judge.
			sources = append(sources, onThisNode(&proxy.Source{}))
		}
	}
	nodeFiles := fmt.Sprintf("no copy of the node's files: pass --host-root DIR, a copy of the node's %s, %s and %s, or --live to read this host's", hostlocal.ConfDir, hostlocal.DefaultDataDir, path.Dir(caliconode.DefaultNodename))
	// A copy of a node's files (--host-root with saved evidence, a
	// bundle's) is judged as the node it is given for; this host's are
	// judged only as a node the cluster knows.
	nodeFilesSource := func(src source.Source) source.Source {
		if !readLive || o.hostRootSet {
			return src
		}
		return onThisNode(src)
	}
	if len(rule.ReadersOf(rules, hostlocal.Name)) > 0 {
		if readStore {
			sources = append(sources, nodeFilesSource(&hostlocal.Source{Root: o.hostRoot}))
		} else {
			sources = append(sources, source.Absent{Source: hostlocal.Name, Why: nodeFiles})
		}
	}
	if len(rule.ReadersOf(rules, caliconode.Name)) > 0 {
		if readStore {
			sources = append(sources, nodeFilesSource(&caliconode.Source{Root: o.hostRoot}))
		} else {
			sources = append(sources, source.Absent{Source: caliconode.Name, Why: nodeFiles})
		}
	}
	return &scanPlan{sources: sources, rules: rules, node: node, npa: npa, failOn: failOn, output: output}, nil
}

func (o *scanOptions) run(cmd *cobra.Command, streams genericiooptions.IOStreams) error {
	p, err := o.plan(cmd, streams)
	if err != nil {
		return err
	}
	sources, rules, node, npa, failOn, output := p.sources, p.rules, p.node, p.npa, p.failOn, p.output
	res := audit.Run(cmd.Context(), audit.Config{
		NodeName: node,
		Sources:  sources,
		Rules:    rules,
	})
	if err := checkNodeForHostLocal(res, node); err != nil {
		return cmdline.WithCode(ExitError, err)
	}
	if err := checkNode(res, node, npa); err != nil {
		return cmdline.WithCode(ExitError, err)
	}
	wrongNode := res.WrongNode
	res.Report.Version = buildinfo.Read().Version
	if err := sink.Write(streams.Out, output, &res.Report, rules); err != nil {
		return cmdline.WithCode(ExitError, fmt.Errorf("writing the report: %w", err))
	}
	if err := res.Incomplete(); err != nil {
		return cmdline.WithCode(ExitError, fmt.Errorf("scan incomplete, no finding is claimed for what was not read: %w", err))
	}
	if wrongNode != nil {
		// The report stands for what it judged; NodePort flows were
		// judged against another node's frontends.
		return cmdline.WithCode(ExitError, wrongNode)
	}
	if len(res.Skipped) == len(rules) {
		return cmdline.WithCode(ExitError, fmt.Errorf("no rule could run: %s", res.Skipped[0].Reason))
	}
	if failOn != 0 && finding.AtLeast(res.Findings, failOn) {
		return cmdline.ErrFindings
	}
	return nil
}

// memberFlags names the flags given that read gossip members.
func (o *scanOptions) memberFlags() []string {
	var given []string
	for _, f := range []struct {
		name string
		n    int
	}{{"--gossip-members", len(o.gossipMembers)}, {"--consul", len(o.consulAddrs)}, {"--serf", len(o.serfAddrs)}} {
		if f.n > 0 {
			given = append(given, f.name)
		}
	}
	return given
}

// calicoSource reads Calico's IPAM ledger where the cluster objects come
// from: the --kube-objects files, objects (which the kube source reads
// too, and which it must follow), or the API server.
func (o *scanOptions) calicoSource(objects *kubectl.Files) (source.Source, error) {
	if objects != nil {
		return calico.NewFileSource(objects), nil
	}
	cfg, err := o.kubeFlags.ToRESTConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	src, err := calico.NewAPISource(cfg)
	if err != nil {
		return nil, err
	}
	src.Timeout = o.syncTimeout
	return src, nil
}

// stdinUses counts the inputs that read stdin ("-").
func stdinUses(kubeObjects []string, conntrackFile string) int {
	n := 0
	if conntrackFile == "-" {
		n++
	}
	for _, p := range kubeObjects {
		if p == "-" {
			n++
		}
	}
	return n
}

// checkNodeForHostLocal refuses a scan that read a host-local store for a
// node the cluster objects do not hold: no pod could be tied to the store,
// and every rule of it would silently find nothing.
func checkNodeForHostLocal(res *audit.Result, node string) error {
	s := res.Snapshot
	if s.Kube == nil || (s.HostLocal == nil && s.CalicoNode == nil) {
		return nil
	}
	if _, ok := kube.LookupNode(s.Kube, node); ok {
		return nil
	}
	if len(s.Kube.Nodes) == 0 && slices.ContainsFunc(s.Kube.Pods, func(p snapshot.Pod) bool { return p.Node == node }) {
		// No Node given: the pods bound to the node tie it to its files.
		return nil
	}
	return fmt.Errorf("node %q is not in the cluster objects, so no pod can be tied to its IPAM files: pass --node-name (the Node's name, not the hostname), and save nodes with the objects (%s)", node, saved.SaveCommand)
}

// checkNode refuses a scan whose conntrack table was judged for a node
// that is unknown while a Service has a NodePort: the node's addresses are
// the NodePort frontends, and without them every NodePort flow would
// silently be missed.
func checkNode(res *audit.Result, node string, npa []netip.Prefix) error {
	k := res.Snapshot.Kube
	if k == nil || res.Snapshot.Conntrack == nil || len(npa) > 0 || len(res.Snapshot.LocalAddresses) > 0 {
		// No table judged (none read, or the node is not the
		// cluster's), or its frontends known.
		return nil
	}
	if _, ok := kube.LookupNode(k, node); ok {
		return nil
	}
	nodePort := ""
	for _, s := range k.Services {
		for _, p := range s.Ports {
			if p.NodePort != 0 && nodePort == "" {
				nodePort = fmt.Sprintf("%s/%s has NodePort %d", s.Namespace, s.Name, p.NodePort)
			}
		}
	}
	if nodePort == "" {
		return nil
	}
	if len(k.Nodes) == 0 {
		return fmt.Errorf("the cluster objects hold no Node, so the NodePort frontends of node %q are unknown (%s): add nodes to what kubectl saves (%s), or pass --nodeport-addresses",
			node, nodePort, saved.SaveCommand)
	}
	var names []string
	for _, n := range k.Nodes {
		names = append(names, n.Name)
	}
	if len(names) > 8 {
		names = append(names[:8], "...")
	}
	return fmt.Errorf("node %q is not in the cluster (nodes: %s), so its NodePort frontends are unknown (%s): pass --node-name, or --nodeport-addresses to match NodePorts by CIDR",
		node, strings.Join(names, ", "), nodePort)
}

func resolveNodeName(flag string) string {
	if flag != "" {
		return flag
	}
	if n := os.Getenv("NODE_NAME"); n != "" {
		return n
	}
	h, err := os.Hostname()
	if err != nil {
		return ""
	}
	return h
}

func parsePrefixes(ss []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, s := range ss {
		p, err := netip.ParsePrefix(strings.TrimSpace(s))
		if err != nil {
			a, aerr := netip.ParseAddr(strings.TrimSpace(s))
			if aerr != nil {
				return nil, errors.New("not a CIDR: " + s)
			}
			p = netip.PrefixFrom(a, a.BitLen())
		}
		out = append(out, p.Masked())
	}
	return out, nil
}

// savedProxy is the Service proxy a bundle saved, as the proxy source
// read it on the node.
type savedProxy struct{ saved savedServiceProxy }

func (savedProxy) Name() string { return proxy.Name }

func (sp savedProxy) Collect(_ context.Context, s *snapshot.Snapshot) error {
	if sp.saved.Unsupported != "" {
		return source.Unsupported("%s", sp.saved.Unsupported)
	}
	p := *sp.saved.ServiceProxy
	s.ServiceProxy = &p
	return nil
}

// savedGossip is the gossip clusters' views a bundle saved, as the
// controller's last pass read them.
type savedGossip struct{ g snapshot.Gossip }

func (savedGossip) Name() string { return gossip.Name }

func (sg savedGossip) Collect(_ context.Context, s *snapshot.Snapshot) error {
	g := sg.g
	s.Gossip = &g
	return nil
}
