package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/ghostwatch/ghostwatch/agent"
	"github.com/ghostwatch/ghostwatch/internal/cmdline"
	"github.com/ghostwatch/ghostwatch/internal/kubeauth"
	"github.com/ghostwatch/ghostwatch/remedy"
	"github.com/ghostwatch/ghostwatch/rule"
	"github.com/ghostwatch/ghostwatch/sink"
	"github.com/ghostwatch/ghostwatch/source"
	"github.com/ghostwatch/ghostwatch/source/caliconode"
	"github.com/ghostwatch/ghostwatch/source/conntrack"
	"github.com/ghostwatch/ghostwatch/source/host"
	"github.com/ghostwatch/ghostwatch/source/hostlocal"
	"github.com/ghostwatch/ghostwatch/source/kube"
	"github.com/ghostwatch/ghostwatch/source/kube/live"
	"github.com/ghostwatch/ghostwatch/source/proxy"
)

// agentRules are the rules the agent runs: the registry's node rules.
// nodePortHost is the source of this host's addresses, kube-proxy's
// default NodePort frontends, re-read at every audit; nil when
// --nodeport-addresses names them.
func nodePortHost(npa []netip.Prefix) source.Source {
	if len(npa) > 0 {
		return nil
	}
	return &host.Addresses{}
}

func agentRules(cfg rule.Config) []rule.Rule { return rule.InScope(rule.All(cfg), rule.ScopeNode) }

// ruleList lists rules with their summaries, for help texts.
func ruleList(rules []rule.Rule) string {
	var b strings.Builder
	for _, r := range rules {
		info := r.Info()
		b.WriteString("  " + info.ID + "\n")
		b.WriteString(wrap(info.Summary, "      ", 80))
	}
	return b.String()
}

// remedyList lists the rules' remedies with what they do, for help texts.
func remedyList(rules []rule.Rule) string {
	var b strings.Builder
	for _, r := range rules {
		if rem := r.Info().Remedy; rem != nil {
			b.WriteString("  --remedy=" + rem.ID + "\n")
			b.WriteString(wrap(rem.Action+" (findings of "+r.Info().ID+")", "      ", 80))
		}
	}
	return b.String()
}

// wrap breaks text into lines of at most width columns, each starting with
// indent.
func wrap(text, indent string, width int) string {
	var b strings.Builder
	line := indent
	for _, w := range strings.Fields(text) {
		if len(line) > len(indent) && len(line)+1+len(w) > width {
			b.WriteString(line + "\n")
			line = indent
		}
		if len(line) > len(indent) {
			line += " "
		}
		line += w
	}
	if len(line) > len(indent) {
		b.WriteString(line + "\n")
	}
	return b.String()
}

type agentOptions struct {
	kubeFlags         *genericclioptions.ConfigFlags
	nodeName          string
	nodePortAddresses []string
	serviceCIDRs      []string
	remedies          []string
	dryRun            bool
	resetClients      bool
	grace             time.Duration
	budget            int
	budgetInterval    time.Duration
	maxPerBackend     int
	auditInterval     time.Duration
	listen            string
	addressListen     string
	logFormat         string
	logLevel          string
	clockSkew         time.Duration
	hostRoot          string
	kubeProxyMetrics  string
}

func newAgentCommand(streams genericiooptions.IOStreams) *cobra.Command {
	cmd, _ := agentCommand(streams)
	return cmd
}

