package realnode

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/ghostwatch/ghostwatch/internal/poll"
	"github.com/ghostwatch/ghostwatch/lab/controlplane"
	"github.com/ghostwatch/ghostwatch/lab/keepalive"
	"github.com/ghostwatch/ghostwatch/remedy"
)

// The error window sweep: how long a keep-alive client outside the node
// fails when the one replica it talks to is replaced and its goodbye is
// lost, with the chart as it ships (stale-nat-flow on). It is a
// measurement, not a test of the suite: it runs only when asked
// (scripts/measure-window.sh).
const (
	// sweepEnv: how many replacements, in all.
	sweepEnv = "GHOSTWATCH_REAL_SWEEP"
	// sweepModeEnv: kube-proxy's mode, iptables (default) or nftables.
	sweepModeEnv = "GHOSTWATCH_REAL_SWEEP_MODE"
	// sweepGraceEnv: the agent's --grace; empty: the chart's default.
	sweepGraceEnv = "GHOSTWATCH_REAL_SWEEP_GRACE"
	// sweepLanesEnv: how many Deployments are replaced side by side
	// (default 3: some 16 ghosts a minute at the shipped grace, under the
	// shipped budget of 20; a shorter grace replaces faster, and more
	// lanes than the budget allows measure the budget instead).
	sweepLanesEnv = "GHOSTWATCH_REAL_SWEEP_LANES"
	// sweepBudgetEnv: the agent's --budget (ghost IPs a minute); empty:
	// the chart's default. Raised, it never holds a delete back, and
	// lanes replace as fast as they can.
	sweepBudgetEnv = "GHOSTWATCH_REAL_SWEEP_BUDGET"
)

