package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/ghostwatch/ghostwatch/controller"
	"github.com/ghostwatch/ghostwatch/finding"
	"github.com/ghostwatch/ghostwatch/internal/cmdline"
	"github.com/ghostwatch/ghostwatch/remedy"
	"github.com/ghostwatch/ghostwatch/rule"
	"github.com/ghostwatch/ghostwatch/sink"
	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source"
	"github.com/ghostwatch/ghostwatch/source/calico"
	"github.com/ghostwatch/ghostwatch/source/gossip"
	"github.com/ghostwatch/ghostwatch/source/kube"
	"github.com/ghostwatch/ghostwatch/source/kube/history"
	"github.com/ghostwatch/ghostwatch/source/kube/live"
	"github.com/ghostwatch/ghostwatch/source/skew"
)

type controllerOptions struct {
	kubeFlags      *genericclioptions.ConfigFlags
	identity       string
	leaseNamespace string
	leaseName      string
	listen         string
	historyListen  string
	historyEnded   int
	logFormat      string
	logLevel       string
	gossipInterval time.Duration
	gossipClusters string
	remedies       []string
	dryRun         bool
	grace          time.Duration
	budget         int
	budgetInterval time.Duration
}

// defaultControllerGrace is how long a gossip ghost must hold before the
// controller forces it out: two reads of its cluster's member list, at
// the default interval, agree on it.
const defaultControllerGrace = 2 * gossip.DefaultInterval

