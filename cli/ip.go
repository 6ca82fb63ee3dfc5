package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"

	"github.com/ghostwatch/ghostwatch/internal/cmdline"
	"github.com/ghostwatch/ghostwatch/internal/kubeauth"
	"github.com/ghostwatch/ghostwatch/internal/redact"
	"github.com/ghostwatch/ghostwatch/internal/text"
	"github.com/ghostwatch/ghostwatch/sink"
	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source/conntrack"
	"github.com/ghostwatch/ghostwatch/source/hostlocal"
	"github.com/ghostwatch/ghostwatch/source/kube"
	"github.com/ghostwatch/ghostwatch/source/kube/history"
)

// replicaFlags say how to reach the controller's replicas: through a
// port-forward to each pod the selector finds, or at the addresses given.
type replicaFlags struct {
	namespace          string
	controllerSelector string
	historyPort        int
	historyURLs        []string
}

func (r *replicaFlags) addFlags(f *pflag.FlagSet) {
	f.StringVar(&r.namespace, "ghostwatch-namespace", "ghostwatch", "the namespace of ghostwatch's controller and agent pods")
	f.StringVar(&r.controllerSelector, "controller-selector", "app.kubernetes.io/name=ghostwatch,app.kubernetes.io/component=controller", "the label selector of the controller's pods")
	f.IntVar(&r.historyPort, "history-port", HistoryPort, "the port of the controller's address history (its --history-listen) in its pods")
	f.StringSliceVar(&r.historyURLs, "history-url", nil, "ask these controller replicas (http://HOST:PORT) instead of port-forwarding to the controller's pods")
}

// replicaTargets are the replicas r reaches, each asked with ask.
func replicaTargets[T any](ctx context.Context, r replicaFlags, cfg *rest.Config, client kubernetes.Interface, ask func(ctx context.Context, base, name string) (T, error)) []target[T] {
	if len(r.historyURLs) > 0 {
		return urlTargets(r.historyURLs, ask)
	}
	return podTargets(ctx, cfg, client, r.namespace, r.controllerSelector, r.historyPort, "the controller", false, ask)
}

type ipOptions struct {
	kubeFlags *genericclioptions.ConfigFlags
	output    string
	replicaFlags
	agentSelector string
	agentReader   string
	agentPort     int
	flowsURLs     []string
	concurrency   int
	timeout       time.Duration
	bundle        string
	nodes         []string
}

