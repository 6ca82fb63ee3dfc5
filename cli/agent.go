package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
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

	"github.com/ghostwatch/ghostwatch/agent"
	"github.com/ghostwatch/ghostwatch/remedy"
	"github.com/ghostwatch/ghostwatch/rule"
	"github.com/ghostwatch/ghostwatch/source"
	"github.com/ghostwatch/ghostwatch/source/conntrack"
	"github.com/ghostwatch/ghostwatch/source/kube"
)

// remedies the agent knows, by the rule whose findings they act on.
var remedies = []string{rule.StaleNATFlowID}

type agentOptions struct {
	kubeFlags         *genericclioptions.ConfigFlags
	nodeName          string
	nodePortAddresses []string
	remedies          []string
	dryRun            bool
	grace             time.Duration
	budget            int
	budgetInterval    time.Duration
	auditInterval     time.Duration
	listen            string
	logFormat         string
	logLevel          string
	clockSkew         time.Duration
}

func newAgentCommand(streams genericiooptions.IOStreams) *cobra.Command {
	cmd, _ := agentCommand(streams)
	return cmd
}

// agentCommand builds the command and the options its flags fill.
func agentCommand(streams genericiooptions.IOStreams) (*cobra.Command, *agentOptions) {
	o := &agentOptions{kubeFlags: genericclioptions.NewConfigFlags(true)}
	o.kubeFlags.Namespace = nil
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Watch this node's conntrack table and, if asked to, remove stale NAT flows",
		Long: `agent runs on every node (as a DaemonSet) until it is stopped. It watches
Services, EndpointSlices, Pods and Nodes, audits this node's conntrack table on
every change and every --audit-interval, and exports what it finds on /metrics.

It only reports unless --remedy=stale-nat-flow is given. Then it deletes a
flow the kernel still translates to a backend that is gone, and only when:

  - the API server is reachable and every watch is current (otherwise the
    agent is degraded: /readyz fails, ghostwatch_degraded says why);
  - the flow has been stale in every audit for --grace;
  - a re-check against the cluster as it is right before the delete agrees;
  - the whole batch fits in the --budget: a larger batch is refused whole,
    with a Warning Event RemedyBudgetExceeded.

Every action, and every refusal, is an Event on the Service (and on the client
Pod when it is one) and a sample of ghostwatch_remedy_actions_total.

The agent needs CAP_NET_ADMIN in the node's network namespace (hostNetwork)
and nothing else; it exits with status 2 when it lacks it.`,
		Example: `  # report only (the default): metrics, logs, /readyz
  ghostwatch agent

  # see what it would delete, as Events, before letting it
  ghostwatch agent --remedy=stale-nat-flow --dry-run
  kubectl get events -A --field-selector reason=StaleFlowDeleteDryRun

  # delete stale flows after 30s, at most 100 a minute
  ghostwatch agent --remedy=stale-nat-flow --grace=30s --budget=100`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return o.run(cmd.Context(), streams) },
	}
	f := cmd.Flags()
	o.kubeFlags.AddFlags(f)
	f.StringVar(&o.nodeName, "node-name", "", "the Node this agent runs on (default $NODE_NAME, else the hostname)")
	f.StringSliceVar(&o.nodePortAddresses, "nodeport-addresses", nil, "CIDRs on which NodePorts are served, as kube-proxy's --nodeport-addresses (default: the node's addresses)")
	f.StringSliceVar(&o.remedies, "remedy", nil, "remedies to turn on: "+strings.Join(remedies, ", ")+" (default none: report only)")
	f.BoolVar(&o.dryRun, "dry-run", false, "with --remedy, say what would be deleted (Events and metrics) and delete nothing")
	f.DurationVar(&o.grace, "grace", 30*time.Second, "how long a flow must be stale in every audit before it is deleted")
	f.IntVar(&o.budget, "budget", 100, "at most this many deletions per --budget-interval; a larger batch is refused whole")
	f.DurationVar(&o.budgetInterval, "budget-interval", time.Minute, "the sliding window --budget applies to")
	f.DurationVar(&o.auditInterval, "audit-interval", 2*time.Minute, "period of the full audit of the conntrack table that catches what events missed")
	f.StringVar(&o.listen, "listen", ":9808", "address serving /metrics, /healthz and /readyz (empty: none)")
	f.StringVar(&o.logFormat, "log-format", "json", "log format: json or text")
	f.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	f.DurationVar(&o.clockSkew, "clock-skew", 2*time.Second, "how far the node clock may be ahead of the API server's when proving a flow predates a pod")
	return cmd, o
}

