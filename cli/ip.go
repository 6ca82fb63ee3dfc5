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
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/portforward"
	"k8s.io/client-go/transport/spdy"
	"k8s.io/klog/v2"
	"sigs.k8s.io/yaml"

	"github.com/ghostwatch/ghostwatch/internal/cmdline"
	"github.com/ghostwatch/ghostwatch/source/gossip"
	"github.com/ghostwatch/ghostwatch/source/kube"
	"github.com/ghostwatch/ghostwatch/source/kube/history"
)

type ipOptions struct {
	kubeFlags           *genericclioptions.ConfigFlags
	output              string
	controllerNamespace string
	controllerSelector  string
	historyPort         int
	historyURLs         []string
	timeout             time.Duration
}

func newIPCommand(streams genericiooptions.IOStreams) *cobra.Command {
	o := &ipOptions{kubeFlags: genericclioptions.NewConfigFlags(true)}
	o.kubeFlags.Namespace = nil
	cmd := &cobra.Command{
		Use:   "ip ADDRESS",
		Short: "Who has held a pod IP, and who holds it now: one timeline",
		Long: `ip tells the story of one address, oldest first: every pod that held it, with
its UID, node, when it started and how it ended, and the pod that holds it now.

Once a pod is gone the API server forgets it held its address; the ghostwatch
controller does not. Every replica, leading or not, keeps the address history
from its watch of every Pod (bounded: --history-ended), and serves it on its
own loopback. ip reaches each ready replica by a port-forward, which the API
server authorizes, asks each for the address, and merges their answers (a
replica restarted later knows less). The pods that hold the address now are
listed from the API server itself (by status.podIP).

It needs: list on pods (every namespace), and list on pods and create on
pods/portforward in the controller's namespace. The Helm chart's
ipReader ClusterRole grants exactly that.

Not read by ip: the conntrack flows still pinned to the address (ghostwatch
scan on the nodes), its IPAM record and the gossip members at it (ghostwatch
scan --rule ipam-unbooked-ip,ipam-misbooked,gossip-ghost-member).

Exit codes: 0 every replica answered, 2 could not run or a replica did not
answer (the timeline says which, and what it holds is still printed).`,
		Example: `  ghostwatch ip 10.244.3.47
  kubectl ghostwatch ip 10.244.3.47 -o json

  # on a node, or through your own port-forward to a replica
  ghostwatch ip 10.244.3.47 --history-url http://127.0.0.1:10282`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return o.run(cmd.Context(), streams, args[0]) },
	}
	f := cmd.Flags()
	o.kubeFlags.AddFlags(f)
	f.StringVarP(&o.output, "output", "o", "table", "output format: table, json or yaml")
	f.StringVar(&o.controllerNamespace, "controller-namespace", "ghostwatch", "the namespace of the ghostwatch controller's pods")
	f.StringVar(&o.controllerSelector, "controller-selector", "app.kubernetes.io/name=ghostwatch,app.kubernetes.io/component=controller", "the label selector of the controller's pods")
	f.IntVar(&o.historyPort, "history-port", HistoryPort, "the port of the controller's address history (its --history-listen) in its pods")
	f.StringSliceVar(&o.historyURLs, "history-url", nil, "ask these address histories (http://HOST:PORT) instead of port-forwarding to the controller's pods")
	f.DurationVar(&o.timeout, "timeout", 20*time.Second, "how long to wait for the API server and the replicas")
	return cmd
}