func newIPCommand(streams genericiooptions.IOStreams) *cobra.Command {
	o := &ipOptions{kubeFlags: genericclioptions.NewConfigFlags(true)}
	o.kubeFlags.Namespace = nil
	cmd := &cobra.Command{
		Use:   "ip ADDRESS",
		Short: "Who has held a pod IP, and who holds it now: one timeline",
		Long: `ip tells the story of one address, oldest first: every pod that held it, with
its UID, node, when it started and how it ended, the pod that holds it now,
and the conntrack flows every node still holds for it.

Once a pod is gone the API server forgets it held its address; the ghostwatch
controller does not. Every replica, leading or not, keeps the address history
from its watch of every Pod (bounded: --history-ended), and serves it on its
own loopback. ip reaches each ready replica by a port-forward, which the API
server authorizes, asks each for the address, and merges their answers (a
replica restarted later knows less). The pods that hold the address now are
listed from the API server itself (by status.podIP). Every agent, likewise
through a port-forward to its own loopback, reads its node's conntrack table
afresh and answers with the flows translated to the address, addressed to it,
or opened by it (--concurrency at once, all within --timeout).

An agent answers only a caller the cluster authorizes (its node is not a
trusted place: any local user reaches its loopback): a bearer token bound to
audience ` + kubeauth.Audience + `, of an identity allowed to get nodes/flows,
nodes/hostlocal and nodes/findings in group ` + kubeauth.Group + `. ip requests
such a token of ServiceAccount --agent-reader, valid ` + agentTokenTTL.String() + `, and never
sends your own credential to a node.

It needs: list on pods (every namespace) and on Calico's ipamblocks, and
create on pods/portforward and on the reader's serviceaccounts/token in
ghostwatch's namespace. The Helm chart's ipReader grants exactly that, and
makes the reader.

Each agent also says what its node's host-local stores hold for the address
(reserved, for which container, or not). Where the API server serves Calico's
IPAM, ip reads the block that holds the address and says whether its booking
(handle, node, pod) matches the pod that holds it. The leading replica adds
the gossip members at the address and the findings that name it; each agent,
its node's.

Exit codes: 0 every replica and agent answered, 2 could not run or one did
not answer (the report names it, with why, and prints what the others said:
a node that did not answer is never read as holding no flow).`,
		Example: `  ghostwatch ip 10.244.3.47
  kubectl ghostwatch ip 10.244.3.47 -o json

  # offline, from a bundle ghostwatch collect wrote
  ghostwatch ip 10.244.3.47 --bundle incident-42.tar.gz

  # through your own port-forwards, or on a node
  ghostwatch ip 10.244.3.47 --history-url http://127.0.0.1:10282 --flows-url http://127.0.0.1:10283`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.bundle != "" {
				ip, err := netip.ParseAddr(args[0])
				if err != nil {
					return cmdline.WithCode(ExitError, fmt.Errorf("%q: not an IP address", args[0]))
				}
				return o.fromBundle(cmd, streams, ip.Unmap())
			}
			return o.run(cmd.Context(), streams, args[0])
		},
	}
	f := cmd.Flags()
	o.kubeFlags.AddFlags(f)
	f.StringVarP(&o.output, "output", "o", "table", "output format: table, json or yaml")
	o.replicaFlags.addFlags(f)
	f.StringVar(&o.agentSelector, "agent-selector", "app.kubernetes.io/name=ghostwatch,app.kubernetes.io/component=agent", "the label selector of the agents' pods")
	f.IntVar(&o.agentPort, "agent-port", AgentAddressPort, "the port where each agent answers for its node's conntrack table (its --address-listen)")
	f.StringVar(&o.agentReader, "agent-reader", DefaultAgentReader, "the ServiceAccount, in --ghostwatch-namespace, whose token the agents are asked with: ip requests one bound to audience "+kubeauth.Audience+", valid "+agentTokenTTL.String()+", and never sends your own credential to a node")
	f.StringSliceVar(&o.flowsURLs, "flows-url", nil, "ask these agents (http://HOST:PORT) instead of port-forwarding to every agent's pod")
	f.IntVar(&o.concurrency, "concurrency", 16, "at most this many replicas and agents asked at once")
	f.StringVar(&o.bundle, "bundle", "", "tell the story from a bundle ghostwatch collect wrote, offline: nothing live is asked")
	f.StringSliceVar(&o.nodes, "node", nil, "ask only the agents of these nodes (default every node's): on a large cluster, the nodes whose clients matter")
	f.DurationVar(&o.timeout, "timeout", 20*time.Second, "how long to wait for the API server and the replicas")
	return cmd
}

// ipReport is what ip prints.
type ipReport struct {
	IP netip.Addr `json:"ip"`
	// Tenures are every pod that held the address, oldest first.
	Tenures []history.Tenure `json:"tenures"`
	// Flows are what each node's conntrack table holds for the address,
	// by node.
	Flows []nodeFlows `json:"flows"`
	// IPAM is what Calico's IPAM ledger books for it.
	IPAM *ipamRecord `json:"ipam,omitempty"`
	// Findings are the findings standing that name the address: the
	// leading replica's (the cluster rules) and each agent's (its node's).
	Findings []reportFinding `json:"findings"`
	// Members are the gossip members at the address, as the leader's last
	// views read them.
	Members []sink.MemberAt `json:"gossipMembers"`
	// Judged says whether a leading replica answered: without one, the
	// cluster rules' findings and the gossip members are not known.
	Judged bool `json:"clusterJudged"`
	// Histories are the replicas that answered; Unanswered the replicas
	// and agents that did not, and why.
	Histories  []historySource `json:"histories"`
	Unanswered []unanswered    `json:"unanswered,omitempty"`
	// NotRead lists the ledgers ip does not read, with what does.
	NotRead []string `json:"notRead"`
}