func newControllerCommand(streams genericiooptions.IOStreams) *cobra.Command {
	o := &controllerOptions{kubeFlags: genericclioptions.NewConfigFlags(true)}
	o.kubeFlags.Namespace = nil
	rules, others := ControllerRules(rule.All(rule.Config{}))
	cmd := &cobra.Command{
		Use:   "controller",
		Short: "Watch the whole cluster (one leader of a Deployment) and report its ghosts continuously",
		Long: `controller is ghostwatch's cluster-wide watcher, run as a Deployment
(deploy/controller). Its replicas elect a leader on a Lease; the leader lists
and watches

` + watchedList() + `
and runs the cluster rules after each burst of changes, on what it holds:

` + controllerRuleList(rules) + othersList(others) + `
A rule whose ledger the cluster does not have (no Calico) is not applicable,
and the log says so once. A rule a source of which is not ready (not listed
yet, a list or watch failing, a watch silent too long) is skipped, and what it
found when it last ran stands until the source is back;
ghostwatch_source_up{source} says which source is not.

Findings are exported as metrics (:` + strconv.Itoa(ControllerPort) + `/metrics), logged, and reported as a
Warning Event (Normal for info findings) on every object they concern when
they first appear. The node agents never watch every Pod for these rules: the
controller is the one watcher. Unless a remedy is turned on, it is
read-only: it writes its Lease and Events, nothing else. Its ClusterRole grants list and watch on the resources
above and create and patch on Events; its Role get, create and update on its
Lease, in its namespace. Discovery needs no grant.

Gossip clusters (Consul, Serf, and memberlist applications using the
ghostwatch/gossip package) are read only when the operator declares them, in
the file --gossip-clusters names, with the credential each is read with:

  clusters:
  - system: consul              # consul | serf | memberlist
    namespace: shop             # only pods of this namespace speak for it
    name: consul                # the pods' ghostwatch.io/gossip-cluster (default: the system)
    scheme: https               # over the pods' ghostwatch.io/gossip-scheme
    tokenSecret: {name: ghostwatch-consul, key: token}   # a Secret of the namespace
    # tokenFile: /etc/ghostwatch/gossip/shop/token       # or a mounted one
    caFile: /etc/ghostwatch/gossip/shop/ca.pem
    tlsServerName: server.dc1.consul
    # allowPlaintextCredentials: true   # Consul over http, or Serf (no TLS)

A credential is sent to the pod asked and nowhere else: never over plain HTTP
(nor Serf's RPC) unless its cluster allows it, never after a redirect. A pod
annotated as a member of a cluster not declared is asked nothing; the gossip
source names such clusters once. The environment's CONSUL_HTTP_TOKEN and
SERF_RPC_AUTH are not read. Within the declared namespaces, the pods name
their agents with annotations:

  ghostwatch.io/gossip: consul | serf | memberlist
  ghostwatch.io/gossip-port: the agent's HTTP API (consul, 8500 by default),
      RPC (serf, 7373 by default) or member list server (memberlist)
  ghostwatch.io/gossip-cluster: the cluster's name among the pods of one
      namespace and system (default: the system's name)
  ghostwatch.io/gossip-scheme: http (default) or https

Every --gossip-interval, and about a second after an annotated pod goes, the
leader reads one member's view of each cluster, the oldest running pod's
first. The answer must come from the pod asked (the agent's own member is at
the pod's address), and the pod must hold its address alone, hostNetwork pods
counted: checked before the credential is read and sent, again once the
answer is in, and again right before a force-leave is sent. A pod whose
address another pod reports (a duplicate-pod-ip, or a hostNetwork pod at its
node's address) is sent nothing. A cluster that cannot be read is judged on its
last view (ghostwatch_gossip_cluster_up is 0, the log names the pod and the
error, and nothing is forced out of it); when none can be read, the gossip
source is not ready.

It only reports unless --remedy names a remedy:

` + remedyList(controllerRemedies(rules)) + `
A remedy acts on a finding only when it has held in every pass for --grace,
the ghost IPs due fit in the --budget, and right before acting a quorum read of
the pods at the ghost's address and a new read of its cluster's member list
still show the member gone and every pod at its address another identity.
Every action and refusal is an Event on the pods the finding concerns and a
sample of ghostwatch_remedy_actions_total.

A replica stays up whatever the API server does. One that cannot reach it
(at start, or after it lost the Lease) is not ready (/readyz says why) and
tries again, up to every 30s; one that loses the Lease while leading (an API
server that stopped answering, a partition) stops watching, forgets every
grace period, and campaigns again once the server answers. Every replica asks
the API server whether it answers every 5s: a hung server keeps connections
open and fails nothing, so only asking tells. /readyz is ready on a standby
replica while the API server answers, and on the leader once it has listed
every Pod and Node and while its last pass could trust them (not when a watch
fails, or the API server has not answered for 10s).`,
		Example: `  # in the cluster: kubectl apply -k deploy/namespace && kubectl apply -k deploy/controller
  ghostwatch controller --kubeconfig ~/.kube/config --lease-namespace default --log-format text

  # see which gossip ghosts it would force out, as Events, before letting it
  ghostwatch controller --remedy=gossip-force-leave --dry-run
  kubectl get events -A --field-selector reason=GossipForceLeaveDryRun`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return o.run(cmd.Context(), streams, rules) },
	}
	f := cmd.Flags()
	o.kubeFlags.AddFlags(f)
	f.StringVar(&o.identity, "identity", "", "this replica's name in the Lease (default $POD_NAME, else the hostname)")
	f.StringVar(&o.leaseNamespace, "lease-namespace", "", "the namespace of the Lease the replicas elect a leader on (default $POD_NAMESPACE, else ghostwatch)")
	f.StringVar(&o.leaseName, "lease-name", "ghostwatch-controller", "the Lease's name")
	f.StringVar(&o.listen, "listen", fmt.Sprintf(":%d", ControllerPort), "address serving /metrics, /healthz and /readyz (empty: none)")
	f.StringVar(&o.historyListen, "history-listen", fmt.Sprintf("127.0.0.1:%d", HistoryPort), "address serving the address history (who held each pod IP, and when) to `ghostwatch ip`; keep it on the loopback, where only a port-forward the API server authorizes reaches it (empty: none, and no history kept)")
	f.IntVar(&o.historyEnded, "history-ended", history.DefaultEnded, "at most this many ended tenures kept in the address history, those that ended first forgotten first (a pod that holds its address is always kept)")
	f.StringVar(&o.logFormat, "log-format", "json", "log format: json or text")
	f.StringVar(&o.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	f.DurationVar(&o.gossipInterval, "gossip-interval", gossip.DefaultInterval, "how often the leader reads the member list of each gossip cluster (one request per cluster)")
	f.StringVar(&o.gossipClusters, "gossip-clusters", "", "a YAML `FILE` declaring the gossip clusters to read and their credentials (see above; default none: no gossip cluster is read)")
	ids := rule.RemedyIDs(controllerRemedies(rules))
	f.StringSliceVar(&o.remedies, "remedy", nil, "remedies to turn on: "+strings.Join(ids, ", ")+" (default none: report only)")
	f.BoolVar(&o.dryRun, "dry-run", false, "with --remedy, say what would be done (Events and metrics) and do nothing")
	f.DurationVar(&o.grace, "grace", defaultControllerGrace, "how long a finding must hold in every pass before a remedy acts on it")
	f.IntVar(&o.budget, "budget", 5, "at most this many ghost IPs acted on per --budget-interval, by all replicas together (kept on the Lease <lease-name>-budget, so a failover or restart does not reset it); a larger batch is refused whole")
	f.DurationVar(&o.budgetInterval, "budget-interval", 10*time.Minute, "the sliding window --budget applies to")
	return cmd
}