// TestErrorWindowSweep replaces, again and again, the one replica of each
// of several Deployments behind NodePorts of the real node, each with a
// keep-alive client outside the node. Before each replacement the node
// drops the old pod's FIN and RST segments, as a lost link would: the
// client's connection is left translated to the old pod, and only the
// agent's delete of that flow lets its next retransmission reach the new
// replica, which resets it. For each replacement it logs the time from
// the old pod's deletion in the API to the agent's delete of its flow and
// to the client's first answer from the new replica; at the end, every
// flow the agent deleted is judged against the pods' lives: one whose
// backend address a pod held at that moment was a healthy flow.
func TestErrorWindowSweep(t *testing.T) {
	total, err := strconv.Atoi(os.Getenv(sweepEnv))
	if os.Getenv(sweepEnv) == "" {
		t.Skipf("a measurement of minutes to hours: set %s to a count of replacements, or run scripts/measure-window.sh", sweepEnv)
	}
	if err != nil || total <= 0 {
		t.Fatalf("%s=%q: want a positive count", sweepEnv, os.Getenv(sweepEnv))
	}
	lanes := 3
	if s := os.Getenv(sweepLanesEnv); s != "" {
		if lanes, err = strconv.Atoi(s); err != nil || lanes <= 0 || lanes > 20 {
			t.Fatalf("%s=%q: want 1 to 20", sweepLanesEnv, s)
		}
	}
	opts := []labOption{withReleaseImage}
	switch m := os.Getenv(sweepModeEnv); m {
	case "", "iptables":
	case "nftables":
		opts = append(opts, withNFTables)
	default:
		t.Fatalf("%s=%q: want iptables or nftables", sweepModeEnv, m)
	}
	l := startLab(t, opts...)
	values := l.chartValues() + "  remedies: [stale-nat-flow]\n"
	var args []string
	if g := os.Getenv(sweepGraceEnv); g != "" {
		switch d, err := time.ParseDuration(g); {
		case err != nil:
			t.Fatalf("%s=%q: %v", sweepGraceEnv, g, err)
		case d < remedy.MinGrace:
			t.Fatalf("%s=%q: the agent refuses a grace under %s", sweepGraceEnv, g, remedy.MinGrace)
		}
		args = append(args, "--grace="+g)
	}
	budget := os.Getenv(sweepBudgetEnv)
	if budget != "" {
		if n, err := strconv.Atoi(budget); err != nil || n <= 0 {
			t.Fatalf("%s=%q: want a positive count", sweepBudgetEnv, budget)
		}
		args = append(args, "--budget="+budget)
	} else {
		budget = strconv.Itoa(remedy.DefaultBudget) // the chart sets none
	}
	if len(args) > 0 {
		values += "  extraArgs: [" + strings.Join(args, ", ") + "]\n"
	}
	l.install(t, values)
	lives := l.watchPods(t)

	ctx, stop := context.WithCancel(context.Background())
	var clients sync.WaitGroup
	defer func() { stop(); clients.Wait() }()
	var (
		mu      sync.Mutex
		done    int
		results []replacement
	)
	// Each lane a parallel subtest of one group, which returns when every
	// lane has: a lane that fails stops the others at their next turn.
	t.Run("lanes", func(group *testing.T) {
		next := func() bool {
			mu.Lock()
			defer mu.Unlock()
			if done >= total || group.Failed() {
				return false
			}
			done++
			return true
		}
		for k := range lanes {
			name := fmt.Sprintf("api-%d", k)
			l.deployment(group, name, 1, shortGrace)
			// The clients' source kept (Local): with Cluster, kube-proxy
			// masquerades them to the pod's own interface, and the kernel
			// forgets every flow masqueraded through an interface when it
			// goes, the old pod's with it.
			port := l.nodePort(group, name, func(s *corev1.ServiceSpec) {
				s.ExternalTrafficPolicy = corev1.ServiceExternalTrafficPolicyLocal
			})
			host, err := l.bed.AddHost(fmt.Sprintf("client-%d", k), l.node.Net, netip.PrefixFrom(netip.AddrFrom4([4]byte{203, 0, 113, byte(10 + k)}), 32))
			if err != nil {
				group.Fatal(err)
			}
			to := netip.AddrPortFrom(l.node.IP, port).String()
			log := &laneLog{}
			ka := &keepalive.Client{Host: name, Dial: func(ctx context.Context) (net.Conn, error) { return host.Dial(ctx, "tcp", "", to) },
				OnOutcome: log.add}
			clients.Go(func() { ka.Run(ctx, 100*time.Millisecond) })
			group.Run(name, func(t *testing.T) {
				t.Parallel()
				for i := 0; next(); i++ {
					r := l.replace(t, name, i, log, lives)
					if i < 2 {
						t.Log(r.story)
					}
					mu.Lock()
					results = append(results, r)
					if n := len(results); n%25 == 0 || n == total {
						t.Logf("%d of %d replacements", n, total)
					}
					mu.Unlock()
				}
			})
		}
	})
	if t.Failed() {
		return
	}

	deletes := l.agentDeletes(t)
	healthy, ghosts := 0, 0
	for _, d := range deletes {
		if p := lives.holder(d.backend, d.at); p != "" {
			healthy++
			t.Errorf("healthy flow deleted at %s: its backend %s was pod %s's; the pods that held it: %s; the agent: %s",
				d.at.Format(time.RFC3339Nano), d.backend, p, lives.of(d.backend), d.line)
			continue
		}
		ghosts++
	}
	var toDelete, toAnswer, retransmit []time.Duration
	for i := range results {
		r := &results[i]
		// The agent may act a moment before the test's watch sees the
		// deletion: a pod whose containers all ended no longer holds its
		// address, and its object goes after.
		if d := firstDelete(deletes, r.oldIP, r.began); !d.IsZero() {
			toDelete = append(toDelete, d.Sub(r.deleted))
			retransmit = append(retransmit, r.answered.Sub(d))
		}
		toAnswer = append(toAnswer, r.answered.Sub(r.deleted))
		if g, err := time.ParseDuration(os.Getenv(sweepGraceEnv)); err == nil && r.answered.Sub(r.deleted) > g+time.Second {
			// Beyond the goal: what the client and the agent saw.
			t.Logf("answered %s after the deletion of the pod at %s: %s; the agent: %s", r.answered.Sub(r.deleted).Round(time.Millisecond),
				r.oldIP, r.story, linesFor(deletes, r.oldIP, r.began))
		}
	}
	mode := os.Getenv(sweepModeEnv)
	if mode == "" {
		mode = "iptables"
	}
	grace := os.Getenv(sweepGraceEnv)
	if grace == "" {
		grace = remedy.DefaultGrace.String() // the chart sets none
	}
	t.Logf("window-sweep row: mode=%s grace=%q budget=%q lanes=%d replacements=%d ghost_deletes=%d healthy_deletes=%d "+
		"deleted_to_flow_deleted_p50=%s deleted_to_flow_deleted_max=%s flow_deleted_to_answered_p50=%s flow_deleted_to_answered_max=%s "+
		"deleted_to_answered_p50=%s deleted_to_answered_p99=%s deleted_to_answered_max=%s",
		mode, grace, budget, lanes, len(results), ghosts, healthy,
		pct(toDelete, 0.5), pct(toDelete, 1), pct(retransmit, 0.5), pct(retransmit, 1), pct(toAnswer, 0.5), pct(toAnswer, 0.99), pct(toAnswer, 1))
	if len(toDelete) < len(results) {
		t.Errorf("the agent deleted the flows of %d of %d replaced pods", len(toDelete), len(results))
	}
}