type nodeFlows struct {
	Agent string `json:"agent"`
	conntrack.AtAddress
	// HostLocal is what the node's host-local stores say of the address.
	HostLocal      []hostlocal.NetworkAddress `json:"hostLocal,omitempty"`
	HostLocalError string                     `json:"hostLocalError,omitempty"`
	said           sink.FindingsAt
}

// replicaAnswer is what a controller replica says of the address.
type replicaAnswer struct {
	history.Answer
	said sink.FindingsAt
}

// reportFinding is a finding and who reported it.
type reportFinding struct {
	From string `json:"from"`
	sink.FindingAt
}

type historySource struct {
	Replica  string    `json:"replica"`
	Since    time.Time `json:"since"`
	NotReady string    `json:"notReady,omitempty"`
}

type unanswered struct {
	Replica string `json:"replica"`
	Error   string `json:"error"`
}

var ipNotRead = []string{}

func (o *ipOptions) run(ctx context.Context, streams genericiooptions.IOStreams, arg string) error {
	ip, err := netip.ParseAddr(arg)
	if err != nil {
		return cmdline.WithCode(ExitError, fmt.Errorf("%q: not an IP address", arg))
	}
	ip = ip.Unmap()
	switch o.output {
	case "table", "json", "yaml":
	default:
		return cmdline.WithCode(ExitError, fmt.Errorf("-o %q: want table, json or yaml", o.output))
	}
	if o.timeout <= 0 {
		return cmdline.WithCode(ExitError, fmt.Errorf("--timeout %s: must be positive", o.timeout))
	}
	if o.concurrency < 1 {
		return cmdline.WithCode(ExitError, fmt.Errorf("--concurrency %d: must be at least 1", o.concurrency))
	}
	for flag, urls := range map[string][]string{"--history-url": o.historyURLs, "--flows-url": o.flowsURLs} {
		if err := checkURLs(flag, urls); err != nil {
			return err
		}
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	// client-go's port-forward reports a failed connection in its log as
	// well as to its caller: the report names it once.
	klog.SetSlogLogger(slog.New(slog.DiscardHandler))
	restConfig, err := kube.ConfigFromFlags(o.kubeFlags)
	if err != nil {
		return cmdline.WithCode(ExitError, err)
	}
	client, server, err := kube.ClientForConfig(restConfig)
	if err != nil {
		return cmdline.WithCode(ExitError, err)
	}
	rep := ipReport{IP: ip, NotRead: ipNotRead, Flows: []nodeFlows{}}
	var (
		wg                   sync.WaitGroup
		now                  []snapshot.Pod
		nowErr               error
		answers              []replicaAnswer
		flows                []nodeFlows
		missedH, missedFlows []unanswered
	)
	var (
		record    ipamRecord
		recordErr error
	)
	wg.Go(func() {
		var l *corev1.PodList
		l, nowErr = client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("status.podIP", ip.String()).String()})
		if nowErr != nil {
			return
		}
		for i := range l.Items {
			now = append(now, kube.Pod(&l.Items[i]))
		}
		// The IPAM record is judged against the pods at the address.
		dyn, err := dynamic.NewForConfig(restConfig)
		if err != nil {
			recordErr = err
			return
		}
		record, recordErr = calicoRecord(ctx, dyn, ip, now)
	})
	wg.Go(func() {
		ask := func(ctx context.Context, base, _ string) (replicaAnswer, error) {
			a, err := askHistory(ctx, base, ip)
			if err != nil {
				return replicaAnswer{}, err
			}
			r := replicaAnswer{Answer: a}
			return r, getJSON(ctx, base+sink.FindingsPath+ip.String(), &r.said)
		}
		answers, missedH = askAll(ctx, o.concurrency, replicaTargets(ctx, o.replicaFlags, restConfig, client, ask))
		slices.SortFunc(answers, func(a, b replicaAnswer) int { return strings.Compare(a.Replica, b.Replica) })
	})
	wg.Go(func() {
		// The agents answer only a caller the cluster authorizes: a token
		// of the reader's, bound to their audience, goes to them, never
		// this caller's own credential.
		token, tokenErr := agentToken(ctx, client, o.namespace, o.agentReader)
		ask := func(ctx context.Context, base, name string) (nodeFlows, error) {
			n := nodeFlows{Agent: name}
			if tokenErr != nil {
				return nodeFlows{}, tokenErr
			}
			if err := getJSONWith(ctx, base+conntrack.AddressPath+ip.String(), token, &n.AtAddress); err != nil {
				return nodeFlows{}, err
			}
			// The node's stores unread leave its flows standing.
			var hl hostlocal.AtAddress
			if err := getJSONWith(ctx, base+hostlocal.AddressPath+ip.String(), token, &hl); err != nil {
				n.HostLocalError = err.Error()
			}
			n.HostLocal = hl.Networks
			return n, getJSONWith(ctx, base+sink.FindingsPath+ip.String(), token, &n.said)
		}
		targets := urlTargets(o.flowsURLs, ask)
		if len(o.flowsURLs) == 0 {
			targets = podTargets(ctx, restConfig, client, o.namespace, o.agentSelector, o.agentPort, "the agents", true, ask)
			if len(o.nodes) > 0 {
				targets = slices.DeleteFunc(targets, func(t target[nodeFlows]) bool {
					return !slices.Contains(o.nodes, t.node)
				})
				if len(targets) == 0 {
					targets = []target[nodeFlows]{{"the agents", "", func(context.Context) (nodeFlows, error) {
						return nodeFlows{}, fmt.Errorf("no running agent on %s", strings.Join(o.nodes, ", "))
					}}}
				}
			}
		}
		flows, missedFlows = askAll(ctx, o.concurrency, targets)
		slices.SortFunc(flows, func(a, b nodeFlows) int { return strings.Compare(a.Node, b.Node) })
	})
	wg.Wait()
	if nowErr != nil {
		return cmdline.WithCode(ExitError, redact.Error(fmt.Errorf("listing the pods at %s from the API server %s: %w", ip, server, nowErr), restConfig.Host))
	}
	var histories []history.Answer
	rep.Findings, rep.Members = []reportFinding{}, []sink.MemberAt{}
	for _, a := range answers {
		histories = append(histories, a.Answer)
		rep.Histories = append(rep.Histories, historySource{Replica: a.Replica, Since: a.Since, NotReady: a.NotReady})
		if a.said.Judging {
			rep.Judged = true
			for _, f := range a.said.Findings {
				rep.Findings = append(rep.Findings, reportFinding{From: a.said.From, FindingAt: f})
			}
			rep.Members = append(rep.Members, a.said.Members...)
		}
	}
	rep.Tenures = mergeTenures(ip, histories, now)
	rep.Flows = append(rep.Flows, flows...)
	for _, n := range flows {
		if n.HostLocalError != "" {
			rep.Unanswered = append(rep.Unanswered, unanswered{Replica: "host-local's stores on " + n.Node, Error: n.HostLocalError})
		}
		for _, f := range n.said.Findings {
			rep.Findings = append(rep.Findings, reportFinding{From: n.said.From, FindingAt: f})
		}
	}
	rep.Unanswered = slices.Concat(rep.Unanswered, missedH, missedFlows)
	if recordErr != nil {
		rep.Unanswered = append(rep.Unanswered, unanswered{Replica: "calico", Error: recordErr.Error()})
	} else {
		rep.IPAM = &record
	}
	if err := printIP(streams.Out, o.output, rep); err != nil {
		return cmdline.WithCode(ExitError, err)
	}
	switch {
	case len(rep.Unanswered) > 0:
		return cmdline.WithCode(ExitError, fmt.Errorf("%d replicas or agents did not answer: what they hold is not in this timeline", len(rep.Unanswered)))
	case len(answers) == 0:
		return cmdline.WithCode(ExitError, fmt.Errorf("no address history answered: is the ghostwatch controller running in namespace %s (--ghostwatch-namespace)?", o.namespace))
	}
	return nil
}