// validate checks the remedy flags.
func (o *controllerOptions) validate(rules []rule.Rule) error {
	ids := rule.RemedyIDs(controllerRemedies(rules))
	for _, r := range o.remedies {
		if !slices.Contains(ids, r) {
			return fmt.Errorf("--remedy %q: the controller's remedies are %s", r, strings.Join(ids, ", "))
		}
	}
	switch {
	case o.dryRun && len(o.remedies) == 0:
		return errors.New("--dry-run needs --remedy: without a remedy the controller acts on nothing anyway")
	case o.grace < o.gossipInterval:
		return fmt.Errorf("--grace %s: must be at least --gossip-interval (%s), so that two reads of a member list agree before acting", o.grace, o.gossipInterval)
	case o.gossipInterval < time.Second:
		return fmt.Errorf("--gossip-interval %s: must be at least 1s", o.gossipInterval)
	case o.budget < 1:
		return fmt.Errorf("--budget %d: must be at least 1 (turn the remedy off with no --remedy instead)", o.budget)
	case o.budget > controller.MaxBudget:
		return fmt.Errorf("--budget %d: at most %d (the cluster-wide budget's spending is kept on a Lease)", o.budget, controller.MaxBudget)
	case o.budgetInterval <= 0:
		return fmt.Errorf("--budget-interval %s: must be positive", o.budgetInterval)
	case o.historyEnded < 1:
		return fmt.Errorf("--history-ended %d: must be at least 1", o.historyEnded)
	}
	return nil
}