// ipReport is what ip prints.
type ipReport struct {
	IP netip.Addr `json:"ip"`
	// Tenures are every pod that held the address, oldest first.
	Tenures []history.Tenure `json:"tenures"`
	// Histories are the replicas that answered; Unanswered those that did
	// not, and why.
	Histories  []historySource `json:"histories"`
	Unanswered []unanswered    `json:"unanswered,omitempty"`
	// NotRead lists the ledgers ip does not read, with what does.
	NotRead []string `json:"notRead"`
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

var ipNotRead = []string{
	"conntrack flows pinned to the address: ghostwatch scan on each node",
	"its IPAM record: ghostwatch scan --rule ipam-unbooked-ip,ipam-misbooked,ipam-leaked-ip",
	"gossip members at the address: ghostwatch scan --rule gossip-ghost-member",
}

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
	for _, u := range o.historyURLs {
		if !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
			return cmdline.WithCode(ExitError, fmt.Errorf("--history-url %q: want http://HOST:PORT", u))
		}
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	// client-go's port-forward reports a failed connection in its log as
	// well as to its caller: the report names it once.
	klog.SetSlogLogger(slog.New(slog.DiscardHandler))
	client, server, err := kube.ClientFromFlags(o.kubeFlags)
	if err != nil {
		return cmdline.WithCode(ExitError, err)
	}
	rep := ipReport{IP: ip, NotRead: ipNotRead}
	var (
		wg      sync.WaitGroup
		now     []corev1.Pod
		nowErr  error
		answers []history.Answer
		missed  []unanswered
	)
	wg.Add(2)
	go func() {
		defer wg.Done()
		var l *corev1.PodList
		l, nowErr = client.CoreV1().Pods(metav1.NamespaceAll).List(ctx, metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("status.podIP", ip.String()).String()})
		if nowErr == nil {
			now = l.Items
		}
	}()
	go func() {
		defer wg.Done()
		answers, missed = o.histories(ctx, client, ip)
	}()
	wg.Wait()
	if nowErr != nil {
		return cmdline.WithCode(ExitError, fmt.Errorf("listing the pods at %s from the API server %s: %w", ip, server, nowErr))
	}
	rep.Tenures = mergeTenures(ip, answers, now)
	for _, a := range answers {
		rep.Histories = append(rep.Histories, historySource{Replica: a.Replica, Since: a.Since, NotReady: a.NotReady})
	}
	rep.Unanswered = missed
	if err := printIP(streams.Out, o.output, rep); err != nil {
		return cmdline.WithCode(ExitError, err)
	}
	switch {
	case len(missed) > 0:
		return cmdline.WithCode(ExitError, fmt.Errorf("%d of %d address histories did not answer", len(missed), len(missed)+len(answers)))
	case len(answers) == 0:
		return cmdline.WithCode(ExitError, fmt.Errorf("no address history answered: is the ghostwatch controller running in namespace %s (--controller-namespace)?", o.controllerNamespace))
	}
	return nil
}