// validate checks the flags and builds the logger.
func (o *agentOptions) validate(streams genericiooptions.IOStreams) (*slog.Logger, error) {
	for _, r := range o.remedies {
		if !slices.Contains(remedies, r) {
			return nil, fmt.Errorf("--remedy %q: the remedies are %s", r, strings.Join(remedies, ", "))
		}
	}
	if o.dryRun && len(o.remedies) == 0 {
		return nil, errors.New("--dry-run needs --remedy: without a remedy the agent deletes nothing anyway")
	}
	switch {
	case o.grace < 0:
		return nil, fmt.Errorf("--grace %s: must not be negative", o.grace)
	case o.budget < 1:
		return nil, fmt.Errorf("--budget %d: must be at least 1 (turn the remedy off with no --remedy instead)", o.budget)
	case o.budgetInterval <= 0:
		return nil, fmt.Errorf("--budget-interval %s: must be positive", o.budgetInterval)
	case o.auditInterval < time.Second:
		return nil, fmt.Errorf("--audit-interval %s: must be at least 1s", o.auditInterval)
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(o.logLevel)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", o.logLevel)
	}
	hopts := &slog.HandlerOptions{Level: level}
	switch o.logFormat {
	case "json":
		return slog.New(slog.NewJSONHandler(streams.ErrOut, hopts)), nil
	case "text":
		return slog.New(slog.NewTextHandler(streams.ErrOut, hopts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want json or text", o.logFormat)
}

func (o *agentOptions) run(ctx context.Context, streams genericiooptions.IOStreams) error {
	log, err := o.validate(streams)
	if err != nil {
		return withCode(ExitError, err)
	}
	npa, err := parsePrefixes(o.nodePortAddresses)
	if err != nil {
		return withCode(ExitError, fmt.Errorf("--nodeport-addresses: %w", err))
	}
	if err := conntrack.CheckNetAdmin(); err != nil {
		return withCode(ExitError, fmt.Errorf("agent: %w", err))
	}
	conn, err := conntrack.Open()
	if err != nil {
		return withCode(ExitError, fmt.Errorf("agent: %w", err))
	}
	defer conn.Close()
	// Subscribe before the first dump, so that no flow falls between them.
	var events agent.FlowEvents
	if on, err := conntrack.EventsEnabled(); !on {
		log.Warn("conntrack events are off: every change reads the whole table", "err", err,
			"fix", "sysctl -w net.netfilter.nf_conntrack_events=1")
	} else if sub, err := conntrack.Subscribe(); err != nil {
		log.Warn("cannot follow conntrack events: every change reads the whole table", "err", err)
	} else {
		defer sub.Close()
		events = sub
	}
	client, server, err := kube.ClientFromFlags(o.kubeFlags)
	if err != nil {
		return withCode(ExitError, err)
	}
	node := resolveNodeName(o.nodeName)

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	defer broadcaster.Shutdown()

	cfg := agent.Config{
		NodeName:   node,
		Informers:  kube.NewInformers(client, 0),
		Conntrack:  func(keep conntrack.Keep) source.Source { return &conntrack.KernelSource{Keep: keep} },
		FlowEvents: events,
		Rules:      rule.Config{Conntrack: rule.ConntrackConfig{NodePortAddresses: npa, ClockSkew: o.clockSkew}},

		AuditInterval: o.auditInterval,
		Metrics:       agent.NewMetrics(reg),
		Events:        broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "ghostwatch-agent", Host: node}),
		Log:           log,
	}
	mode := "report only"
	if slices.Contains(o.remedies, rule.StaleNATFlowID) {
		cfg.Remedy = &remedy.StaleFlows{
			Grace:   o.grace,
			DryRun:  o.dryRun,
			Budget:  &remedy.Budget{Max: o.budget, Interval: o.budgetInterval},
			Deleter: conn,
		}
		mode = fmt.Sprintf("remedy %s (grace %s, budget %d per %s)", rule.StaleNATFlowID, o.grace, o.budget, o.budgetInterval)
		if o.dryRun {
			mode += ", dry run"
		}
	}
	a := agent.New(cfg)

	var srv *http.Server
	if o.listen != "" {
		ln, err := net.Listen("tcp", o.listen)
		if err != nil {
			return withCode(ExitError, fmt.Errorf("--listen: %w", err))
		}
		srv = &http.Server{Handler: a.Handler(reg), ReadHeaderTimeout: 10 * time.Second}
		go func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("metrics server stopped", "err", err)
			}
		}()
		log.Info("serving /metrics, /healthz and /readyz", "address", ln.Addr().String())
	}
	log.Info("agent starting", "node", node, "apiServer", server, "mode", mode, "auditInterval", o.auditInterval,
		"conntrackEvents", events != nil)
	runErr := a.Run(ctx)
	log.Info("agent stopping", "reason", context.Cause(ctx))
	if srv != nil {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}
	if runErr != nil {
		return withCode(ExitError, runErr)
	}
	return nil
}