// pct is the p-th percentile of ds, to the millisecond.
func pct(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[min(len(s)-1, int(p*float64(len(s))))].Round(time.Millisecond)
}

// install installs the chart with values and waits for its pods.
func (l *lab) install(t *testing.T, values string) {
	t.Helper()
	kubeconfig, err := l.cp.WriteKubeconfig(controlplane.UserAdmin)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := InstallChart(context.Background(), kubeconfig, "gw", "ghostwatch", values, t.Logf); err != nil {
		t.Fatal(err)
	}
	l.allReady(t, "ghostwatch", len(l.nodes)+2)
}

// replacement is what one replacement's client saw.
type replacement struct {
	oldIP netip.Addr
	// deleted is when the old pod was deleted from the API; answered,
	// when the client was first answered by the new one after it.
	deleted, answered time.Time
	// story is what the client saw.
	story string
	// began is when the replacement began, its goodbye dropped.
	began time.Time
}

// laneLog is what a lane's client saw, kept as it comes (its
// keepalive.Client.OnOutcome), read from where the lane left off.
type laneLog struct {
	mu  sync.Mutex
	log []keepalive.Outcome
}

func (l *laneLog) add(o keepalive.Outcome) {
	l.mu.Lock()
	l.log = append(l.log, o)
	l.mu.Unlock()
}

// find returns the first outcome at or after position *from that match
// says is the one, and moves *from past what it read.
func (l *laneLog) find(from *int, match func(keepalive.Outcome) bool) (keepalive.Outcome, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for ; *from < len(l.log); *from++ {
		if o := l.log[*from]; match(o) {
			return o, true
		}
	}
	return keepalive.Outcome{}, false
}