// agentCommand builds the command and the options its flags fill.
func agentCommand(streams genericiooptions.IOStreams) (*cobra.Command, *agentOptions) {
	o := &agentOptions{kubeFlags: genericclioptions.NewConfigFlags(true)}
	o.kubeFlags.Namespace = nil
	rules := agentRules(rule.Config{})
	ids := rule.RemedyIDs(rules)
	example := ""
	if len(ids) > 0 {
		r, _ := rule.ByRemedy(rules, ids[0])
		rem := r.Info().Remedy
		example = fmt.Sprintf(`

  # see what it would do, as Events, before letting it
  ghostwatch agent --remedy=%[1]s --dry-run
  kubectl get events -A --field-selector reason=%[2]s

  # act after the grace period, on at most 20 ghost IPs a minute
  ghostwatch agent --remedy=%[1]s --budget=20`, rem.ID, rem.Events.DryRun)
	}
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Watch this node's ledgers and, if asked to, remove the ghosts found in them",
		Long: `agent runs on every node (as a DaemonSet) until it is stopped. It asks the API
server for what kube-proxy asks (Services, EndpointSlices, ServiceCIDRs and its
own Node) and for the Pods of its own node; a pod elsewhere is looked up by its
address only when a flow's backend is suspect, and that answer is kept for
` + live.DefaultHolderTTL.String() + ` to ` + live.DefaultMaxHolderTTL.String() + `. It audits this node's conntrack table on every change and every
--audit-interval, and exports what it finds on /metrics. The rules it runs:

` + ruleList(rules) + `
It only reports unless --remedy names a remedy:

` + remedyList(rules) + `
A remedy acts on a finding only when:

  - the API server is reachable and every watch is current (otherwise the
    agent is degraded: /readyz fails, ghostwatch_degraded says why, and
    every grace period starts over);
  - the finding has held in every complete audit for --grace;
  - right before acting, a quorum read of the API server and the node's own
    ledger (the conntrack entry, read back by its tuple) still agree;
  - the ghost IPs due fit in the --budget: a larger batch is refused whole,
    with a Warning Event RemedyBudgetExceeded.

Every action, and every refusal, is an Event on the objects the finding
concerns (the Service; the client Pod only when it provably opened the flow)
and a sample of ghostwatch_remedy_actions_total.

Once a TCP flow a client addressed to this node (a NodePort) is deleted, its
client's connection is reset at once rather than at its next retransmission,
seconds later (--reset-clients).

The agent needs CAP_NET_ADMIN in the node's network namespace (hostNetwork)
and nothing else; it exits with status 2 when it lacks it.`,
		Example: `  # report only (the default): metrics, logs, /readyz
  ghostwatch agent` + example,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return o.run(cmd.Context(), streams) },
	}
	f := cmd.Flags()
	o.kubeFlags.AddFlags(f)
	f.StringVar(&o.nodeName, "node-name", "", "the Node this agent runs on (default $NODE_NAME, else the hostname)")
	f.StringSliceVar(&o.serviceCIDRs, "service-cidr", nil, "the cluster's service IP ranges (kube-apiserver's --service-cluster-ip-range), in addition to its ServiceCIDR objects: a flow to an address in one that no Service holds was opened to a deleted Service. Needed only before Kubernetes 1.33, which serves no ServiceCIDR")
	f.StringSliceVar(&o.nodePortAddresses, "nodeport-addresses", nil, "CIDRs on which NodePorts are served, as kube-proxy's --nodeport-addresses (default: the Node's addresses and, read live, every address of this host, as kube-proxy's default)")
	f.StringSliceVar(&o.remedies, "remedy", nil, "remedies to turn on: "+strings.Join(ids, ", ")+" (default none: report only)")
	f.BoolVar(&o.dryRun, "dry-run", false, "with --remedy, say what would be done (Events and metrics) and do nothing")
	f.BoolVar(&o.resetClients, "reset-clients", true, "with --remedy="+rule.StaleNATFlowID+", reset the client of each TCP flow deleted that it addressed to this node (a NodePort) at once, not at its next retransmission: a SYN from that address, which the client acknowledges and this node resets (docs/agent.md)")
	f.DurationVar(&o.grace, "grace", remedy.DefaultGrace, fmt.Sprintf("how long a finding must hold in every complete audit before a remedy acts on it (at least %s)", remedy.MinGrace))
	f.IntVar(&o.budget, "budget", remedy.DefaultBudget, "at most this many ghost IPs acted on per --budget-interval (all flows of one dead backend count once); a larger batch is refused whole")
	f.DurationVar(&o.budgetInterval, "budget-interval", remedy.DefaultBudgetInterval, "the sliding window --budget applies to")
	f.IntVar(&o.maxPerBackend, "max-flows-per-backend", remedy.DefaultMaxPerGroup, "refuse a ghost IP with more flows due than this: a sanity bound on one node's connections to one backend")
	f.DurationVar(&o.auditInterval, "audit-interval", 2*time.Minute, "period of the full audit of the conntrack table that catches what events missed")
	f.StringVar(&o.listen, "listen", fmt.Sprintf(":%d", AgentPort), "address serving /metrics, /healthz and /readyz (empty: none)")
	f.StringVar(&o.addressListen, "address-listen", fmt.Sprintf("127.0.0.1:%d", AgentAddressPort), "address serving what this node's conntrack table holds for one address, read afresh, to `ghostwatch ip`; keep it on the loopback. Only a caller the cluster authorizes is answered: a bearer token bound to audience "+kubeauth.Audience+" (TokenReview) of an identity allowed to get nodes/flows in group "+kubeauth.Group+" (SubjectAccessReview), at most "+strconv.Itoa(kubeauth.DefaultMaxInFlight)+" requests at once (empty: none)")
	f.StringVar(&o.logFormat, "log-format", "json", "log format: json or text")
	f.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	f.DurationVar(&o.clockSkew, "clock-skew", 2*time.Second, "how far the node clock may be ahead of the API server's when proving a flow predates a pod")
	f.StringVar(&o.kubeProxyMetrics, "kube-proxy-metrics-address", proxy.DefaultKubeProxy, "where kube-proxy serves its metrics on this node (its --metrics-bind-address): its /proxyMode says how Services are translated. An eBPF load balancer (Cilium's kube-proxy replacement) translates outside conntrack: the flow rules are then not judged here, and /readyz and the proxy source say so")
	f.StringVar(&o.hostRoot, "host-root", "/host", "where the node's files are mounted: host-local's store, the CNI configurations and Calico's nodename file are read under it ("+hostlocal.DefaultDataDir+", "+hostlocal.ConfDir+", "+caliconode.DefaultNodename+"); deploy/agent mounts those read-only. A store that cannot be read leaves its rules out, not the conntrack audits")
	return cmd, o
}