// target is one replica or agent to ask.
type target[T any] struct {
	name string
	// node is the node of the pod asked; "" for an address given.
	node string
	ask  func(context.Context) (T, error)
}

// urlTargets asks each of urls with ask.
func urlTargets[T any](urls []string, ask func(ctx context.Context, base, name string) (T, error)) []target[T] {
	var out []target[T]
	for _, u := range urls {
		name := redact.Addr(u)
		out = append(out, target[T]{name, "", func(ctx context.Context) (T, error) { return ask(ctx, strings.TrimSuffix(u, "/"), name) }})
	}
	return out
}

// podTargets asks every running pod of namespace ns that selector
// selects, at port, through a port-forward; what names them in errors, and
// byNode names each by its node too.
// Failing to list them, or finding none, is one target that fails so.
func podTargets[T any](ctx context.Context, cfg *rest.Config, client kubernetes.Interface, ns, selector string, port int, what string, byNode bool, ask func(ctx context.Context, base, name string) (T, error)) []target[T] {
	fail := func(err error) []target[T] {
		return []target[T]{{what, "", func(context.Context) (T, error) { var zero T; return zero, err }}}
	}
	pods, err := client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return fail(fmt.Errorf("listing the pods of %s in %s (%s): %w", what, ns, selector, err))
	}
	var out []target[T]
	for _, p := range pods.Items {
		if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
			continue
		}
		name := p.Name
		if byNode && p.Spec.NodeName != "" {
			name += " on " + p.Spec.NodeName
		}
		out = append(out, target[T]{name, p.Spec.NodeName, func(ctx context.Context) (T, error) {
			var a T
			err := portForward(ctx, cfg, client, p.Namespace, p.Name, port, func(base string) (err error) {
				a, err = ask(ctx, base, p.Name)
				return err
			})
			return a, err
		}})
	}
	if len(out) == 0 {
		return fail(fmt.Errorf("no running pod of %s in %s (%s)", what, ns, selector))
	}
	return out
}

