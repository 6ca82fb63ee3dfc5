package lab

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/ghostwatch/ghostwatch/agent"
	"github.com/ghostwatch/ghostwatch/finding"
	"github.com/ghostwatch/ghostwatch/lab/controlplane"
	"github.com/ghostwatch/ghostwatch/lab/netbed"
	"github.com/ghostwatch/ghostwatch/remedy"
	"github.com/ghostwatch/ghostwatch/rule"
	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source"
	"github.com/ghostwatch/ghostwatch/source/conntrack"
	"github.com/ghostwatch/ghostwatch/source/kube/live"
)

// The rolling-replacement harness asks the question the grace period
// answers: while a Deployment is rolled over and over on the real control
// plane, with pod IPs handed straight to the next pod and endpoints moving
// between EndpointSlices, does the agent delete any flow whose pod still
// exists? Every delete the remedy makes is recorded and judged against a
// ledger of pod lifetimes kept from the API server: the flow's pod is the
// pod that held its backend IP when the kernel created the entry (conntrack
// timestamps); a delete while that pod still exists is a healthy flow lost.

// rollingOptions configure one run.
type rollingOptions struct {
	// mode is kube-proxy's; iptables when empty.
	mode controlplane.ProxyMode
	// replacements: pods replaced, one after another, each new pod ready
	// and answering before the old one is deleted
	// (terminationGracePeriodSeconds 1).
	replacements int
	// replicas of the Service, spread over slices of maxPerSlice endpoints.
	replicas, maxPerSlice int
	// grace and budget (ghost IPs per minute) of the agent's remedies.
	grace  time.Duration
	budget int
	// cacheOnly turns the last re-check off: the remedy acts on the
	// finding as the informer caches produced it, as the agent did before
	// it read the API server before acting. For comparison only.
	cacheOnly bool
}

// rollingResult is what a run measured.
type rollingResult struct {
	replacements, reusedIPs int
	// connections the clients opened, and how many keep-alive requests
	// failed.
	connections, failures int64
	// ghostDeletes are flows deleted after their pod was gone from the
	// API server (or opened to an address no pod held).
	ghostDeletes int
	// healthy are flows deleted while their pod still existed;
	// unattributed are deleted flows no pod ledger entry explains (no start
	// time, or an address no pod ever held).
	healthy, unattributed []string
	// refused are remedy actions refused (re-check or read-back), done
	// those taken; refusals holds a few reasons.
	refused, done float64
	refusals      []string
	// clear is, per ghost flow deleted, the time from its pod's deletion
	// to the delete.
	clear []time.Duration
}

func (r rollingResult) String() string {
	return fmt.Sprintf("%d replacements (%d reusing a freed IP), %d connections, %d keep-alive failures: %d ghost flows deleted, %d healthy flows deleted, %d unattributed; remedy actions done %.0f, refused %.0f; ghost cleared p50 %s max %s after its pod's deletion",
		r.replacements, r.reusedIPs, r.connections, r.failures, r.ghostDeletes, len(r.healthy), len(r.unattributed),
		r.done, r.refused, percentile(r.clear, 0.5).Round(time.Millisecond), percentile(r.clear, 1).Round(time.Millisecond))
}

// percentile is the q-quantile (0 to 1) of ds, the sample at q of the way
// through them in order (nearest rank below); 0 for none.
func percentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[int(q*float64(len(s)-1))]
}

// podLife is one pod's hold on its IP, as the API server showed it.
type podLife struct {
	ns, name        string
	ip              netip.Addr
	ipAt, deletedAt time.Time
}

// podLedger records, from a watch of every Pod, when each pod got its IP
// and when it was deleted.
type podLedger struct {
	mu   sync.Mutex
	pods map[types.UID]*podLife
}

func watchPods(ctx context.Context, c kubernetes.Interface) *podLedger {
	l := &podLedger{pods: map[types.UID]*podLife{}}
	lw := cache.NewListWatchFromClient(c.CoreV1().RESTClient(), "pods", metav1.NamespaceAll, fields.Everything())
	inf := cache.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, cache.Indexers{})
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { l.observe(obj, false) },
		UpdateFunc: func(_, obj any) { l.observe(obj, false) },
		DeleteFunc: func(obj any) { l.observe(obj, true) },
	})
	go inf.Run(ctx.Done())
	cache.WaitForCacheSync(ctx.Done(), inf.HasSynced)
	return l
}