// validate checks the flags and builds the logger.
func (o *agentOptions) validate(streams genericiooptions.IOStreams) (*slog.Logger, error) {
	ids := rule.RemedyIDs(agentRules(rule.Config{}))
	for _, r := range o.remedies {
		if !slices.Contains(ids, r) {
			return nil, fmt.Errorf("--remedy %q: the remedies are %s", r, strings.Join(ids, ", "))
		}
	}
	if o.dryRun && len(o.remedies) == 0 {
		return nil, errors.New("--dry-run needs --remedy: without a remedy the agent deletes nothing anyway")
	}
	switch {
	case o.grace < remedy.MinGrace:
		return nil, fmt.Errorf("--grace %s: must be at least %s, so that the API server's view has settled (see docs/agent.md)", o.grace, remedy.MinGrace)
	case o.maxPerBackend < 1:
		return nil, fmt.Errorf("--max-flows-per-backend %d: must be at least 1", o.maxPerBackend)
	case o.budget < 1:
		return nil, fmt.Errorf("--budget %d: must be at least 1 (turn the remedy off with no --remedy instead)", o.budget)
	case o.budgetInterval <= 0:
		return nil, fmt.Errorf("--budget-interval %s: must be positive", o.budgetInterval)
	case o.auditInterval < time.Second:
		return nil, fmt.Errorf("--audit-interval %s: must be at least 1s", o.auditInterval)
	}
	return newLogger(streams.ErrOut, o.logFormat, o.logLevel)
}

// serveHTTP serves handler on listen (nothing when it is empty) until the
// returned function stops it, waiting up to 5 seconds for requests under
// way.
func serveHTTP(listen string, handler http.Handler, log *slog.Logger) (stop func(), err error) {
	if listen == "" {
		return func() {}, nil
	}
	ln, err := net.Listen("tcp", listen)
	if err != nil {
		return nil, fmt.Errorf("--listen: %w", err)
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server stopped", "err", err)
		}
	}()
	log.Info("serving /metrics, /healthz and /readyz", "address", ln.Addr().String())
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
	}, nil
}