// replace replaces Deployment name's one replica (its i-th replacement)
// with the old pod's goodbye dropped, and returns once its client is
// answered by the new one.
func (l *lab) replace(t *testing.T, name string, i int, log *laneLog, lives *podLives) replacement {
	t.Helper()
	var r replacement
	old := l.onlyPod(t, name)
	r.oldIP = netip.MustParseAddr(old.Status.PodIP)
	since := time.Now()
	at := 0
	poll.Until(t, poll.Patience, "the client answered by "+old.Name, func() bool {
		_, ok := log.find(&at, func(o keepalive.Outcome) bool { return o.At.After(since) && o.Err == "" && o.Answer == old.Name })
		return ok
	})
	r.began = time.Now()
	drop := l.dropGoodbyes(r.oldIP)
	if err := drop("-I"); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := drop("-D"); err != nil {
			t.Error(err)
		}
	}()
	patch := fmt.Sprintf(`{"spec":{"template":{"metadata":{"annotations":{"lab.ghostwatch.io/replacement":"%d"}}}}}`, i)
	if _, err := l.cp.Admin.AppsV1().Deployments("default").Patch(context.Background(), name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, poll.Patience, old.Name+" deleted", func() bool {
		r.deleted = lives.deletedAt(old.Name)
		return !r.deleted.IsZero()
	})
	poll.Until(t, poll.Patience, "the client answered by a new replica", func() bool {
		o, ok := log.find(&at, func(o keepalive.Outcome) bool {
			return o.At.After(r.deleted) && o.Err == "" && o.Answer != old.Name && o.Answer != ""
		})
		r.answered = o.At
		return ok
	})
	{
		// What the client saw, from its last answer by the old pod on.
		log.mu.Lock()
		var seen keepalive.Log
		for _, o := range log.log {
			if o.At.After(since) && !o.At.After(r.answered) {
				seen = append(seen, o)
			}
		}
		log.mu.Unlock()
		r.story = fmt.Sprintf("%s replaced (%s), deleted at %s: %s", old.Name, r.oldIP, r.deleted.Format("15:04:05.000"), seen)
	}
	return r
}

// onlyPod waits for Deployment name's one Ready pod that is not being
// deleted.
func (l *lab) onlyPod(t *testing.T, name string) corev1.Pod {
	t.Helper()
	var p corev1.Pod
	poll.UntilNoted(t, poll.Patience, "one Ready pod of "+name, func() (bool, string) {
		list, err := l.cp.Admin.CoreV1().Pods("default").List(context.Background(), metav1.ListOptions{LabelSelector: "app=" + name})
		if err != nil {
			return false, err.Error()
		}
		if len(list.Items) != 1 || !ready(&list.Items[0]) || list.Items[0].DeletionTimestamp != nil {
			return false, l.pods(context.Background(), "default")
		}
		p = list.Items[0]
		return true, ""
	})
	return p
}

// dropGoodbyes returns what adds ("-I") or removes ("-D") the node's
// rules that drop the FIN and RST segments pod address ip sends, before
// conntrack sees them: its goodbye is lost, as with a link down.
func (l *lab) dropGoodbyes(ip netip.Addr) func(op string) error {
	return func(op string) error {
		for _, flag := range []string{"FIN", "RST"} {
			out, err := exec.Command("ip", "netns", "exec", l.node.Net.Name(), "iptables", "-w", "-t", "raw", op, "PREROUTING",
				"-s", ip.String()+"/32", "-p", "tcp", "--tcp-flags", flag, flag, "-j", "DROP").CombinedOutput()
			if err != nil {
				return fmt.Errorf("iptables %s: %v: %s", op, err, out)
			}
		}
		return nil
	}
}

// podLives is when each pod of default held its address, from a watch.
type podLives struct {
	mu   sync.Mutex
	pods map[string]*podLife
}

type podLife struct {
	ip       netip.Addr
	from, to time.Time // to: zero while it holds ip
	deleted  time.Time // when its object was deleted
}