func (l *podLedger) observe(obj any, deleted bool) {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = d.Obj
	}
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return
	}
	now := time.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	pl := l.pods[p.UID]
	if pl == nil {
		pl = &podLife{ns: p.Namespace, name: p.Name}
		l.pods[p.UID] = pl
	}
	if !pl.ip.IsValid() && p.Status.PodIP != "" {
		if ip, err := netip.ParseAddr(p.Status.PodIP); err == nil {
			pl.ip, pl.ipAt = ip, now
		}
	}
	if deleted && pl.deletedAt.IsZero() {
		pl.deletedAt = now
	}
}

// ownerSlack: a flow is attributed to a pod that got its IP up to this
// long after the kernel created the entry, since the ledger learns of the
// IP a little after the API server wrote it. It only ever moves a flow to
// a newer (live) pod, so it can count a delete as healthy wrongly, never
// hide one.
const ownerSlack = 100 * time.Millisecond

// owner is the pod the flow was opened to: the last pod given the flow's
// backend IP before the kernel created the entry.
func (l *podLedger) owner(f *snapshot.Flow) (podLife, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	var best *podLife
	for _, pl := range l.pods {
		if pl.ip == f.Reply.Src && !pl.ipAt.After(f.Start.Add(ownerSlack)) && (best == nil || pl.ipAt.After(best.ipAt)) {
			best = pl
		}
	}
	if best == nil {
		return podLife{}, false
	}
	return *best, true
}

// freed is the IP of a pod deleted from the API server that no later pod
// holds and the kubelet stand-in has released, the earliest first; false
// when there is none.
func (l *podLedger) freed(k *controlplane.Kubelet) (netip.Addr, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	latest := map[netip.Addr]*podLife{}
	for _, pl := range l.pods {
		if pl.ip.IsValid() && (latest[pl.ip] == nil || pl.ipAt.After(latest[pl.ip].ipAt)) {
			latest[pl.ip] = pl
		}
	}
	var best *podLife
	for ip, pl := range latest {
		if !pl.deletedAt.IsZero() && !k.Holds(ip) && (best == nil || pl.deletedAt.Before(best.deletedAt)) {
			best = pl
		}
	}
	if best == nil {
		return netip.Addr{}, false
	}
	return best.ip, true
}

// deleteLog is the remedy's flow table: the node's conntrack table, with
// every delete recorded.
type deleteLog struct {
	remedy.FlowTable
	mu      sync.Mutex
	deletes []deleted
}

type deleted struct {
	flow snapshot.Flow
	at   time.Time
}

// Delete reads the entry's start time from the kernel (the remedy's
// target need not carry it), then deletes it.
func (d *deleteLog) Delete(f *snapshot.Flow) error {
	rec := *f
	if got, err := d.FlowTable.Get(f); err == nil && got.ID == f.ID {
		rec.Start = got.Start
	}
	err := d.FlowTable.Delete(f)
	if err == nil {
		d.mu.Lock()
		d.deletes = append(d.deletes, deleted{flow: rec, at: time.Now()})
		d.mu.Unlock()
	}
	return err
}