// askAll asks the targets, at most concurrency at once; each answer, or
// why not.
func askAll[T any](ctx context.Context, concurrency int, targets []target[T]) ([]T, []unanswered) {
	var (
		mu      sync.Mutex
		answers []T
		missed  []unanswered
		wg      sync.WaitGroup
		slots   = make(chan struct{}, concurrency)
	)
	for _, t := range targets {
		wg.Go(func() {
			slots <- struct{}{}
			defer func() { <-slots }()
			a, err := t.ask(ctx)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				missed = append(missed, unanswered{Replica: t.name, Error: err.Error()})
				return
			}
			answers = append(answers, a)
		})
	}
	wg.Wait()
	slices.SortFunc(missed, func(a, b unanswered) int { return strings.Compare(a.Replica, b.Replica) })
	return answers, missed
}

// DefaultAgentReader is the ServiceAccount ip asks the agents as: the
// chart's ipReader makes it (RELEASE-ip-reader, the release being
// ghostwatch) and grants its subjects a token of it.
const DefaultAgentReader = "ghostwatch-ip-reader"

// agentTokenTTL is how long a token agentToken requests is valid: the
// least the API server grants.
const agentTokenTTL = 10 * time.Minute

// agentToken requests a token of ServiceAccount ns/sa bound to the
// agents' audience (kubeauth.Audience), valid agentTokenTTL: what an agent
// takes from a caller, and what is worthless against the API server should
// a node's port be held by another process than the agent.
func agentToken(ctx context.Context, client kubernetes.Interface, ns, sa string) (string, error) {
	tr, err := client.CoreV1().ServiceAccounts(ns).CreateToken(ctx, sa, &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		Audiences: []string{kubeauth.Audience}, ExpirationSeconds: ptr.To(int64(agentTokenTTL / time.Second)),
	}}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("requesting a token of ServiceAccount %s/%s for the agents (audience %s): %w (the chart's ipReader grants create on its serviceaccounts/token; --agent-reader names another)", ns, sa, kubeauth.Audience, err)
	}
	return tr.Status.Token, nil
}