// histories asks every address history for ip, concurrently: those
// --history-url names, else every ready controller replica through a
// port-forward.
func (o *ipOptions) histories(ctx context.Context, client kubernetes.Interface, ip netip.Addr) ([]history.Answer, []unanswered) {
	type target struct {
		name string
		ask  func(context.Context) (history.Answer, error)
	}
	var targets []target
	for _, u := range o.historyURLs {
		targets = append(targets, target{gossip.Redact(u), func(ctx context.Context) (history.Answer, error) { return askHistory(ctx, u, ip) }})
	}
	if len(o.historyURLs) == 0 {
		pods, err := client.CoreV1().Pods(o.controllerNamespace).List(ctx, metav1.ListOptions{LabelSelector: o.controllerSelector})
		if err != nil {
			return nil, []unanswered{{Replica: "controller", Error: fmt.Sprintf("listing the controller's pods in %s (%s): %v", o.controllerNamespace, o.controllerSelector, err)}}
		}
		restConfig, err := o.kubeFlags.ToRESTConfig()
		if err != nil {
			return nil, []unanswered{{Replica: "controller", Error: err.Error()}}
		}
		for _, p := range pods.Items {
			if p.Status.Phase != corev1.PodRunning || p.DeletionTimestamp != nil {
				continue
			}
			targets = append(targets, target{p.Name, func(ctx context.Context) (history.Answer, error) {
				return askThroughPortForward(ctx, restConfig, client, p.Namespace, p.Name, o.historyPort, ip)
			}})
		}
	}
	var (
		mu      sync.Mutex
		answers []history.Answer
		missed  []unanswered
		wg      sync.WaitGroup
	)
	for _, t := range targets {
		wg.Go(func() {
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
	slices.SortFunc(answers, func(a, b history.Answer) int { return strings.Compare(a.Replica, b.Replica) })
	slices.SortFunc(missed, func(a, b unanswered) int { return strings.Compare(a.Replica, b.Replica) })
	return answers, missed
}

// askHistory asks the history at base (http://HOST:PORT) for ip. No
// credential is sent: the history needs none.
func askHistory(ctx context.Context, base string, ip netip.Addr) (history.Answer, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(base, "/")+history.Path+ip.String(), nil)
	if err != nil {
		return history.Answer{}, err
	}
	c := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := c.Do(req)
	if err != nil {
		return history.Answer{}, fmt.Errorf("asking %s: %w", gossip.Redact(base), errors.Unwrap(err))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return history.Answer{}, fmt.Errorf("%s answered %s: %s", gossip.Redact(base), resp.Status, strings.TrimSpace(string(b)))
	}
	var a history.Answer
	if err := json.NewDecoder(io.LimitReader(resp.Body, 1<<20)).Decode(&a); err != nil {
		return history.Answer{}, fmt.Errorf("%s: %w", gossip.Redact(base), err)
	}
	if a.IP != ip {
		return history.Answer{}, fmt.Errorf("%s answered for %s, not %s", gossip.Redact(base), a.IP, ip)
	}
	return a, nil
}

// askThroughPortForward forwards a local port of the loopback to port of
// the pod, as kubectl port-forward does (through the API server, which
// authorizes it), and asks the history there.
func askThroughPortForward(ctx context.Context, cfg *rest.Config, client kubernetes.Interface, ns, pod string, port int, ip netip.Addr) (history.Answer, error) {
	transport, upgrader, err := spdy.RoundTripperFor(cfg)
	if err != nil {
		return history.Answer{}, err
	}
	url := client.CoreV1().RESTClient().Post().Resource("pods").Namespace(ns).Name(pod).SubResource("portforward").URL()
	dialer := spdy.NewDialer(upgrader, &http.Client{Transport: transport}, http.MethodPost, url)
	stop, ready := make(chan struct{}), make(chan struct{})
	defer close(stop)
	pf, err := portforward.NewOnAddresses(dialer, []string{"127.0.0.1"}, []string{fmt.Sprintf("0:%d", port)}, stop, ready, io.Discard, io.Discard)
	if err != nil {
		return history.Answer{}, err
	}
	done := make(chan error, 1)
	go func() { done <- pf.ForwardPorts() }()
	select {
	case <-ready:
	case err := <-done:
		return history.Answer{}, fmt.Errorf("port-forward to %s/%s: %w", ns, pod, err)
	case <-ctx.Done():
		return history.Answer{}, fmt.Errorf("port-forward to %s/%s: %w", ns, pod, ctx.Err())
	}
	ports, err := pf.GetPorts()
	if err != nil || len(ports) != 1 {
		return history.Answer{}, fmt.Errorf("port-forward to %s/%s: no local port (%v)", ns, pod, err)
	}
	a, err := askHistory(ctx, fmt.Sprintf("http://127.0.0.1:%d", ports[0].Local), ip)
	if err != nil {
		return history.Answer{}, fmt.Errorf("%s/%s: %w", ns, pod, err)
	}
	return a, nil
}

// mergeTenures merges what the replicas remember of ip with the pods the
// API server lists at it now: one tenure a pod, the earliest start any
// source saw, ended if any replica saw it end; oldest first.
func mergeTenures(ip netip.Addr, answers []history.Answer, now []corev1.Pod) []history.Tenure {
	byUID := map[string]history.Tenure{}
	var order []string
	add := func(t history.Tenure) {
		old, ok := byUID[t.UID]
		if !ok {
			byUID[t.UID] = t
			order = append(order, t.UID)
			return
		}
		if t.From.Before(old.From) {
			old.From = t.From
		}
		if old.Holding() && !t.Holding() {
			old.Until, old.Ended, old.Reason = t.Until, t.Ended, t.Reason
		}
		byUID[t.UID] = old
	}
	for _, a := range answers {
		for _, t := range a.Tenures {
			add(t)
		}
	}
	for i := range now {
		p := kube.Pod(&now[i])
		if p.HostNetwork || !p.HasIP(ip) {
			continue
		}
		t := history.Tenure{IP: ip, Namespace: p.Namespace, Pod: p.Name, UID: p.UID, Node: p.Node, From: p.Since().UTC()}
		if p.Terminal() {
			t.Ended = strings.ToLower(p.Phase)
		}
		add(t)
	}
	out := make([]history.Tenure, 0, len(order))
	for _, uid := range order {
		out = append(out, byUID[uid])
	}
	slices.SortStableFunc(out, func(a, b history.Tenure) int { return a.From.Compare(b.From) })
	return out
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
	// Milliseconds: a rollout replaces a pod within the second.
	const stamp = "2006-01-02T15:04:05.000Z07:00"
	fmt.Fprintf(w, "%s: %d pods, oldest first\n\n", rep.IP, len(rep.Tenures))
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
		fmt.Fprintf(tw, "%s\t%s\t%s/%s\t%s\t%s\t%s\n", t.From.Format(stamp), until, t.Namespace, t.Pod, t.UID, cmpOr(t.Node, "-"), ended)
	}
	tw.Flush()
	fmt.Fprintln(w, "\nAddress histories:")
	for _, h := range rep.Histories {
		s := fmt.Sprintf("  %s: since %s", h.Replica, h.Since.Format(time.RFC3339))
		if h.NotReady != "" {
			s += " (incomplete: " + h.NotReady + ")"
		}
		fmt.Fprintln(w, s)
	}
	for _, u := range rep.Unanswered {
		fmt.Fprintf(w, "  %s: did not answer: %s\n", u.Replica, u.Error)
	}
	if len(rep.Histories)+len(rep.Unanswered) == 0 {
		fmt.Fprintln(w, "  none found: only the pods the API server lists now are shown")
	}
	fmt.Fprintln(w, "\nNot read here:")
	for _, n := range rep.NotRead {
		fmt.Fprintf(w, "  %s\n", n)
	}
	return nil
}

func cmpOr(s, or string) string {
	if s == "" {
		return or
	}
	return s
}