// rollingAgent runs the agent's loop in-process, in the node's network
// namespace, as `ghostwatch agent` builds it (the agent's own RBAC
// identity, every node rule, every remedy on), with o's grace and budget,
// deleting through log. It returns the agent's metrics and its log.
func (e *realEnv) rollingAgent(t *testing.T, ctx context.Context, o rollingOptions, log *deleteLog) (*agent.Metrics, *bytes.Buffer) {
	t.Helper()
	conn, sub, err := openTable(e.node.Net)
	if err != nil {
		t.Fatal(err)
	}
	table := &conntrack.Watch{Table: conn, Events: sub}
	// The remedy deletes through the log, and the log through the agent's
	// table, as the agent's remedy does.
	log.FlowTable = table
	client, err := kubernetes.NewForConfig(e.cp.Config(controlplane.UserAgent))
	if err != nil {
		t.Fatal(err)
	}
	rules := rule.InScope(rule.All(rule.Config{}), rule.ScopeNode)
	rems, err := remedy.Build(rules, []string{rule.StaleNATFlowID}, remedy.Settings{
		Grace: o.grace, Budget: o.budget, BudgetInterval: remedy.DefaultBudgetInterval, MaxPerGroup: remedy.DefaultMaxPerGroup,
	}, &remedy.Flows{Table: log})
	if err != nil {
		t.Fatal(err)
	}
	if o.cacheOnly {
		for _, r := range rems {
			r.Recheck = func(_ context.Context, fs []finding.Finding) []error { return make([]error, len(fs)) }
		}
	}
	var logs bytes.Buffer
	var logMu sync.Mutex
	m := agent.NewMetrics(prometheus.NewRegistry(), rules)
	a := agent.New(agent.Config{
		NodeName: e.node.Name,
		Sources: []source.Source{
			&live.Watch{
				Informers: live.NewInformers(client, live.InformerOptions{Node: e.node.Name}),
				Holders:   &live.Holders{Client: client},
				Client:    client,
			},
			table,
		},
		Rules:    rules,
		Remedies: rems,
		Metrics:  m,
		Log:      slog.New(slog.NewTextHandler(&lockedWriter{w: &logs, mu: &logMu}, nil)),
	})
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil && ctx.Err() == nil {
			t.Errorf("agent: %v", err)
		}
		sub.Close()
		conn.Close()
	})
	e.eventually(t, time.Minute, "the agent's first complete audit", func() bool {
		st := a.Status()
		return !st.LastAudit.IsZero() && st.Degraded == ""
	})
	return m, &logs
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// rollingReplacements runs the agent with o while a Service of o.replicas
// pods is rolled o.replacements times under client traffic, and judges
// every delete the agent made.
func rollingReplacements(t *testing.T, o rollingOptions) rollingResult {
	t.Helper()
	mode := o.mode
	if mode == "" {
		mode = controlplane.ProxyIPTables
	}
	e := newRealEnvWith(t, mode, controlplane.Options{MaxEndpointsPerSlice: o.maxPerSlice},
		netbed.NodeOptions{ConntrackTimestamp: true})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ledger := watchPods(ctx, e.cp.Admin)
	const ns, app = "web", "api"
	e.service(t, ns, app, 30080)
	var live []string
	for i := range o.replicas {
		name := fmt.Sprintf("%s-%d", app, i)
		e.pod(t, ns, name, app, netip.Addr{}, 1)
		live = append(live, name)
	}
	var dl deleteLog
	m, logs := e.rollingAgent(t, ctx, o, &dl)

	// Traffic from outside the node to the NodePort: pooled keep-alive
	// clients, whose connections outlive their pods, and a client opening
	// a new connection every 20ms, whose flows reach each new pod (and each
	// reused IP) as soon as kube-proxy routes to it.
	host, err := e.bed.AddHost("client", e.node.Net, hostPfx(realClientIP))
	if err != nil {
		t.Fatal(err)
	}
	fe := netip.AddrPortFrom(realNodeIP, 30080)
	var res rollingResult
	var clients []*client
	var wg sync.WaitGroup
	var answered sync.Map // pod names that answered a new connection
	for range 8 {
		c := keepAlive(ctx, host, fe)
		clients = append(clients, c)
	}
	wg.Go(func() {
		tick := time.NewTicker(20 * time.Millisecond)
		defer tick.Stop()
		for ctx.Err() == nil {
			dctx, dcancel := context.WithTimeout(ctx, 300*time.Millisecond)
			if c, err := host.Dial(dctx, "tcp", "", fe.String()); err == nil {
				atomic.AddInt64(&res.connections, 1)
				c.SetDeadline(time.Now().Add(300 * time.Millisecond))
				if _, err := c.Write([]byte("GET\n")); err == nil {
					if line, err := bufio.NewReader(c).ReadString('\n'); err == nil {
						answered.Store(strings.TrimSpace(line), true)
					}
				}
				c.Close()
			}
			dcancel()
			select {
			case <-ctx.Done():
			case <-tick.C:
			}
		}
	})

	next := o.replicas
	for res.replacements < o.replacements {
		ip, reuse := ledger.freed(e.kubelet)
		name := fmt.Sprintf("%s-%d", app, next)
		next++
		e.pod(t, ns, name, app, ip, 1)
		// As a rolling update goes on once the new pod is ready, and here
		// once it takes traffic: kube-proxy routes to it.
		e.eventually(t, 30*time.Second, name+" answering through the NodePort", func() bool {
			_, ok := answered.Load(name)
			return ok
		})
		if reuse {
			res.reusedIPs++
		}
		old := live[0]
		live = append(live[1:], name)
		if err := e.api.CoreV1().Pods(ns).Delete(ctx, old, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		res.replacements++
		if res.replacements%25 == 0 {
			t.Logf("%d of %d replacements", res.replacements, o.replacements)
		}
	}
	// Every pod replaced is gone; wait until no established connection
	// opened to a deleted pod is left in the table (closing and unanswered
	// entries expire on their own within seconds).
	e.eventually(t, time.Minute, "every replaced pod gone", func() bool {
		pods, err := e.api.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		return err == nil && len(pods.Items) == o.replicas
	})
	var left []snapshot.Flow
	e.eventually(t, o.grace+time.Minute, "no established flow to a deleted pod left in the table", func() bool {
		left = left[:0]
		for _, f := range e.dnatFlows(t) {
			if p, ok := ledger.owner(&f); ok && !p.deletedAt.IsZero() && f.State == "ESTABLISHED" {
				left = append(left, f)
			}
		}
		return len(left) == 0
	})
	cancel()
	wg.Wait()
	for _, c := range clients {
		for _, out := range c.since(0) {
			if out.Reconnected {
				res.connections++
			}
			if out.Err != nil {
				res.failures++
			}
		}
	}

	dl.mu.Lock()
	defer dl.mu.Unlock()
	for _, d := range dl.deletes {
		p, ok := ledger.owner(&d.flow)
		switch {
		case d.flow.Start.IsZero() || !ok:
			res.unattributed = append(res.unattributed, fmt.Sprintf("%s to %s (started %s) deleted at %s",
				&d.flow, d.flow.Backend(), d.flow.Start.Format(time.StampMilli), d.at.Format(time.StampMilli)))
		case p.deletedAt.IsZero() || d.at.Before(p.deletedAt):
			res.healthy = append(res.healthy, fmt.Sprintf("%s to %s/%s at %s (started %s, pod given the IP %s, deleted %s) deleted at %s",
				&d.flow, p.ns, p.name, d.flow.Backend(), d.flow.Start.Format(time.StampMilli), p.ipAt.Format(time.StampMilli),
				p.deletedAt.Format(time.StampMilli), d.at.Format(time.StampMilli)))
		default:
			res.ghostDeletes++
			res.clear = append(res.clear, d.at.Sub(p.deletedAt))
		}
	}
	for _, r := range rule.InScope(rule.All(rule.Config{}), rule.ScopeNode) {
		id := r.Info().ID
		res.done += testutil.ToFloat64(m.RemedyActions.WithLabelValues(id, string(remedy.Done)))
		res.refused += testutil.ToFloat64(m.RemedyActions.WithLabelValues(id, string(remedy.Refused)))
	}
	sc := bufio.NewScanner(strings.NewReader(logs.String()))
	for sc.Scan() && len(res.refusals) < 5 {
		if strings.Contains(sc.Text(), "result=refused") {
			res.refusals = append(res.refusals, sc.Text())
		}
	}
	return res
}

// dnatFlows are the node's DNATed conntrack entries.
func (e *realEnv) dnatFlows(t *testing.T) []snapshot.Flow {
	t.Helper()
	var out []snapshot.Flow
	err := e.node.Net.Do(func() error {
		c, err := conntrack.Open()
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Dump(context.Background(), func(f *snapshot.Flow) error {
			if f.DNAT() {
				out = append(out, *f)
			}
			return nil
		})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// The agent as the DaemonSet ships it (default grace, default budget,
// every remedy on) through a rolling update on the real control plane: it
// deletes the flows of the pods replaced, and no flow of a pod that still
// exists, though IPs are handed straight to the next pod and endpoints move
// between EndpointSlices.
func TestRealRollingUpdateDeletesOnlyGhosts(t *testing.T) {
	for _, mode := range proxyModes {
		t.Run(string(mode), func(t *testing.T) { testRealRollingUpdateDeletesOnlyGhosts(t, mode) })
	}
}

// testRealRollingUpdateDeletesOnlyGhosts is TestRealRollingUpdateDeletesOnlyGhosts
// in one kube-proxy mode.
func testRealRollingUpdateDeletesOnlyGhosts(t *testing.T, mode controlplane.ProxyMode) {
	res := rollingReplacements(t, rollingOptions{
		mode:         mode,
		replacements: 10, replicas: 4, maxPerSlice: 2,
		grace: remedy.DefaultGrace, budget: remedy.DefaultBudget,
	})
	t.Logf("defaults (grace %s, budget %d ghost IPs per %s): %s", remedy.DefaultGrace, remedy.DefaultBudget, remedy.DefaultBudgetInterval, res)
	if res.reusedIPs == 0 {
		t.Errorf("no replacement reused a freed IP: the run did not test IP reuse")
	}
	if res.ghostDeletes == 0 {
		t.Errorf("the agent deleted no ghost flow in %d replacements", res.replacements)
	}
	if len(res.healthy) > 0 {
		t.Errorf("the agent deleted %d flows whose pod still existed:\n%s", len(res.healthy), strings.Join(res.healthy, "\n"))
	}
	if len(res.unattributed) > 0 {
		t.Errorf("%d deleted flows could not be judged:\n%s", len(res.unattributed), strings.Join(res.unattributed, "\n"))
	}
}

// GraceSweepEnv asks for the grace-period measurement docs/agent.md
// reports: a comma-separated list of grace periods, each run with
// GraceReplacementsEnv replacements (default 200), with the agent's
// re-check against the API server and, when GraceCacheOnlyEnv is set,
// without it. scripts/measure-grace.sh runs it.
const (
	graceSweepEnv        = "GHOSTWATCH_GRACE_SWEEP"
	graceReplacementsEnv = "GHOSTWATCH_GRACE_REPLACEMENTS"
	graceCacheOnlyEnv    = "GHOSTWATCH_GRACE_CACHE_ONLY"
)

// TestGraceSweep measures, for each grace period asked, how many healthy
// flows the agent deletes over many rolling replacements. It is a
// measurement, not a test of the suite: it runs only when asked.
func TestGraceSweep(t *testing.T) {
	list := os.Getenv(graceSweepEnv)
	if list == "" {
		t.Skipf("a measurement of several minutes per grace period: set %s (e.g. 0s,100ms,1s) or run scripts/measure-grace.sh", graceSweepEnv)
	}
	n := 200
	if s := os.Getenv(graceReplacementsEnv); s != "" {
		var err error
		if n, err = strconv.Atoi(s); err != nil || n <= 0 {
			t.Fatalf("%s=%q: want a positive count", graceReplacementsEnv, s)
		}
	}
	modes := []bool{false}
	if ok, _ := strconv.ParseBool(os.Getenv(graceCacheOnlyEnv)); ok {
		modes = append(modes, true)
	}
	for _, s := range strings.Split(list, ",") {
		grace, err := time.ParseDuration(strings.TrimSpace(s))
		if err != nil || grace < 0 {
			t.Fatalf("%s: %q is not a duration", graceSweepEnv, s)
		}
		for _, cacheOnly := range modes {
			mode := "quorum re-check"
			if cacheOnly {
				mode = "no re-check"
			}
			t.Run(fmt.Sprintf("%s/%s", grace, strings.ReplaceAll(mode, " ", "-")), func(t *testing.T) {
				// The budget is raised so that it never hides a delete the
				// grace period would allow; everything else is as shipped.
				res := rollingReplacements(t, rollingOptions{
					replacements: n, replicas: 4, maxPerSlice: 2,
					grace: grace, budget: 100000, cacheOnly: cacheOnly,
				})
				t.Logf("grace-sweep row: grace=%s mode=%q healthy=%d ghosts=%d unattributed=%d refused=%.0f done=%.0f clear_p50=%s clear_max=%s replacements=%d reused=%d connections=%d",
					grace, mode, len(res.healthy), res.ghostDeletes, len(res.unattributed), res.refused, res.done,
					percentile(res.clear, 0.5).Round(time.Millisecond), percentile(res.clear, 1).Round(time.Millisecond),
					res.replacements, res.reusedIPs, res.connections)
				for _, h := range res.healthy[:min(len(res.healthy), 5)] {
					t.Logf("healthy flow deleted: %s", h)
				}
				for _, r := range res.refusals {
					t.Logf("refused: %s", r)
				}
			})
		}
	}
}