// askHistory asks the history at base (http://HOST:PORT) for ip.
func askHistory(ctx context.Context, base string, ip netip.Addr) (history.Answer, error) {
	var a history.Answer
	if err := getJSON(ctx, base+history.Path+ip.String(), &a); err != nil {
		return history.Answer{}, err
	}
	if a.IP != ip {
		return history.Answer{}, fmt.Errorf("%s answered for %s, not %s", redact.Addr(base), a.IP, ip)
	}
	return a, nil
}

// getJSON decodes what url answers into v. No credential is sent (a
// replica's history needs none), and no redirect is followed.
func getJSON(ctx context.Context, url string, v any) error {
	return getJSONWith(ctx, url, "", v)
}

// getJSONWith is getJSON sending token, when given, as a bearer token: an
// agent answers only a caller the cluster authorizes, and the token is
// one bound to the agents' audience (agentToken), never the caller's own
// credential.
func getJSONWith(ctx context.Context, url, token string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return redact.Error(fmt.Errorf("%s: %w", redact.Addr(url), errors.Unwrap(err)), url)
	}
	// A user and password in the address are not sent: nothing asked
	// needs one.
	req.URL.User = nil
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		return redact.Error(fmt.Errorf("asking %s: %w", redact.Addr(url), errors.Unwrap(err)), url)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%s answered %s: %s", redact.Addr(url), resp.Status, strings.TrimSpace(string(b)))
	}
	if err := json.NewDecoder(io.LimitReader(resp.Body, 8<<20)).Decode(v); err != nil {
		return fmt.Errorf("%s: %w", redact.Addr(url), err)
	}
	return nil
}

// portForward forwards a local port of the loopback to port of the pod,
// as kubectl port-forward does (through the API server, which authorizes
// it), and calls fn with its base URL while it lasts.
func portForward(ctx context.Context, cfg *rest.Config, client kubernetes.Interface, ns, pod string, port int, fn func(base string) error) error {
	transport, upgrader, err := spdy.RoundTripperFor(cfg)
	if err != nil {
		return err
	}
	url := client.CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name(pod).SubResource("portforward").URL()
	dialer := spdy.NewDialer(upgrader, &http.Client{Transport: transport}, http.MethodPost, url)
	stop, ready := make(chan struct{}), make(chan struct{})
	defer close(stop)
	pf, err := portforward.NewOnAddresses(dialer, []string{"127.0.0.1"}, []string{fmt.Sprintf("0:%d", port)}, stop, ready, io.Discard, io.Discard)
	if err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- pf.ForwardPorts() }()
	select {
	case <-ready:
	case err := <-done:
		return fmt.Errorf("port-forward to %s/%s: %w", ns, pod, err)
	case <-ctx.Done():
		return fmt.Errorf("port-forward to %s/%s: %w", ns, pod, ctx.Err())
	}
	ports, err := pf.GetPorts()
	if err != nil || len(ports) != 1 {
		return fmt.Errorf("port-forward to %s/%s: no local port (%v)", ns, pod, err)
	}
	return fn(fmt.Sprintf("http://127.0.0.1:%d", ports[0].Local))
}