func (o *controllerOptions) run(ctx context.Context, streams genericiooptions.IOStreams, rules []rule.Rule) error {
	if err := o.validate(rules); err != nil {
		return cmdline.WithCode(ExitError, err)
	}
	log, err := newLogger(streams.ErrOut, o.logFormat, o.logLevel)
	if err != nil {
		return cmdline.WithCode(ExitError, err)
	}
	klog.SetSlogLogger(log)
	identity := firstOf(o.identity, os.Getenv("POD_NAME"))
	if identity == "" {
		if identity, err = os.Hostname(); err != nil {
			return cmdline.WithCode(ExitError, fmt.Errorf("--identity: none given and no hostname: %w", err))
		}
	}
	ns := firstOf(o.leaseNamespace, os.Getenv("POD_NAMESPACE"), "ghostwatch")
	restConfig, err := kube.ConfigFromFlags(o.kubeFlags)
	if err != nil {
		return cmdline.WithCode(ExitError, err)
	}
	// The API server's clock, measured from every answer: a proof that
	// compares an object's time with ours allows for it.
	apiClock := &skew.Meter{Name: "the API server's"}
	apiClock.WrapConfig(restConfig)
	client, server, err := kube.ClientForConfig(restConfig)
	if err != nil {
		return cmdline.WithCode(ExitError, err)
	}
	restConfig = rest.CopyConfig(restConfig)
	restConfig.UserAgent = "ghostwatch"
	dyn, err := dynamic.NewForConfig(restConfig)
	if err != nil {
		return cmdline.WithCode(ExitError, fmt.Errorf("API server %s: %w", server, err))
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	defer broadcaster.Shutdown()
	var decls *gossip.Declarations
	if o.gossipClusters != "" {
		if decls, err = gossip.ReadDeclarations(o.gossipClusters); err != nil {
			return cmdline.WithCode(ExitError, fmt.Errorf("--gossip-clusters: %w", err))
		}
	}
	sources, clusters := controllerSources(client, dyn, apiClock.Clock, o.gossipInterval, decls, log)
	var rems []*remedy.Remedy
	if len(o.remedies) > 0 {
		st := remedy.Settings{Grace: o.grace, DryRun: o.dryRun, Budget: o.budget, BudgetInterval: o.budgetInterval,
			// Kept where every replica reads it: a failover or restart
			// does not hand out a fresh budget.
			BudgetStore: &controller.LeaseBudget{Client: client, Namespace: ns, Name: o.leaseName + "-budget", APIClock: apiClock.Clock}}
		if rems, err = remedy.Build(rules, o.remedies, st, &remedy.Members{Clusters: clusters}); err != nil {
			return cmdline.WithCode(ExitError, err)
		}
	}
	c := controller.New(controller.Config{
		Client: client, Identity: identity, LeaseNamespace: ns, LeaseName: o.leaseName,
		Sources: sources, Rules: rules, Remedies: rems, Metrics: controller.NewMetrics(reg, rules),
		Events: broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "ghostwatch-controller"}),
		Log:    log,
	})
	stopServing, err := serveHTTP(o.listen, c.Handler(reg), log)
	if err != nil {
		return cmdline.WithCode(ExitError, err)
	}
	defer stopServing()
	// Every replica keeps the address history, leading or not: a leader
	// change loses nothing of it.
	if o.historyListen != "" {
		hist := &history.Watch{Client: client, Limits: history.Limits{Ended: o.historyEnded}}
		if err := hist.Start(ctx); err != nil {
			return cmdline.WithCode(ExitError, err)
		}
		mux := http.NewServeMux()
		mux.Handle(history.Path, history.Handler(hist, identity))
		mux.Handle(sink.FindingsPath, sink.FindingsHandler(c.At))
		mux.Handle(history.AllPath, history.AllHandler(hist, identity))
		mux.HandleFunc(GossipViewsPath, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(gossipViews{Replica: identity, Leading: c.Status().Leading, Gossip: c.Gossip()})
		})
		stopHistory, err := serveHTTP(o.historyListen, mux, log)
		if err != nil {
			return cmdline.WithCode(ExitError, fmt.Errorf("--history-listen: %w", err))
		}
		defer stopHistory()
	}
	log.Info("controller starting", "identity", identity, "lease", ns+"/"+o.leaseName, "apiServer", server, "rules", rule.IDs(rules), "remedies", o.remedies, "dryRun", o.dryRun)
	runErr := c.Run(ctx)
	log.Info("controller stopping", "reason", context.Cause(ctx), "err", runErr)
	if runErr != nil {
		return cmdline.WithCode(ExitError, fmt.Errorf("controller: %w", runErr))
	}
	return nil
}

// GossipViewsPath is where a controller replica serves, on its loopback,
// the gossip clusters' views its last pass read (gossipViews).
const GossipViewsPath = "/v1/gossip"

// gossipViews is what a replica serves at GossipViewsPath: while it leads,
// the views of its last pass; nothing while it stands by.
type gossipViews struct {
	Replica string           `json:"replica"`
	Leading bool             `json:"leading"`
	Gossip  *snapshot.Gossip `json:"gossip,omitempty"`
}

// controllerSources are the sources the leader reads, in order: every Pod
// and Node (kube), Calico's IPAM ledger where the API server serves it
// (calico), and the member lists of the gossip clusters whose pods are
// annotated (gossip), which learns of those pods from kube's informer; the
// pods' times are read with apiClock, the API server's clock measured. The
// gossip watch also reads a cluster again for the remedy. Only the gossip
// clusters decls declares are read.
func controllerSources(client kubernetes.Interface, dyn dynamic.Interface, apiClock func() snapshot.Clock, gossipInterval time.Duration, decls *gossip.Declarations, log *slog.Logger) ([]source.Source, *gossip.Watch) {
	pods := &live.ClusterWatch{Client: client, KeepAnnotations: []string{gossip.AnnotationPrefix}, APIClock: apiClock}
	ledger := &calico.Watch{Discovery: client.Discovery(), Dynamic: dyn, Log: log}
	views := &gossip.Watch{Pods: pods, Interval: gossipInterval, Clusters: decls, Secrets: client.CoreV1()}
	return []source.Source{pods, ledger, views}, views
}