// watchPods follows the pods of default until the test ends.
func (l *lab) watchPods(t *testing.T) *podLives {
	t.Helper()
	lives := &podLives{pods: map[string]*podLife{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		// A watch ends when the API server says (after half an hour or
		// so): the next goes on from the last version seen.
		rv := ""
		for ctx.Err() == nil {
			w, err := l.cp.Admin.CoreV1().Pods("default").Watch(ctx, metav1.ListOptions{ResourceVersion: rv})
			if err != nil {
				rv = ""
				time.Sleep(100 * time.Millisecond) // the API server is busy; ask again
				continue
			}
			for ev := range w.ResultChan() {
				p, ok := ev.Object.(*corev1.Pod)
				if !ok {
					rv = "" // an error: its version is gone; start from now
					continue
				}
				rv = p.ResourceVersion
				lives.saw(p, ev.Type == watch.Deleted)
			}
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return lives
}

// saw notes what the watch said of p.
func (pl *podLives) saw(p *corev1.Pod, deleted bool) {
	now := time.Now()
	pl.mu.Lock()
	defer pl.mu.Unlock()
	life := pl.pods[p.Name]
	if life == nil && p.Status.PodIP != "" {
		life = &podLife{ip: netip.MustParseAddr(p.Status.PodIP), from: now}
		pl.pods[p.Name] = life
	}
	// A pod stops holding its address when its containers have ended
	// (a terminal phase, which the kubelet sets before the object goes)
	// or when it is deleted, as Kubernetes and the agent count it.
	terminal := p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
	if life != nil && (deleted || terminal) && life.to.IsZero() {
		life.to = now
	}
	if life != nil && deleted && life.deleted.IsZero() {
		life.deleted = now
	}
}

// of describes the pods that held ip: each name and when it held it.
func (pl *podLives) of(ip netip.Addr) string {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	var out []string
	for name, life := range pl.pods {
		if life.ip == ip {
			to, gone := "now", ""
			if !life.to.IsZero() {
				to = life.to.Format("15:04:05.000")
			}
			if !life.deleted.IsZero() {
				gone = " (deleted " + life.deleted.Format("15:04:05.000") + ")"
			}
			out = append(out, fmt.Sprintf("%s %s–%s%s", name, life.from.Format("15:04:05.000"), to, gone))
		}
	}
	slices.Sort(out)
	return strings.Join(out, ", ")
}

// deletedAt is when pod name was deleted; zero until it is.
func (pl *podLives) deletedAt(name string) time.Time {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	if life := pl.pods[name]; life != nil {
		return life.deleted
	}
	return time.Time{}
}

// holder names the pod that held ip at t, "" when none did. A pod holds
// its address from when the watch first saw it until it saw it terminal
// or deleted.
func (pl *podLives) holder(ip netip.Addr, at time.Time) string {
	pl.mu.Lock()
	defer pl.mu.Unlock()
	for name, life := range pl.pods {
		if life.ip == ip && !at.Before(life.from) && (life.to.IsZero() || at.Before(life.to)) {
			return name
		}
	}
	return ""
}

// agentDelete is one flow deletion the agent logged.
type agentDelete struct {
	at      time.Time
	backend netip.Addr
	line    string // the agent's log line
}

var dnatTo = regexp.MustCompile(`DNAT to ([0-9a-f.:]+?):[0-9]+[,)]`)

// agentDeletes reads the stale flows the node's agent deleted from its
// log: one JSON line per remedy action.
func (l *lab) agentDeletes(t *testing.T) []agentDelete {
	t.Helper()
	var out []agentDelete
	for line := range strings.Lines(l.node.LogTail("ghostwatch", 1<<30)) {
		i := strings.IndexByte(line, '{')
		if i < 0 || !strings.Contains(line, `"msg":"remedy"`) {
			continue
		}
		var rec struct {
			Time   time.Time `json:"time"`
			Result string    `json:"result"`
			Target string    `json:"target"`
		}
		if err := json.Unmarshal([]byte(line[i:]), &rec); err != nil || rec.Result != "done" {
			continue
		}
		m := dnatTo.FindStringSubmatch(rec.Target)
		if m == nil {
			t.Errorf("a deletion that names no backend: %s", line)
			continue
		}
		out = append(out, agentDelete{at: rec.Time, backend: netip.MustParseAddr(m[1]), line: strings.TrimSpace(line[i:])})
	}
	return out
}

// linesFor are the agent's lines of its deletes of flows to backend after
// from.
func linesFor(ds []agentDelete, backend netip.Addr, from time.Time) string {
	var out []string
	for _, d := range ds {
		if d.backend == backend && d.at.After(from) {
			out = append(out, d.line)
		}
	}
	return strings.Join(out, "; ")
}

// firstDelete is when the agent first deleted a flow to backend after
// from; zero when it did not.
func firstDelete(ds []agentDelete, backend netip.Addr, from time.Time) time.Time {
	var first time.Time
	for _, d := range ds {
		if d.backend == backend && d.at.After(from) && (first.IsZero() || d.at.Before(first)) {
			first = d.at
		}
	}
	return first
}