// mergeTenures merges what the replicas remember of ip with the pods the
// API server lists at it now: one tenure a pod, the earliest start any
// source saw, ended if any replica saw it end; oldest first.
func mergeTenures(ip netip.Addr, answers []history.Answer, now []snapshot.Pod) []history.Tenure {
	var told [][]history.Tenure
	for _, a := range answers {
		told = append(told, a.Tenures)
	}
	var listed []history.Tenure
	for _, p := range now {
		if p.HostNetwork || !p.HasIP(ip) {
			continue
		}
		t := history.Tenure{IP: ip, Namespace: p.Namespace, Pod: p.Name, UID: p.UID, Node: p.Node, From: p.Since().UTC()}
		if p.Terminal() {
			t.Ended = strings.ToLower(p.Phase)
		}
		listed = append(listed, t)
	}
	return history.Merge(append(told, listed)...)
}

func printIP(w io.Writer, format string, rep ipReport) error {
	switch format {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	case "yaml":
		b, err := yaml.Marshal(rep)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	}
	// What agents, replicas, the API server and gossip members said is
	// printed escaped (text.Fprintf): a name or an error holding a newline
	// or a terminal's escape sequence shows on its own line, as it is.
	// Milliseconds: a rollout replaces a pod within the second.
	const stamp = "2006-01-02T15:04:05.000Z07:00"
	text.Fprintf(w, "%s: %d %s, oldest first\n\n", rep.IP, len(rep.Tenures), map[bool]string{true: "pod", false: "pods"}[len(rep.Tenures) == 1])
	tw := tabwriter.NewWriter(w, 2, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "FROM\tUNTIL\tPOD\tUID\tNODE\tENDED")
	for _, t := range rep.Tenures {
		until, ended := "-", "holds it now"
		if !t.Holding() {
			until, ended = t.Until.Format(stamp), t.Ended
			if t.Reason != "" {
				ended += " (" + t.Reason + ")"
			}
			if t.Until.IsZero() {
				until = "?"
			}
		}
		text.Fprintf(tw, "%s\t%s\t%s/%s\t%s\t%s\t%s\n", t.From.Format(stamp), until, t.Namespace, t.Pod, t.UID, cmpOr(t.Node, "-"), ended)
	}
	tw.Flush()
	text.Fprintf(w, "\nConntrack flows at %s:\n", rep.IP)
	for _, n := range rep.Flows {
		text.Fprintf(w, "  %s (%d entries read at %s): ", n.Node, n.Read, n.CapturedAt.Format(stamp))
		if n.Total == 0 {
			fmt.Fprintln(w, "none")
			continue
		}
		text.Fprintf(w, "%d %s\n", n.Total, map[bool]string{true: "flow", false: "flows"}[n.Total == 1])
		for _, f := range n.Flows {
			state := cmpOr(f.State, "-")
			text.Fprintf(w, "    %-11s %s  backend %s  %s, expires in %s\n", f.Role, f.Flow, f.Backend, state, time.Duration(f.Timeout)*time.Second)
			text.Fprintf(w, "                to remove exactly it: %s\n", f.Remove)
		}
		if len(n.Flows) < n.Total {
			text.Fprintf(w, "    ... and %d more (-o json lists %d)\n", n.Total-len(n.Flows), len(n.Flows))
		}
	}
	if len(rep.Flows) == 0 {
		fmt.Fprintln(w, "  no agent answered: no node's table was read")
	}
	hl := false
	for _, n := range rep.Flows {
		for _, r := range n.HostLocal {
			if !hl {
				fmt.Fprintln(w, "\nhost-local:")
				hl = true
			}
			switch {
			case r.Reserved:
				text.Fprintf(w, "  %s: network %s (%s): reserved for container %s (%s) since %s\n", n.Node, r.Network, r.Dir, r.ContainerID, cmpOr(r.IfName, "-"), r.Since.Format(stamp))
			case r.Missing:
				text.Fprintf(w, "  %s: network %s: its store %s is missing (never made, or wiped): not reserved\n", n.Node, r.Network, r.Dir)
			default:
				text.Fprintf(w, "  %s: network %s (%s): in its ranges, not reserved\n", n.Node, r.Network, r.Dir)
			}
		}
	}
	if r := rep.IPAM; r != nil {
		fmt.Fprintln(w, "\nIPAM record:")
		switch {
		case r.Ledger == "":
			text.Fprintf(w, "  %s\n", r.NotServed)
		case r.Block == "":
			text.Fprintf(w, "  calico: no block holds %s\n", rep.IP)
		case !r.Allocated:
			text.Fprintf(w, "  calico: block %s (%s, affinity %s): free\n", r.Block, r.CIDR, cmpOr(r.Affinity, "none"))
		default:
			at := ""
			if !r.BookedAt.IsZero() {
				at = " at " + r.BookedAt.UTC().Format(stamp)
			}
			text.Fprintf(w, "  calico: block %s (%s, affinity %s), ordinal %d, handle %s, booked under node %s for %s%s\n",
				r.Block, r.CIDR, cmpOr(r.Affinity, "none"), r.Ordinal, r.Handle, cmpOr(r.BookedNode, "-"), cmpOr(r.BookedPod, "-"), at)
		}
		if r.Ledger != "" {
			text.Fprintf(w, "  %s\n", r.Verdict)
		}
	}
	text.Fprintf(w, "\nGossip members at %s:\n", rep.IP)
	for _, m := range rep.Members {
		since := ""
		if !m.Since.IsZero() {
			since = " since " + m.Since.UTC().Format(stamp)
		}
		text.Fprintf(w, "  %s %s: %s (port %d) %s%s\n", m.System, cmpOr(m.Cluster, "-"), m.Name, m.Port, m.Status, since)
	}
	switch {
	case !rep.Judged:
		fmt.Fprintln(w, "  not known: no leading controller replica answered")
	case len(rep.Members) == 0:
		fmt.Fprintln(w, "  none in the clusters the controller reads")
	}
	text.Fprintf(w, "\nFindings naming %s:\n", rep.IP)
	for _, f := range rep.Findings {
		text.Fprintf(w, "  [%s] %s %s: %s\n", f.From, f.Severity, f.Rule, f.Message)
		if f.Runbook != "" {
			text.Fprintf(w, "    runbook: %s\n", f.Runbook)
		}
	}
	if len(rep.Findings) == 0 {
		fmt.Fprintln(w, "  none")
	}
	if !rep.Judged {
		fmt.Fprintln(w, "  (the cluster rules' are not known: no leading controller replica answered)")
	}
	fmt.Fprintln(w, "\nAddress histories:")
	for _, h := range rep.Histories {
		s := fmt.Sprintf("  %s: since %s", text.Escape(h.Replica), h.Since.Format(time.RFC3339))
		if h.NotReady != "" {
			s += " (incomplete: " + text.Escape(h.NotReady) + ")"
		}
		fmt.Fprintln(w, s)
	}
	if len(rep.Histories) == 0 {
		fmt.Fprintln(w, "  none answered: only the pods the API server lists now are shown")
	}
	if len(rep.Unanswered) > 0 {
		fmt.Fprintln(w, "\nDid not answer (what they hold is not above):")
		for _, u := range rep.Unanswered {
			text.Fprintf(w, "  %s: %s\n", u.Replica, u.Error)
		}
	}
	if len(rep.NotRead) > 0 {
		fmt.Fprintln(w, "\nNot read here:")
		for _, n := range rep.NotRead {
			text.Fprintf(w, "  %s\n", n)
		}
	}
	return nil
}

func cmpOr(s, or string) string {
	if s == "" {
		return or
	}
	return s
}

// checkURLs refuses an address of flag that is not http(s)://HOST:PORT,
// its user information redacted.
func checkURLs(flag string, urls []string) error {
	for _, u := range urls {
		if !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
			return cmdline.WithCode(ExitError, fmt.Errorf("%s %q: want http://HOST:PORT", flag, redact.Addr(u)))
		}
	}
	return nil
}