// controllerSourceNames are the names of controllerSources, in order.
var controllerSourceNames = []string{kube.Name, calico.Name, gossip.Name}

// ControllerWatched lists the resources the leader lists and watches, as
// RBAC rules name them: Pods and Nodes, and Calico's ledger when the API
// server serves it. The controller's ClusterRole must grant list and
// watch on each, and nothing more of them.
func ControllerWatched() []schema.GroupResource {
	return append(live.ClusterWatched(), calico.Listed()...)
}

// ControllerRules splits the cluster rules of rules into those the
// controller runs, whose sources it reads (for a rule with Ledgers: its
// Sources and one of its cluster ledgers), and the others, which need a
// source it does not read; ghostwatch scan runs those.
func ControllerRules(rules []rule.Rule) (runs, others []rule.Rule) {
	reads := func(s string) bool { return slices.Contains(controllerSourceNames, s) }
	for _, r := range rule.InScope(rules, rule.ScopeCluster) {
		info := r.Info()
		ok := !slices.ContainsFunc(info.Sources, func(s string) bool { return !reads(s) })
		if len(info.Ledgers) > 0 {
			ok = ok && slices.ContainsFunc(info.Ledgers, func(l rule.Ledger) bool { return l.Scope == rule.ScopeCluster && reads(l.Source) })
		}
		if ok {
			runs = append(runs, r)
		} else {
			others = append(others, r)
		}
	}
	return runs, others
}

// controllerRemedies returns the rules of rules whose remedy the
// controller can run: those that act on gossip members.
func controllerRemedies(rules []rule.Rule) []rule.Rule {
	var out []rule.Rule
	for _, r := range rules {
		if rem := r.Info().Remedy; rem != nil && rem.Target == finding.MemberKind {
			out = append(out, r)
		}
	}
	return out
}

// watchedList lists what the leader watches, for the help: the cluster's
// objects, then Calico's.
func watchedList() string {
	var core, ledger []string
	for _, gr := range ControllerWatched() {
		if gr.Group == calico.Group {
			ledger = append(ledger, gr.String())
		} else {
			core = append(core, gr.String())
		}
	}
	return wrap(strings.Join(core, ", ")+" (source kube)", "  ", 80) +
		wrap(strings.Join(ledger, ", ")+" (source calico, Calico's IPAM ledger: when discovery says the API server serves it; asked again every minute until it does)", "  ", 80) +
		wrap("the member lists of the gossip clusters whose pods are annotated "+gossip.AnnotationGossip+" (source gossip, below)", "  ", 80)
}

// controllerRuleList lists the rules with the sources each reads in the
// controller, and their summaries, for the help. A rule with alternative
// ledgers judges here those of the cluster scope.
func controllerRuleList(rules []rule.Rule) string {
	var b strings.Builder
	for _, r := range rules {
		info := r.Info()
		var here, agent []string
		for _, l := range info.Ledgers {
			if l.Scope == rule.ScopeCluster {
				here = append(here, l.Source)
			} else {
				agent = append(agent, l.Source)
			}
		}
		reads := strings.Join(slices.Concat(info.Sources, here), ", ")
		if len(agent) > 0 {
			reads += "; the agents judge " + strings.Join(agent, ", ")
		}
		b.WriteString(wrap(info.ID+" (reads "+reads+")", "  ", 80))
		b.WriteString(wrap(info.Summary, "      ", 80))
	}
	return b.String()
}

// othersList says which cluster rules the controller does not run, and
// why: a source it does not read.
func othersList(others []rule.Rule) string {
	if len(others) == 0 {
		return ""
	}
	var rs []string
	for _, r := range others {
		var missing []string
		for _, s := range r.Info().Sources {
			if !slices.Contains(controllerSourceNames, s) {
				missing = append(missing, s)
			}
		}
		rs = append(rs, r.Info().ID+" (needs "+strings.Join(missing, ", ")+")")
	}
	return "\n" + wrap("It does not read, and leaves to ghostwatch scan, what these cluster rules need: "+strings.Join(rs, ", ")+".", "", 80)
}

// firstOf returns the first non-empty string.
func firstOf(ss ...string) string {
	for _, s := range ss {
		if s != "" {
			return s
		}
	}
	return ""
}