// newLogger builds the structured logger of long-running commands. A
// duration reads as one ("30s"), not as a count of nanoseconds.
func newLogger(w io.Writer, format, levelName string) (*slog.Logger, error) {
	var level slog.Level
	if err := level.UnmarshalText([]byte(levelName)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", levelName)
	}
	hopts := &slog.HandlerOptions{Level: level, ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Value.Kind() == slog.KindDuration {
			a.Value = slog.StringValue(a.Value.Duration().String())
		}
		return a
	}}
	switch format {
	case "json":
		return slog.New(slog.NewJSONHandler(w, hopts)), nil
	case "text":
		return slog.New(slog.NewTextHandler(w, hopts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want json or text", format)
}

func (o *agentOptions) run(ctx context.Context, streams genericiooptions.IOStreams) error {
	log, err := o.validate(streams)
	if err != nil {
		return cmdline.WithCode(ExitError, err)
	}
	// client-go logs through klog: its lines come out in the same format.
	klog.SetSlogLogger(log)
	// The DaemonSet's memory limit is where the kernel kills the agent:
	// the garbage collector works harder before it gets there.
	if soft, err := setMemoryLimit("/sys/fs/cgroup"); err != nil {
		log.Warn("cannot read the container's memory limit: the Go runtime runs without a soft limit", "err", err)
	} else if soft > 0 {
		log.Info("soft memory limit set from the container's", "bytes", soft, "share", memLimitShare)
	}
	npa, err := parsePrefixes(o.nodePortAddresses)
	if err != nil {
		return cmdline.WithCode(ExitError, fmt.Errorf("--nodeport-addresses: %w", err))
	}
	scidrs, err := parsePrefixes(o.serviceCIDRs)
	if err != nil {
		return cmdline.WithCode(ExitError, fmt.Errorf("--service-cidr: %w", err))
	}
	if err := conntrack.CheckNetAdmin(); err != nil {
		return cmdline.WithCode(ExitError, fmt.Errorf("agent: %w", err))
	}
	conn, err := conntrack.Open()
	if err != nil {
		return cmdline.WithCode(ExitError, fmt.Errorf("agent: %w", err))
	}
	defer conn.Close()
	// Subscribe before the first dump, so that no flow falls between them.
	var events conntrack.EventStream
	if on, err := conntrack.EventsEnabled(); !on {
		log.Warn("conntrack events are off: every change reads the whole table", "err", err,
			"fix", "sysctl -w net.netfilter.nf_conntrack_events=1")
	} else if sub, err := conntrack.Subscribe(); err != nil {
		log.Warn("cannot follow conntrack events: every change reads the whole table", "err", err)
	} else {
		defer sub.Close()
		events = sub
	}
	kcfg, err := kube.ConfigFromFlags(o.kubeFlags)
	if err != nil {
		return cmdline.WithCode(ExitError, err)
	}
	client, server, err := kube.ClientForConfig(kcfg)
	if err != nil {
		return cmdline.WithCode(ExitError, err)
	}
	// The look-ups of suspect backends' pods have a client of their own:
	// its rate limit is not the informers'.
	lookups, err := live.LookupClient(kcfg)
	if err != nil {
		return cmdline.WithCode(ExitError, err)
	}
	node := resolveNodeName(o.nodeName)

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	defer broadcaster.Shutdown()

	// Ghost backends beyond the budget are not acted on one by one: they
	// may be reported together (rule.ConntrackConfig.OneByOne).
	rules := agentRules(rule.Config{Conntrack: rule.ConntrackConfig{NodePortAddresses: npa, ServiceCIDRs: scidrs, ClockSkew: o.clockSkew,
		OneByOne: max(rule.DefaultOneByOne, o.budget)}})
	// The sources every audit reads, in order: the cluster as kube-proxy
	// sees it, the host's addresses (NodePort frontends), the table.
	table := &conntrack.Watch{Table: conn, Events: events, Metrics: conntrack.NewMetrics(reg, sink.Namespace), Log: log}
	sources := []source.Source{&live.Watch{
		Informers: live.NewInformers(client, live.InformerOptions{Node: node}),
		Holders:   &live.Holders{Client: lookups, Metrics: live.NewHolderMetrics(reg, sink.Namespace)},
		Client:    client,
	}}
	if h := nodePortHost(npa); h != nil {
		sources = append(sources, h)
	}
	sources = append(sources, table)
	rems, err := remedy.Build(rules, o.remedies, remedy.Settings{
		Grace: o.grace, DryRun: o.dryRun, Budget: o.budget, BudgetInterval: o.budgetInterval, MaxPerGroup: o.maxPerBackend,
	}, flowRemedy(table, o.resetClients), &remedy.Reservations{Root: o.hostRoot})
	if err != nil {
		return cmdline.WithCode(ExitError, fmt.Errorf("--remedy: %w", err))
	}
	cfg := agent.Config{
		NodeName: node,
		Sources:  sources,
		Ledgers:  []source.Source{&hostlocal.Watch{Source: hostlocal.Source{Root: o.hostRoot}, Log: log}, &caliconode.Source{Root: o.hostRoot}, &proxy.Source{KubeProxy: o.kubeProxyMetrics, Log: log}},
		Rules:    rules,
		Remedies: rems,

		AuditInterval: o.auditInterval,
		Metrics:       agent.NewMetrics(reg, rules),
		Events:        broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "ghostwatch-agent", Host: node}),
		Log:           log,
	}
	mode := "report only"
	if len(rems) > 0 {
		mode = fmt.Sprintf("remedies %s (grace %s, budget %d ghost IPs per %s, at most %d flows per ghost IP)",
			strings.Join(o.remedies, ", "), o.grace, o.budget, o.budgetInterval, o.maxPerBackend)
		if o.dryRun {
			mode += ", dry run"
		}
	}
	a := agent.New(cfg)

	stopServing, err := serveHTTP(o.listen, a.Handler(reg), log)
	if err != nil {
		return cmdline.WithCode(ExitError, err)
	}
	if o.addressListen != "" {
		// Any local user reaches a loopback port of the node: only callers
		// the cluster authorizes are answered, a few at a time.
		guard := &kubeauth.Guard{Client: client, Node: node, Log: log}
		mux := http.NewServeMux()
		mux.Handle(conntrack.AddressPath, guard.Protect(kubeauth.Flows, conntrack.AddressHandler(node, func() (conntrack.Table, func(), error) {
			// A connection of its own: the agent's is busy with its dumps.
			c, err := conntrack.Open()
			if err != nil {
				return nil, nil, err
			}
			return c, func() { c.Close() }, nil
		}, time.Now)))
		mux.Handle(sink.FindingsPath, guard.Protect(kubeauth.Findings, sink.FindingsHandler(a.At)))
		mux.Handle(hostlocal.AddressPath, guard.Protect(kubeauth.HostLocal, hostlocal.AddressHandler(node, o.hostRoot)))
		stopAddress, err := serveHTTP(o.addressListen, mux, log)
		if err != nil {
			stopServing()
			return cmdline.WithCode(ExitError, fmt.Errorf("--address-listen: %w", err))
		}
		defer stopAddress()
	}
	log.Info("agent starting", "node", node, "apiServer", server, "mode", mode, "auditInterval", o.auditInterval,
		"conntrackEvents", events != nil)
	runErr := a.Run(ctx)
	log.Info("agent stopping", "reason", context.Cause(ctx))
	stopServing()
	if runErr != nil {
		return cmdline.WithCode(ExitError, runErr)
	}
	return nil
}

// flowRemedy deletes flows from table and, with reset, nudges the clients
// of those deleted (remedy.SYNNudge).
func flowRemedy(table remedy.FlowTable, reset bool) *remedy.Flows {
	fl := &remedy.Flows{Table: table}
	if reset {
		fl.Nudge = &remedy.SYNNudge{}
	}
	return fl
}
