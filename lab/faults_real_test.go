package lab

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ghostwatch/ghostwatch/internal/poll"
	"github.com/ghostwatch/ghostwatch/internal/serftest"
	"github.com/ghostwatch/ghostwatch/internal/testenv"
	"github.com/ghostwatch/ghostwatch/lab/cni"
	"github.com/ghostwatch/ghostwatch/lab/controlplane"
	"github.com/ghostwatch/ghostwatch/lab/netbed"
	"github.com/ghostwatch/ghostwatch/snapshot"
)

// TestRealFaults plays the fault matrix (faultCells): each remedy under
// each fault it can meet, on one real control plane and one node (its
// kube-proxy, its conntrack table, host-local's store under the agent's
// host root) and a real Serf cluster, with the ghostwatch binary's agent
// and two controller replicas running throughout. For each fault a ghost
// of each remedy is made (a flow to a deleted pod, reservations wiped under
// running pods, a member outliving its pod) beside healthy neighbours, and
// the fault is injected and lifted; each cell asserts that no action was
// wrongful (counted from the binaries' metrics, and the neighbours still
// there) and that /readyz told the truth, and measures how soon. With
// -update it writes docs/faults.md from the run.
func TestRealFaults(t *testing.T) {
	f := newFaultLab(t)
	all := true
	for _, ph := range f.phases() {
		ran := false
		t.Run(ph.name, func(t *testing.T) {
			ran = true
			defer func() {
				if t.Failed() {
					f.logTails(t)
				}
			}()
			f.settle(t)
			ph.run(t)
		})
		all = all && ran
	}
	f.publish(t, all)
}

// logTails logs the end of the agent's and the controller replicas' logs.
func (f *faultLab) logTails(t *testing.T) {
	for _, d := range append([]*daemon{f.agent}, f.ctrl[:]...) {
		if d != nil {
			t.Logf("%s log ends:\n%s", d.name, tail(d.logs.String(), 30))
		}
	}
}

// The settings the binaries run with (docs/faults.md quotes them).
var (
	faultGraceDur = mustDuration(faultGrace)
	faultAudit    = mustDuration(faultAuditInterval)
)

func mustDuration(s string) time.Duration {
	d, err := time.ParseDuration(s)
	if err != nil {
		panic(err)
	}
	return d
}

// Where the agent serves its probes and metrics, in node-1.
const faultAgentListen = "127.0.0.1:9808"

// faultLab is the matrix's one world.
type faultLab struct {
	// top is the test itself: what lives across phases is stopped when it
	// ends, not when the phase that made it does.
	top *testing.T
	e   *realEnv
	// app is a client host in node-1 that pools connections through the
	// Service web/api, whose frontend is fe.
	app *netbed.Host
	fe  netip.AddrPort
	// controls are pooled connections to live backends: every cell ends
	// with each still translated and answered by its pod.
	controls []*pooled

	agent     *daemon
	agentArgs []string
	// agentHTTP asks the agent, in node-1, on connections it keeps.
	agentHTTP  *http.Client
	agentPipe  *pipe
	agentReady *readyLog

	ctrl      [2]*daemon
	ctrlPipe  [2]*pipe
	ctrlURL   [2]string
	ctrlReady [2]*readyLog

	hl     *nodeStore
	gossip *serfCluster

	mu      sync.Mutex
	results map[int]cellResult
	names   map[string]int
	// leftovers are the ghosts the phase made, for settle to wait out.
	leftovers []leftover
}

// leftover is a ghost a phase made: resolved once ghostwatch has dealt
// with it; clear, when set, removes it if ghostwatch does not.
type leftover struct {
	resolved func(*testing.T) bool
	clear    func(*testing.T)
}

// cellResult is what a cell measured: the columns of docs/faults.md.
type cellResult struct {
	wrongful int
	ready    string
	figures  string
}

func newFaultLab(t *testing.T) *faultLab {
	t.Helper()
	hlBin, err := cni.FindHostLocal()
	if errors.Is(err, cni.ErrNoBinary) {
		testenv.Unavailable(t, err.Error())
	}
	if err != nil {
		t.Fatal(err)
	}
	e := newRealEnv(t, controlplane.ProxyIPTables)
	e.installController(t)
	f := &faultLab{top: t, e: e, results: map[int]cellResult{}, names: map[string]int{}}
	ctx := context.Background()

	// Service web/api with two live backends, each with a pooled
	// connection from app: the flows every cell must leave alone.
	svc := e.service(t, "web", "api", 0)
	f.fe = netip.AddrPortFrom(netip.MustParseAddr(svc.Spec.ClusterIP), 80)
	if f.app, err = e.bed.AddHost("app", e.node.Net, hostPfx(netip.MustParseAddr("10.244.7.250"))); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"live-0", "live-1"} {
		e.pod(t, "web", name, "api", netip.Addr{}, 0)
	}
	for _, name := range []string{"live-0", "live-1"} {
		f.controls = append(f.controls, f.pool(t, name))
	}
	for _, ns := range []string{"batch", "tenant", "apps", "gossip"} {
		if _, err := e.api.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}

	// host-local's store under the agent's host root, three pods on it.
	f.hl = newNodeStore(t, filepath.Dir(hlBin))
	for range 3 {
		f.hl.start(t, f)
	}

	// The agent, every remedy on, its API server behind a pipe in node-1.
	ln, err := e.node.Net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.agentPipe = newPipe(t, ln, fmt.Sprintf("127.0.0.1:%d", e.cp.Port))
	kubeconfig, err := e.cp.WriteKubeconfigFor(controlplane.UserAgent, "https://"+ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	f.agentArgs = []string{"ip", "netns", "exec", e.node.Net.Name(), ghostwatchBinary(t), "agent",
		"--kubeconfig=" + kubeconfig, "--node-name=" + e.node.Name, "--listen=" + faultAgentListen, "--address-listen=",
		"--log-format=text", "--audit-interval=" + faultAuditInterval, "--grace=" + faultGrace,
		"--remedy=" + remedyFlow + "," + remedyHost, "--host-root=" + f.hl.root}
	f.agent = newDaemon(t, "agent", f.agentArgs)
	f.agent.start(t)
	f.agentHTTP = e.node.Net.HTTPClient(2 * time.Second)
	f.agentReady = watchReady(t, e.node.Net.HTTPClient(time.Second), "http://"+faultAgentListen+"/readyz")

	// The Serf cluster the controller reads, and both replicas, each
	// behind a pipe of its own.
	f.gossip = newGossipLab(t, f)
	clusters := filepath.Join(t.TempDir(), "gossip-clusters.yaml")
	if err := os.WriteFile(clusters, []byte("clusters:\n- {system: serf, namespace: gossip, allowPlaintextCredentials: true}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for i := range f.ctrl {
		f.ctrl[i] = f.controller(t, i, clusters, "ghostwatch-controller", "--budget=100")
	}
	f.settle(t)
	return f
}

// controller starts replica i of the controller, its API server behind
// f.ctrlPipe[i], on lease; it runs until the test ends (or is stopped).
func (f *faultLab) controller(t *testing.T, i int, clusters, lease string, extra ...string) *daemon {
	t.Helper()
	top := f.top
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f.ctrlPipe[i] = newPipe(top, ln, fmt.Sprintf("127.0.0.1:%d", f.e.cp.Port))
	kubeconfig, err := f.e.cp.WriteKubeconfigFor(controlplane.UserController, "https://"+ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	listen := loopbackPort(t)
	f.ctrlURL[i] = "http://" + listen
	d := newDaemon(top, fmt.Sprintf("controller-%d", i), append([]string{ghostwatchBinary(t), "controller",
		"--kubeconfig=" + kubeconfig, fmt.Sprintf("--identity=faults-%d", i), "--lease-namespace=ghostwatch", "--lease-name=" + lease,
		"--listen=" + listen, "--history-listen=", "--log-format=text",
		"--remedy=" + remedyGossip, "--grace=" + faultGrace, "--gossip-interval=1s", "--gossip-clusters=" + clusters}, extra...))
	d.start(t)
	f.ctrlReady[i] = watchReady(top, &http.Client{Timeout: time.Second}, f.ctrlURL[i]+"/readyz")
	return d
}

// settle waits until the agent is ready, a controller replica leads and
// the other stands by, every control flow is answered, and the ghosts an
// earlier phase left (one that failed midway) are gone: where each phase
// starts, so that no cell counts another's actions.
func (f *faultLab) settle(t *testing.T) {
	t.Helper()
	for _, l := range f.leftovers {
		if _, ok := within(poll.Patience, func() bool { return l.resolved(t) }); !ok && l.clear != nil {
			l.clear(t)
		}
	}
	f.leftovers = nil
	poll.UntilNoted(t, poll.Patience, "the agent ready and a controller replica leading", func() (bool, string) {
		a := f.agentReady.last()
		lead := false
		var notes []string
		for i, l := range f.ctrlReady {
			if f.ctrl[i] == nil || !f.ctrl[i].running() {
				continue
			}
			s := l.last()
			lead = lead || s.code == http.StatusOK && strings.HasPrefix(s.body, "ok: leading")
			notes = append(notes, fmt.Sprintf("controller-%d %d %s", i, s.code, s.body))
		}
		return a.code == http.StatusOK && lead, fmt.Sprintf("agent %d %s; %s", a.code, a.body, strings.Join(notes, "; "))
	})
	f.checkControls(t)
}

// phase is one fault, injected once for the cells that share it.
type phase struct {
	name string
	run  func(t *testing.T)
}

func (f *faultLab) phases() []phase {
	return []phase{
		{"reference", f.reference},
		{"apiserver-down", func(t *testing.T) {
			f.outage(t, "API server down", true, func(t *testing.T) {
				if err := f.e.cp.StopAPIServer(); err != nil {
					t.Fatal(err)
				}
			}, func(t *testing.T) {
				if err := f.e.cp.StartAPIServer(context.Background()); err != nil {
					t.Fatal(err)
				}
			})
		}},
		{"apiserver-hung", func(t *testing.T) {
			f.outage(t, "API server hung", true, func(t *testing.T) {
				if err := f.e.cp.PauseAPIServer(); err != nil {
					t.Fatal(err)
				}
			}, func(t *testing.T) {
				if err := f.e.cp.ResumeAPIServer(); err != nil {
					t.Fatal(err)
				}
			})
		}},
		{"apiserver-restarted", func(t *testing.T) {
			f.outage(t, "API server restarted", false, func(t *testing.T) {
				if err := f.e.cp.StopAPIServer(); err != nil {
					t.Fatal(err)
				}
				if err := f.e.cp.StartAPIServer(context.Background()); err != nil {
					t.Fatal(err)
				}
			}, func(*testing.T) {})
		}},
		{"watch-gap", f.watchGap},
		{"clock-skew", f.clockSkew},
		{"shared-address", f.sharedAddress},
		{"conntrack-full", f.conntrackFull},
		{"events-lost", f.eventsLost},
		{"over-budget", f.overBudget},
		{"dead-backends", f.deadBackends},
		{"cilium-impersonated", f.ciliumImpersonated},
		{"named-pipe", f.namedPipe},
		{"linked-data-dir", f.linkedDataDir},
		{"foreign-namespace", f.foreignNamespace},
		{"alive-again", f.aliveAgain},
		{"leader-failover", f.leaderFailover},
	}
}

// wipe wipes host-local's store under its running pods (nodeStore.wipe),
// a ghost for settle to wait out.
func (f *faultLab) wipe(t *testing.T) {
	t.Helper()
	f.hl.wipe(t)
	f.leftovers = append(f.leftovers, f.hl.wiped())
}

// cell is one row of the matrix as its phase plays it: what it found
// wrong, its wrongful actions among them, and the remedy's actions counted
// from its start.
type cell struct {
	t        *testing.T // the phase's
	f        *faultLab
	index    int
	remedy   string
	start    time.Time
	before   tally
	problems []string
	wrongful int
	// ghosts are the dead backends of a stale-nat-flow cell: the only
	// addresses whose flows it may delete.
	ghosts []netip.Addr
}

// cell starts the cell of remedy under fault; its actions count from now.
func (f *faultLab) cell(t *testing.T, fault, remedy string) *cell {
	t.Helper()
	i := slices.IndexFunc(faultCells, func(c faultCell) bool { return c.Fault == fault && c.Remedy == remedy })
	if i < 0 {
		t.Fatalf("no cell %s under %q in faultCells", remedy, fault)
	}
	return &cell{t: t, f: f, index: i, remedy: remedy, start: time.Now(), before: f.tally(remedy)}
}

// Errorf records something the cell found wrong.
func (c *cell) Errorf(format string, args ...any) {
	c.problems = append(c.problems, fmt.Sprintf(format, args...))
}

// wrong records n wrongful actions, and why.
func (c *cell) wrong(n int, format string, args ...any) {
	if n > 0 {
		c.wrongful += n
		c.Errorf(format, args...)
	}
}

// actions is what the remedy did since the cell began.
func (c *cell) actions() tally { return c.f.tally(c.remedy).minus(c.before) }

// expect checks the cell's actions: none failed, want done (each one
// beyond is wrongful). For stale-nat-flow, whose actions are counted by
// the groups of flows it judged alike (a dead backend's established
// flows, and those its clients were closing, may be two), it checks the
// flows it deleted instead, as its log names them: each to one of the
// cell's ghosts (any other is wrongful), and, unless want is 0, every
// ghost's.
func (c *cell) expect(want int) tally {
	d := c.actions()
	if c.remedy != remedyFlow && int(d.done) < want {
		// What the remedy acted on can show (a member gone from the
		// survivor's list) before the replica counts the action, and a
		// scrape a loaded machine answers late reads as none: wait for
		// the count as long as any wait, then judge it below.
		for deadline := time.Now().Add(poll.Patience); int(d.done) < want && time.Now().Before(deadline); {
			time.Sleep(50 * time.Millisecond)
			d = c.actions()
		}
	}
	if d.failed > 0 {
		c.Errorf("%v actions failed", d.failed)
	}
	if c.remedy == remedyFlow {
		deleted := c.f.flowsDeleted(c.t, c.start)
		for _, ip := range deleted {
			if !slices.Contains(c.ghosts, ip) {
				c.wrong(1, "deleted flows to %s, none of the cell's ghosts (%v)", ip, c.ghosts)
			}
		}
		for _, g := range c.ghosts {
			if want > 0 && !slices.Contains(deleted, g) {
				c.Errorf("no flow to the ghost %s deleted", g)
			}
		}
		return d
	}
	switch {
	case int(d.done) > want:
		c.wrong(int(d.done)-want, "%v actions done, the cell's ghosts call for %d", d.done, want)
	case int(d.done) < want:
		c.Errorf("%v actions done, want %d", d.done, want)
	}
	return d
}

// during checks that the remedy took no action while a fault held: from
// the cell's start to at, the tallies read as the fault was lifted.
func (c *cell) during(at tally) tally {
	d := at.minus(c.before)
	c.wrong(int(d.done), "%v actions while the fault held", d.done)
	return d
}

// spared checks what the remedy must leave alone: flows to live pods (the
// controls and keep), reservations for none but want, the live members.
func (c *cell) spared(keep []*pooled, want []hlPod) {
	f := c.f
	switch c.remedy {
	case remedyFlow:
		for _, p := range append(slices.Clone(f.controls), keep...) {
			if f.flowGone(c.t, p.ip) {
				c.wrong(1, "the flow to %s (%s), which a pod holds, was deleted", p.ip, p.pod)
			}
		}
	case remedyHost:
		if k := f.hl.wrongful(want); k > 0 {
			_, what := f.hl.holds(want)
			c.wrong(k, "%d reservations written that no running pod alone holds: %s", k, what)
		}
	case remedyGossip:
		if k, who := f.gossip.wrongful(); k > 0 {
			c.wrong(k, "live members no longer listed alive: %s", who)
		}
	}
}

// report keeps the cell's columns for docs/faults.md and judges it in a
// subtest of its own: what it found wrong fails it, unless the cell is a
// known failure (knownFailures) and every problem is the known one: it is
// then skipped, saying what was found. A known failure no longer found
// fails it, so that the matrix says what ghostwatch does now.
func (c *cell) report(ready, figures string) {
	fc := faultCells[c.index]
	c.t.Logf("cell %d, %s under %s: wrongful %d; /readyz: %s; %s", c.index+1, fc.Remedy, fc.Fault, c.wrongful, ready, figures)
	c.f.mu.Lock()
	c.f.results[c.index] = cellResult{wrongful: c.wrongful, ready: ready, figures: figures}
	c.f.mu.Unlock()
	c.t.Run(fmt.Sprintf("cell-%d-%s", c.index+1, fc.Remedy), func(t *testing.T) {
		known := fc.known()
		switch {
		case len(c.problems) > 0 && known.Why != "" && !slices.ContainsFunc(c.problems, func(p string) bool { return !strings.Contains(p, known.Match) }):
			t.Skipf("KNOWN FAILURE (%s): %s", known.Why, strings.Join(c.problems, "; "))
		case len(c.problems) > 0:
			for _, p := range c.problems {
				t.Error(p)
			}
		case known.Why != "":
			t.Errorf("known failure not found any more (%s): take it off knownFailures in lab/faults_test.go, say what ghostwatch does now, and run with -update", known.Why)
		}
	})
}

// publish logs the matrix as measured and, with -update, writes it to
// docs/faults.md, unless a cell failed or all were not played (-run
// chose some phases).
func (f *faultLab) publish(t *testing.T, all bool) {
	wrongful := make([]int, len(faultCells))
	figs := make([]faultFigures, len(faultCells))
	for i := range faultCells {
		r, ok := f.results[i]
		if !ok {
			if all {
				t.Errorf("cell %d (%s under %s) was not played", i+1, faultCells[i].Remedy, faultCells[i].Fault)
			}
			continue
		}
		wrongful[i], figs[i] = r.wrongful, faultFigures{Ready: r.ready, Figures: r.figures}
	}
	doc := renderFaults(wrongful, figs)
	t.Logf("the matrix as measured:\n%s", doc)
	if !*update {
		return
	}
	if t.Failed() || !all {
		t.Errorf("docs/faults.md not written: a cell failed, or -run left phases out")
		return
	}
	if err := os.WriteFile(faultsDoc(), []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
}

// tallies reads every remedy's actions.
func (f *faultLab) tallies() map[string]tally {
	return map[string]tally{remedyFlow: f.tally(remedyFlow), remedyHost: f.tally(remedyHost), remedyGossip: f.tally(remedyGossip)}
}

// leaderReady says what the controller replicas' /readyz answered from
// from on, the way steady does for one.
func (f *faultLab) leaderReady(from time.Time) string {
	var parts []string
	for i, l := range f.ctrlReady {
		if f.ctrl[i] == nil || !f.ctrl[i].running() {
			continue
		}
		s, _ := l.steady(from)
		parts = append(parts, fmt.Sprintf("replica %d: %s", i, s))
	}
	return strings.Join(parts, "; ")
}

// leaderMetrics is the metrics of the replica that leads now, or none.
func (f *faultLab) leaderMetrics() metricSet {
	for i, l := range f.ctrlReady {
		if f.ctrl[i] != nil && f.ctrl[i].running() && leading(l.last()) {
			return scrape(&http.Client{Timeout: 2 * time.Second}, f.ctrlURL[i]+"/metrics")
		}
	}
	return metricSet{}
}

// saidNotReady waits until each log says not ready after from; one that
// never does is an untruthful /readyz of the cells'.
func saidNotReady(cells []*cell, who string, from time.Time, logs ...*readyLog) {
	for _, l := range logs {
		if _, said := within(poll.Patience, func() bool { _, ok := l.first(from, notReady); return ok }); !said {
			for _, c := range cells {
				c.Errorf("untruthful /readyz: %s said ready throughout the fault (%s)", who, l.last())
			}
		}
	}
}

// flapped reports an answer of 200 in l between the first not-ready
// answer at or after from and until: ready again while the fault held.
func flapped(l *readyLog, from, until time.Time) (readyState, bool) {
	s, ok := l.first(from, notReady)
	if !ok {
		return readyState{}, false
	}
	for _, r := range l.from(s.at) {
		if r.at.After(s.at) && r.at.Before(until) && isReady(r) {
			return r, true
		}
	}
	return readyState{}, false
}

// ghosts are the ghosts an outage's cells make: a flow to a deleted pod,
// the store wiped under its running pods, a member outliving its pod.
type ghosts struct {
	flow   *pooled
	want   []hlPod
	member *memberGhost
}

// outage plays a fault of the API server: a ghost of each remedy made
// pending, the fault injected and held until ghostwatch said not ready
// (when held) and a grace period and an audit longer, then lifted. No
// remedy may act while it held. The agent must then act on its ghosts
// alone, and, where it said it was not ready, not sooner than a grace
// period after it was ready again: the fault started every grace period
// over. The controller's ghost goes as gossipAfter says.
func (f *faultLab) outage(t *testing.T, fault string, held bool, inject, lift func(*testing.T)) {
	g, cf, ch, cg := f.pendingGhosts(t, fault)

	t0 := time.Now()
	lifted := false
	defer func() {
		if !lifted {
			lift(t)
		}
	}()
	inject(t)
	if held {
		saidNotReady([]*cell{cf, ch}, "the agent", t0, f.agentReady)
		saidNotReady([]*cell{cg}, "a controller replica", t0, f.ctrlReady[:]...)
		// Held a grace period and an audit longer: a grace period the
		// fault did not start over would run out meanwhile.
		time.Sleep(faultGraceDur + faultAudit)
	}
	during := f.tallies()
	t1 := time.Now()
	lift(t)
	lifted = true

	at := waitEach(t, "1. the ghost's flow deleted, 2. the reservations written back",
		func() bool { return f.flowGone(t, g.flow.ip) }, func() bool { ok, _ := f.hl.holds(g.want); return ok })
	gr, gf := f.gossipAfter(cg, g.member, held, t0, t1)
	for i, c := range []*cell{cf, ch} {
		c.during(during[c.remedy])
		d := c.expect([]int{1, len(g.want)}[i])
		c.spared(nil, g.want)
		c.report(f.agentOutage(c, held, t0, t1, at[i]), fmt.Sprintf("fault held %s; acted %s after the lift%s (grace %s); %v done, %v refused",
			secs(t1.Sub(t0)), secs(at[i].Sub(t1)), f.sinceBack(t0, at[i]), faultGrace, d.done, d.refused))
	}
	cg.during(during[remedyGossip])
	cg.report(gr, fmt.Sprintf("fault held %s; %s", secs(t1.Sub(t0)), gf))
}

// setupAttempts bounds how often a cell makes its ghosts again when one
// was acted on before its fault came: the set-up outlasted a grace period
// (a loaded machine), so the cell could not test what it means to.
const setupAttempts = 3

// pendingGhosts makes the ghosts of an outage's cells and waits until each
// is pending its grace period and none acted on yet: what the fault must
// then find. The slowest to come due is made first: each must still be
// pending when the fault comes, a grace period after the first is. A
// set-up that outlasted a grace period (a ghost acted on already) is
// waited out and made again.
func (f *faultLab) pendingGhosts(t *testing.T, fault string) (g ghosts, cf, ch, cg *cell) {
	t.Helper()
	for attempt := 1; ; attempt++ {
		g = ghosts{flow: f.flowGhost(t), member: f.gossip.arm(t), want: slices.Clone(f.hl.running)}
		cf, ch, cg = f.cell(t, fault, remedyFlow), f.cell(t, fault, remedyHost), f.cell(t, fault, remedyGossip)
		cf.ghosts = []netip.Addr{g.flow.ip}
		var steps setupSteps
		g.member.fire(t)
		steps.mark("member fired")
		f.waitPending(t, remedyGossip, cg.before)
		steps.mark("member pending")
		f.killGhost(t, g.flow)
		steps.mark("flow's pod gone")
		f.wipe(t)
		steps.mark("store wiped")
		for _, c := range []*cell{cf, ch} {
			f.waitPending(t, c.remedy, c.before)
			steps.mark(c.remedy + " pending")
		}
		var acted []string
		for _, c := range []*cell{cf, ch, cg} {
			if d := c.actions(); d.done > 0 {
				acted = append(acted, c.remedy)
			}
		}
		if len(acted) == 0 {
			return g, cf, ch, cg
		}
		msg := fmt.Sprintf("%s acted before the fault was injected: the cells' set-up (%s) outlasted the grace period (%s)", strings.Join(acted, ", "), steps, faultGrace)
		if attempt == setupAttempts {
			t.Fatalf("%s, in each of %d attempts", msg, attempt)
		}
		t.Logf("%s; making the ghosts again", msg)
		f.settle(t)
	}
}

// setupSteps times a cell's set-up, for the message of one that outlasts
// a grace period.
type setupSteps struct {
	start time.Time
	marks []string
}

func (s *setupSteps) mark(what string) {
	if s.start.IsZero() {
		s.start = time.Now()
	}
	s.marks = append(s.marks, fmt.Sprintf("%s at %s", what, secs(time.Since(s.start))))
}

func (s setupSteps) String() string { return strings.Join(s.marks, ", ") }

// agentBack is when the agent was ready again after it said it was not,
// from t0 on (zero when it never said so).
func (f *faultLab) agentBack(t0 time.Time) time.Time {
	s, ok := f.agentReady.first(t0, notReady)
	if !ok {
		return time.Time{}
	}
	b, ok := f.agentReady.first(s.at, isReady)
	if !ok {
		return time.Time{}
	}
	return b.at
}

// sinceBack says how long after the agent was ready again at came, when
// it said it was not.
func (f *faultLab) sinceBack(t0, at time.Time) string {
	back := f.agentBack(t0)
	if back.IsZero() {
		return ""
	}
	return ", " + secs(at.Sub(back)) + " after it was ready again"
}

// agentOutage judges the agent's /readyz over a fault held from t0 to t1
// and c's action at at: once it said it was not ready, it must not say it
// is while the fault holds (when held), and it must not act sooner than a
// grace period after it was ready again. It returns what /readyz said.
func (f *faultLab) agentOutage(c *cell, held bool, t0, t1, at time.Time) string {
	s, ok := f.agentReady.first(t0, notReady)
	if !ok || !s.at.Before(at) {
		return "200 throughout"
	}
	if r, ok := flapped(f.agentReady, t0, t1); ok && held {
		c.Errorf("untruthful /readyz: the agent answered %s %s into the fault, after it had said not ready", r, secs(r.at.Sub(t0)))
	}
	ready := fmt.Sprintf("%d `%s` %s after the injection", s.code, reason(s.body), secs(s.at.Sub(t0)))
	if back := f.agentBack(t0); !back.IsZero() {
		ready += fmt.Sprintf("; 200 again %s after the lift", secs(back.Sub(t1)))
		if at.Sub(back) < faultGraceDur-time.Second {
			c.wrong(1, "acted %s after the agent was ready again: the fault did not start its grace period (%s) over", secs(at.Sub(back)), faultGrace)
		}
	}
	return ready
}

// gossipAfter judges what the controller did with m's ghost, pending when
// a fault began at t0 and lifted at t1, and returns the cell's columns.
// Its /readyz must have said not ready while the fault held (the leader
// degraded, or without the Lease), and a replica must lead again. Then,
// if the leader kept its Lease throughout, it must force the ghost out,
// not sooner than a grace period after it led, ready, again. If the Lease
// was lost, the ghost must be withheld: the proof that the pod at its
// address is another identity rests on when the leader first read the
// member listed, which a new term did not (it first read the member after
// that pod came): it must not be forced out, and stays reported.
func (f *faultLab) gossipAfter(c *cell, m *memberGhost, held bool, t0, t1 time.Time) (ready, figures string) {
	t := c.t
	leader := slices.IndexFunc(f.ctrlReady[:], func(l *readyLog) bool { return leadingAt(l, t0) })
	var back readyState
	poll.Until(t, poll.Patience, "a controller replica leading again", func() bool {
		for _, l := range f.ctrlReady {
			if s, ok := l.first(t1, leading); ok {
				back = s
				return true
			}
		}
		return false
	})
	var said []string
	for i, l := range f.ctrlReady {
		s, ok := l.first(t0, notReady)
		if !ok || s.at.After(t1) {
			continue
		}
		if r, ok := flapped(l, t0, t1); ok && held {
			c.Errorf("untruthful /readyz: replica %d answered %s %s into the fault, after it had said not ready", i, r, secs(r.at.Sub(t0)))
		}
		said = append(said, fmt.Sprintf("replica %d: %d `%s` %s after the injection", i, s.code, reason(s.body), secs(s.at.Sub(t0))))
	}
	ready = "200 throughout"
	if len(said) > 0 {
		ready = strings.Join(said, "; ") + fmt.Sprintf("; leading again %s after the lift", secs(back.at.Sub(t1)))
	}
	if leader >= 0 && ledThrough(f.ctrlReady[leader], t0) {
		at := waitTrue(t, "the ghost member forced out", m.gone)
		if at.Sub(back.at) < faultGraceDur-time.Second && len(said) > 0 {
			c.wrong(1, "the ghost was forced out %s after the leader was ready again: the fault did not start its grace period (%s) over", secs(at.Sub(back.at)), faultGrace)
		}
		d := c.expect(1)
		c.spared(nil, nil)
		return ready, fmt.Sprintf("the leader kept its Lease; forced out %s after the lift, %s after ready (grace %s); %v done", secs(at.Sub(t1)), secs(at.Sub(back.at)), faultGrace, d.done)
	}
	f.judgedThrough(t, remedyGossip, back.at)
	d := c.expect(0)
	c.spared(nil, nil)
	if m.gone() {
		c.wrong(1, "the ghost was forced out by a leadership term that never read its member listed before the new pod came")
	}
	if n := f.leaderMetrics().get("ghostwatch_findings", `rule="gossip-ghost-member"`, `severity="critical"`); n < 1 {
		c.Errorf("the ghost member, still listed failed beside the new pod's member, is no longer reported critical")
	}
	return ready, fmt.Sprintf("the leader lost its Lease: the ghost withheld for %s after a replica led again, still reported critical; %v done, %v refused", secs(time.Since(back.at)), d.done, d.refused)
}

// leadingAt reports whether l's replica led at t0 (ready or not).
func leadingAt(l *readyLog, t0 time.Time) bool {
	st := l.from(t0)
	return len(st) > 0 && leads(st[0])
}

// leads reports whether a replica's answer says it leads, ready or
// degraded.
func leads(s readyState) bool {
	return strings.HasPrefix(strings.TrimPrefix(s.body, "ok: "), "leading")
}

// ledThrough reports whether l's replica said it led in every answer from
// t0 on.
func ledThrough(l *readyLog, t0 time.Time) bool {
	return !slices.ContainsFunc(l.from(t0), func(s readyState) bool { return !leads(s) })
}

// reference plays each remedy without a fault: what the others are
// measured against.
func (f *faultLab) reference(t *testing.T) {
	const fault = "none (reference)"
	cf, ch, cg := f.cell(t, fault, remedyFlow), f.cell(t, fault, remedyHost), f.cell(t, fault, remedyGossip)
	flow := f.flowGhost(t)
	member := f.gossip.arm(t)
	want := slices.Clone(f.hl.running)
	cf.ghosts = []netip.Addr{flow.ip}
	start := time.Now()
	fired := make([]time.Time, 3)
	f.killGhost(t, flow)
	fired[0] = time.Now()
	f.wipe(t)
	fired[1] = time.Now()
	member.fire(t)
	fired[2] = time.Now()
	at := waitEach(t, "1. the ghost's flow deleted, 2. the reservations written back, 3. the ghost member forced out",
		func() bool { return f.flowGone(t, flow.ip) }, func() bool { ok, _ := f.hl.holds(want); return ok }, member.gone)
	agentSays, _ := f.agentReady.steady(start)
	for i, c := range []*cell{cf, ch, cg} {
		d := c.expect([]int{1, len(want), 1}[i])
		c.spared(nil, want)
		ready := agentSays
		if c.remedy == remedyGossip {
			ready = f.leaderReady(start)
		}
		c.report(ready, fmt.Sprintf("acted %s after the ghost was made (grace %s); %v done", secs(at[i].Sub(fired[i])), faultGrace, d.done))
	}
}

// cutAll cuts the agent and every controller replica off the API server,
// and returns the function that mends them.
func (f *faultLab) cutAll() func() {
	f.agentPipe.Cut()
	for _, p := range f.ctrlPipe {
		p.Cut()
	}
	return func() {
		f.agentPipe.Mend()
		for _, p := range f.ctrlPipe {
			p.Mend()
		}
	}
}

// watchGap cuts the agent and both controller replicas off the API server
// (their connections closed, new ones closed at once: what a partition,
// or a load balancer dropping one client, does) while the cluster changes
// behind them: a backend deleted, another backend's address handed to a
// pod of another Service, host-local's store wiped and one of its pods
// deleted, a member killed and its address given to another pod. Once
// they reach the API server again, what they act on must be what the
// cluster holds: the dead backend's flow deleted, the reused address's
// left alone, no reservation for the deleted pod.
func (f *faultLab) watchGap(t *testing.T) {
	const fault = "watch gap"
	ghost := f.flowGhost(t)
	reused := f.flowGhost(t)
	member := f.gossip.arm(t)
	gone := f.hl.running[0]
	cf, ch, cg := f.cell(t, fault, remedyFlow), f.cell(t, fault, remedyHost), f.cell(t, fault, remedyGossip)
	cf.ghosts = []netip.Addr{ghost.ip}

	t0 := time.Now()
	mend := f.cutAll()
	mended := false
	defer func() {
		if !mended {
			mend()
		}
	}()
	saidNotReady([]*cell{cf, ch}, "the agent", t0, f.agentReady)
	saidNotReady([]*cell{cg}, "a controller replica", t0, f.ctrlReady[:]...)

	f.killGhost(t, ghost)
	f.killGhost(t, reused)
	f.e.eventually(t, poll.Patience, "the kubelet stand-in to free "+reused.ip.String(), func() bool { return !f.e.kubelet.Holds(reused.ip) })
	f.e.service(t, "batch", "worker", 0)
	worker := f.podName("worker")
	if got := f.e.pod(t, "batch", worker, "worker", reused.ip, 0); got != reused.ip {
		t.Fatalf("pod batch/%s got %s, want the reused %s", worker, got, reused.ip)
	}
	reused.reused = true
	f.wipe(t)
	f.hl.stop(t, f, gone)
	want := slices.Clone(f.hl.running)
	member.fire(t)
	time.Sleep(time.Until(t0.Add(faultGraceDur + faultAudit)))
	during := f.tallies()
	t1 := time.Now()
	mend()
	mended = true

	at := waitEach(t, "1. the dead backend's flow deleted, 2. the running pods' reservations written back",
		func() bool { return f.flowGone(t, ghost.ip) }, func() bool { ok, _ := f.hl.holds(want); return ok })
	gr, gf := f.gossipAfter(cg, member, true, t0, t1)
	f.judgedThrough(t, remedyFlow, at[0])
	for i, c := range []*cell{cf, ch} {
		c.during(during[c.remedy])
		d := c.expect([]int{1, len(want)}[i])
		extra := ""
		if c.remedy == remedyFlow {
			c.spared([]*pooled{reused}, want)
			extra = fmt.Sprintf("; the flow to %s, now another Service's pod's, kept through a grace period of audits after", reused.ip)
		} else {
			c.spared(nil, want)
		}
		c.report(f.agentOutage(c, true, t0, t1, at[i]), fmt.Sprintf("cut %s; acted %s after it was mended%s (grace %s); %v done%s",
			secs(t1.Sub(t0)), secs(at[i].Sub(t1)), f.sinceBack(t0, at[i]), faultGrace, d.done, extra))
	}
	cg.during(during[remedyGossip])
	cg.report(gr, fmt.Sprintf("cut %s; %s", secs(t1.Sub(t0)), gf))
	// host-local's three pods for the next cells.
	f.hl.start(t, f)
}

// clockSkew moves pods' startTime 2 minutes ahead and behind, as nodes
// whose clocks are off write them: the live backends', the store's pods',
// and those of two members whose agents die while their pods run on (a
// startTime ahead of the controller's clock once made the member's own
// pod "another identity").
func (f *faultLab) clockSkew(t *testing.T) {
	const fault = "clock skew ±2 min"
	cf, ch, cg := f.cell(t, fault, remedyFlow), f.cell(t, fault, remedyHost), f.cell(t, fault, remedyGossip)
	f.skewStart(t, "web", "live-0", 2*time.Minute)
	f.skewStart(t, "web", "live-1", -2*time.Minute)
	for i, p := range f.hl.running {
		f.skewStart(t, "default", p.name, time.Duration(1-2*(i%2))*2*time.Minute)
	}
	ahead, behind := f.gossip.arm(t), f.gossip.arm(t)
	flow := f.flowGhost(t)
	cf.ghosts = []netip.Addr{flow.ip}
	want := slices.Clone(f.hl.running)
	failed0 := f.leaderMetrics().get("ghostwatch_gossip_members", `cluster="gossip/serf"`, `status="failed"`)
	t0 := time.Now()
	f.killGhost(t, flow)
	f.wipe(t)
	f.gossip.die(ahead.member)
	f.gossip.die(behind.member)
	f.setStart(t, "gossip", ahead.pod, time.Now().Add(2*time.Minute))
	f.setStart(t, "gossip", behind.pod, time.Now().Add(-2*time.Minute))

	at := waitEach(t, "1. the ghost's flow deleted, 2. the reservations written back, 3. the controller to read both members failed",
		func() bool { return f.flowGone(t, flow.ip) }, func() bool { ok, _ := f.hl.holds(want); return ok },
		func() bool {
			return f.leaderMetrics().get("ghostwatch_gossip_members", `cluster="gossip/serf"`, `status="failed"`) >= failed0+2
		})
	f.judgedThrough(t, remedyGossip, at[2])
	for _, m := range []*memberGhost{ahead, behind} {
		if s := f.gossip.listed(m.name); s != "failed" {
			cg.wrong(1, "member %s, whose own pod runs, is listed %q: forced out on a skewed startTime", m.name, s)
		}
	}
	agentSays, _ := f.agentReady.steady(t0)
	for i, c := range []*cell{cf, ch, cg} {
		d := c.expect([]int{1, len(want), 0}[i])
		c.spared(nil, want)
		figures := []string{
			"deleted the ghost's flow " + secs(at[0].Sub(t0)) + " after its pod was; the live backends' flows kept",
			fmt.Sprintf("%d reservations written back %s after the wipe", len(want), secs(at[1].Sub(t0))),
			"both members still listed failed " + secs(time.Since(at[2])) + " after the controller read them so",
		}[i]
		ready := agentSays
		if c.remedy == remedyGossip {
			ready = f.leaderReady(t0)
		}
		c.report(ready, fmt.Sprintf("%s; %v done, %v refused", figures, d.done, d.refused))
	}
}

// setStart sets pod ns/name's startTime to at.
func (f *faultLab) setStart(t *testing.T, ns, name string, at time.Time) {
	t.Helper()
	ctx := context.Background()
	p, err := f.e.api.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Status.StartTime = &metav1.Time{Time: at}
	if _, err := f.e.api.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// sharedAddress has other pods report the ghosts' addresses: a pod of
// another node and a hostNetwork pod report two dead backends' addresses
// and two running pods' of host-local's store, and then the address of
// the pod the controller asks for the member list (its credential once
// went to such an address), while a ghost of each remedy is due. Nothing
// may be done at an address another pod's network reports, and the
// controller must ask nothing there; once the addresses are their pods'
// alone again, each ghost is acted on.
func (f *faultLab) sharedAddress(t *testing.T) {
	const fault = "address shared with another pod"
	ctx := context.Background()
	a, b := f.flowGhost(t), f.flowGhost(t)
	h := slices.Clone(f.hl.running)
	now := time.Now()
	for _, s := range []struct {
		name string
		ip   netip.Addr
		host bool
	}{{"twin-a", a.ip, false}, {"host-b", b.ip, true}, {"twin-h", h[1].ip, false}, {"host-h", h[2].ip, true}} {
		f.podAt(t, "tenant", s.name, s.ip, now, s.host, nil)
	}
	member := f.gossip.arm(t)
	cf, ch, cg := f.cell(t, fault, remedyFlow), f.cell(t, fault, remedyHost), f.cell(t, fault, remedyGossip)
	cf.ghosts = []netip.Addr{a.ip, b.ip}
	t0 := time.Now()
	f.killGhost(t, a)
	f.killGhost(t, b)
	f.wipe(t)
	member.fire(t)
	f.waitPending(t, remedyGossip, cg.before)

	// The address of the pod asked for the member list, reported by a pod
	// of another namespace and by a hostNetwork pod; then by the
	// hostNetwork pod alone.
	f.podAt(t, "tenant", "twin-s", survivorIP, time.Now(), false, nil)
	f.podAt(t, "tenant", "host-s", survivorIP, time.Now(), true, nil)
	unreadAt := waitTrue(t, "the controller to leave the cluster unread", func() bool {
		m := f.leaderMetrics()
		return len(m) > 0 && m.get("ghostwatch_gossip_cluster_up", `cluster="gossip/serf"`) == 0
	})
	bGone := waitTrue(t, "the flow to the address only a hostNetwork pod reports deleted", func() bool { return f.flowGone(t, b.ip) })
	asked := f.gossip.rpc.accepted.Load()
	f.deletePod(t, "tenant", "twin-s")
	// host-local books the addresses no other pod's network reports: a
	// hostNetwork pod holds its node's address, not a pod address, and the
	// reservation keeps the running pod's address from the next pod.
	hostAt := f.hl.waitBooked(t, []hlPod{h[0], h[2]}, "the reservations of the addresses no other pod's network reports written back")
	f.judgedThrough(t, remedyFlow, t0)
	f.judgedThrough(t, remedyHost, hostAt)
	f.judgedThrough(t, remedyGossip, unreadAt)
	askedShared := f.gossip.rpc.accepted.Load() - asked
	if askedShared != 0 {
		cg.Errorf("the controller connected %d times to %s, an address another pod reports", askedShared, survivorIP)
	}
	// A pod's address another pod reports is not a ghost's: the flow is
	// left alone. A hostNetwork pod's address is its node's, and names no
	// pod: the flow's backend is gone from its Service, and the flow is.
	if f.flowGone(t, a.ip) {
		cf.wrong(1, "the flow to %s was deleted while another pod reported the address", a.ip)
	}
	if !f.flowGone(t, b.ip) {
		cf.Errorf("the flow to %s, a dead backend whose address only a hostNetwork pod reports, was not deleted", b.ip)
	}
	if member.gone() {
		cg.wrong(1, "the ghost member was forced out while the asked pod's address was shared")
	}
	if ok, what := f.hl.holds([]hlPod{h[0], h[2]}); !ok {
		ch.wrong(f.hl.wrongful([]hlPod{h[0], h[2]}), "while %s was another pod's too, %s", h[1].ip, what)
	}
	shared := f.tallies()
	agentSays, _ := f.agentReady.steady(t0)
	ctrlSays := f.leaderReady(t0)

	// The addresses their pods' alone again.
	unshared := time.Now()
	for _, s := range []string{"twin-a", "host-b", "twin-h", "host-h", "host-s"} {
		if err := f.e.api.CoreV1().Pods("tenant").Delete(ctx, s, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
			t.Fatal(err)
		}
	}
	at := waitEach(t, "1. both flows deleted, 2. every reservation written back, 3. the ghost member forced out",
		func() bool { return f.flowGone(t, a.ip) && f.flowGone(t, b.ip) }, func() bool { ok, _ := f.hl.holds(h); return ok }, member.gone)
	for i, c := range []*cell{cf, ch, cg} {
		d := c.expect([]int{2, len(h), 1}[i])
		c.spared(nil, h)
		ds := shared[c.remedy].minus(c.before)
		figures := []string{
			fmt.Sprintf("the flow to the address another pod reported kept while it did, deleted %s after it went; the one a hostNetwork pod reported deleted %s after its pod was", secs(at[0].Sub(unshared)), secs(bGone.Sub(t0))),
			fmt.Sprintf("%v of %d written while shared (the hostNetwork pod's address too); the third %s after the sharers went", ds.done, len(h), secs(at[1].Sub(unshared))),
			fmt.Sprintf("%d connections to the shared address in %s; forced out %s after it was the pod's alone", askedShared, secs(unshared.Sub(unreadAt)), secs(at[2].Sub(unshared))),
		}[i]
		ready := agentSays
		if c.remedy == remedyGossip {
			ready = ctrlSays
		}
		c.report(ready, fmt.Sprintf("%s; %v refused while shared, %v done in all", figures, ds.refused, d.done))
	}
}

// conntrackFull fills node-1's conntrack table to nf_conntrack_max with
// entries the kernel never evicts (new connections are dropped), then
// makes a ghost of each agent remedy: the agent must act on them alone.
func (f *faultLab) conntrackFull(t *testing.T) {
	const fault = "conntrack table full"
	flow := f.flowGhost(t)
	want := slices.Clone(f.hl.running)
	cf, ch := f.cell(t, fault, remedyFlow), f.cell(t, fault, remedyHost)
	cf.ghosts = []netip.Addr{flow.ip}
	count, limit := f.conntrackTable(t)
	fill := func(i int) snapshot.Flow { return filler(200, i) }
	filled := 0
	defer func() { f.deleteFlows(t, filled, fill) }()
	filled = f.createFlows(t, limit-count+1000, fill)
	full, _ := f.conntrackTable(t)
	if full < limit {
		t.Fatalf("node-1's table holds %d entries after %d were added, its limit is %d: not full", full, filled, limit)
	}
	t0 := time.Now()
	f.killGhost(t, flow)
	f.wipe(t)
	at := waitEach(t, "1. the ghost's flow deleted, 2. the reservations written back",
		func() bool { return f.flowGone(t, flow.ip) }, func() bool { ok, _ := f.hl.holds(want); return ok })
	f.judgedThrough(t, remedyFlow, at[0])
	agentSays, _ := f.agentReady.steady(t0)
	for i, c := range []*cell{cf, ch} {
		d := c.expect([]int{1, len(want)}[i])
		c.spared(nil, want)
		c.report(agentSays, fmt.Sprintf("%d entries, nf_conntrack_max %d; acted %s after the ghost was made; %v done", full, limit, secs(at[i].Sub(t0)), d.done))
	}
}

// eventsLost overflows the agent's conntrack event socket: the agent is
// stopped (SIGSTOP, as a starved or paused process is) while a burst of
// entries is created and deleted, far more than its socket holds, and a
// ghost's pod is deleted meanwhile; then it runs on. It must see that it
// lost events (they may have been anything), audit the whole table, and
// act on the ghost alone.
func (f *faultLab) eventsLost(t *testing.T) {
	const fault = "lost netlink events"
	flow := f.flowGhost(t)
	c := f.cell(t, fault, remedyFlow)
	c.ghosts = []netip.Addr{flow.ip}
	m0 := f.agentMetrics()
	lost0 := m0.get("ghostwatch_conntrack_events_lost_total")
	const burst = 40000
	fill := func(i int) snapshot.Flow { return filler(220, i) }
	pid := f.agent.cmd.Process.Pid
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	stopped := true
	defer func() {
		if stopped {
			syscall.Kill(pid, syscall.SIGCONT)
		}
	}()
	t0 := time.Now()
	created := f.createFlows(t, burst, fill)
	f.killGhost(t, flow)
	f.deleteFlows(t, created, fill)
	if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	stopped = false
	t1 := time.Now()
	lostAt, ok := within(poll.Patience, func() bool { return f.agentMetrics().get("ghostwatch_conntrack_events_lost_total") > lost0 })
	if !ok {
		c.Errorf("%d entries created and deleted while the agent was stopped, and it says it lost no event", created)
	}
	flowAt := waitTrue(t, "the ghost's flow deleted", func() bool { return f.flowGone(t, flow.ip) })
	f.judgedThrough(t, remedyFlow, flowAt)
	m := f.agentMetrics()
	says, _ := f.agentReady.steady(t1)
	d := c.expect(1)
	c.spared(nil, nil)
	c.report(says+" once it ran again", fmt.Sprintf("stopped %s while %d entries were created and deleted; %v overflows counted %s after it ran again; the ghost's flow deleted %s after; %v done",
		secs(t1.Sub(t0)), created, m.get("ghostwatch_conntrack_events_lost_total")-lost0, secs(lostAt.Sub(t1)), secs(flowAt.Sub(t1)), d.done))
}

// deadFlows are n flows through Service web/api to n addresses no pod
// holds, one each, as a node whose peers all restarted elsewhere keeps
// them.
func (f *faultLab) deadFlows(n int) func(int) snapshot.Flow {
	fe := f.fe
	return func(i int) snapshot.Flow {
		client := netip.AddrFrom4([4]byte{10, 245, byte(i >> 8), byte(i)})
		backend := netip.AddrFrom4([4]byte{10, 244, byte(100 + i/250), byte(1 + i%250)})
		return snapshot.Flow{Proto: snapshot.ProtoTCP, State: "ESTABLISHED", Timeout: 600,
			Status: snapshot.StatusAssured | snapshot.StatusSeenReply,
			Orig:   snapshot.Tuple{Src: client, Dst: fe.Addr(), SrcPort: 30000, DstPort: fe.Port()},
			Reply:  snapshot.Tuple{Src: backend, Dst: client, SrcPort: 8080, DstPort: 30000}}
	}
}

// deadRemaining counts the flows deadFlows made that the kernel still
// holds.
func (f *faultLab) deadRemaining(t *testing.T) int {
	n := 0
	for _, fl := range f.e.dnatFlows(t) {
		if b := fl.Reply.Src.As4(); b[1] == 244 && b[2] >= 100 && b[2] < 180 {
			n++
		}
	}
	return n
}

// overBudget gives node-1 50 dead backends at once, more than the budget
// (20 a minute) allows and few enough to be judged one by one: the batch
// must be refused whole, /readyz saying the budget is exceeded, and
// nothing deleted; once the flows are gone the agent is ready again.
func (f *faultLab) overBudget(t *testing.T) {
	const fault, dead = "dead backends over the budget", 50
	flow := f.deadFlows(dead)
	c := f.cell(t, fault, remedyFlow)
	t0 := time.Now()
	created := 0
	defer func() { f.deleteFlows(t, created, flow) }()
	if created = f.createFlows(t, dead, flow); created != dead {
		t.Fatalf("%d of %d flows created", created, dead)
	}
	refusedAt := waitTrue(t, "the batch refused", func() bool { return c.actions().refused > 0 })
	said, ok := f.agentReady.first(t0, func(s readyState) bool { return notReady(s) && strings.Contains(s.body, "budget") })
	if !ok {
		if _, ok = within(poll.Patience, func() bool {
			said, ok = f.agentReady.first(t0, func(s readyState) bool { return notReady(s) && strings.Contains(s.body, "budget") })
			return ok
		}); !ok {
			c.Errorf("untruthful /readyz: the agent refused a batch over its budget and did not say so (%s)", f.agentReady.last())
		}
	}
	f.judgedThrough(t, remedyFlow, refusedAt)
	if n := f.deadRemaining(t); n != dead {
		c.wrong(dead-n, "%d of the %d flows to dead backends remain: the batch over the budget was not refused whole", n, dead)
	}
	d := c.expect(0)
	c.spared(nil, nil)
	f.deleteFlows(t, created, flow)
	created = 0
	cleared := time.Now()
	back := waitReadyLog(t, f.agentReady, cleared, "the agent ready again once the flows are gone", isReady)
	ready := "not measured"
	if ok {
		ready = fmt.Sprintf("%d `%s` %s after the flows appeared; 200 again %s after they were deleted", said.code, reason(said.body), secs(said.at.Sub(t0)), secs(back.at.Sub(cleared)))
	}
	c.report(ready, fmt.Sprintf("refused %s after the flows appeared; %v refusals, %v done", secs(refusedAt.Sub(t0)), d.refused, d.done))
}

// deadBackends gives node-1 20,000 dead backends at once: more than are
// reported one by one (100, or the budget). The agent must judge them all
// in one pass and report them as one finding, which no remedy acts on:
// nothing deleted, and ready throughout, its evidence complete.
func (f *faultLab) deadBackends(t *testing.T) {
	const fault, dead = "20,000 dead backends", 20000
	flow := f.deadFlows(dead)
	c := f.cell(t, fault, remedyFlow)
	t0 := time.Now()
	created := 0
	defer func() { f.deleteFlows(t, created, flow) }()
	if created = f.createFlows(t, dead, flow); created != dead {
		t.Fatalf("%d of %d flows created", created, dead)
	}
	judged := func() float64 { return f.agentMetrics().get("ghostwatch_conntrack_stale_entries", `service="api"`) }
	judgedAt, ok := within(poll.Patience, func() bool { return judged() >= dead })
	if !ok {
		c.Errorf("%v of the %d flows to dead backends judged in %s: the agent cannot judge them in one pass", judged(), dead, poll.Patience)
	}
	f.judgedThrough(t, remedyFlow, judgedAt)
	if n := f.deadRemaining(t); n != dead {
		c.wrong(dead-n, "%d of the %d flows to dead backends remain", n, dead)
	}
	findings := f.agentMetrics().get("ghostwatch_findings", `rule="stale-nat-flow"`)
	says, _ := f.agentReady.steady(t0)
	hwm := procStatusOf(t, f.agent.cmd.Process.Pid, "VmHWM")
	d := c.expect(0)
	c.spared(nil, nil)
	c.report(says, fmt.Sprintf("all %d judged %s after they appeared, as %v finding; %v done, %v refused; the agent's peak RSS over the whole run %d MiB",
		dead, secs(judgedAt.Sub(t0)), findings, d.done, d.refused, hwm/1024))
}

// restartAgent stops the agent and starts it again with extra flags (none:
// as the matrix runs it), and waits until it is ready.
func (f *faultLab) restartAgent(t *testing.T, extra ...string) {
	t.Helper()
	f.agent.stop(t)
	stopped := time.Now()
	// The stopped agent answers nothing: ready again is ready since.
	down := waitReadyLog(t, f.agentReady, stopped, "the stopped agent to answer nothing", notReady)
	f.agent.argv = append(slices.Clone(f.agentArgs), extra...)
	f.agent.start(t)
	waitReadyLog(t, f.agentReady, down.at, "the agent ready after its restart", func(s readyState) bool {
		f.agent.check(t)
		return isReady(s)
	})
}

// ciliumImpersonated has a process of uid 65534 answer Cilium's health
// check in node-1 (127.0.0.1:9879), with kube-proxy's metrics out of the
// agent's reach (once enough to leave the flow rules out): were the
// answer believed, the agent would take the node for a Cilium kube-proxy
// replacement, leave the flow rules out and let a ghost stand, /readyz
// saying nothing was judged.
func (f *faultLab) ciliumImpersonated(t *testing.T) {
	const fault = "Cilium impersonated"
	// The impersonator: ghostwatch's controller, which answers /healthz
	// whatever its API server does, as uid 65534, on Cilium's address.
	dir, err := os.MkdirTemp("", "ghostwatch-imposter-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	bin := filepath.Join(dir, "cilium-agent")
	b, err := os.ReadFile(ghostwatchBinary(t))
	if err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	for _, w := range []struct {
		path, content string
		mode          os.FileMode
	}{
		{bin, string(b), 0o755},
		{kubeconfig, "apiVersion: v1\nkind: Config\nclusters: [{name: x, cluster: {server: \"https://127.0.0.1:1\"}}]\nusers: [{name: x, user: {token: none}}]\ncontexts: [{name: x, context: {cluster: x, user: x}}]\ncurrent-context: x\n", 0o644},
	} {
		if err := os.WriteFile(w.path, []byte(w.content), w.mode); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	imp := exec.Command(bin, "controller", "--kubeconfig="+kubeconfig, "--identity=imposter", "--listen=127.0.0.1:9879", "--history-listen=", "--log-format=text")
	imp.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	implog := &lockedBuffer{}
	imp.Stdout, imp.Stderr = implog, implog
	if err := f.e.node.Net.Do(imp.Start); err != nil {
		t.Fatal(err)
	}
	defer func() {
		imp.Process.Kill()
		imp.Wait()
		if t.Failed() {
			t.Logf("the impersonator's log:\n%s", tail(implog.String(), 20))
		}
	}()
	hc := f.e.node.Net.HTTPClient(time.Second)
	waitTrue(t, "the impersonator answering Cilium's health check", func() bool {
		resp, err := hc.Get("http://127.0.0.1:9879/healthz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	})
	f.restartAgent(t, "--kube-proxy-metrics-address=127.0.0.1:1")
	defer f.restartAgent(t)

	flow := f.flowGhost(t)
	c := f.cell(t, fault, remedyFlow)
	c.ghosts = []netip.Addr{flow.ip}
	t0 := time.Now()
	f.killGhost(t, flow)
	flowAt := waitTrue(t, "the ghost's flow deleted", func() bool { return f.flowGone(t, flow.ip) })
	says, _ := f.agentReady.steady(t0)
	d := c.expect(1)
	c.spared(nil, nil)
	body := f.agentReady.last().body
	if strings.Contains(body, "not judged on this node") {
		c.Errorf("untruthful /readyz: %q, while the flow rules were judged", body)
	}
	if m := f.agentMetrics(); m.get("ghostwatch_rules_not_judged", `rule="stale-nat-flow"`, `reason="blind"`) != 0 {
		c.Errorf("ghostwatch_rules_not_judged says stale-nat-flow was not judged (blind)")
	}
	c.report(says+" (`"+reason(body)+"`)", fmt.Sprintf("the ghost's flow deleted %s after its pod was; %v done", secs(flowAt.Sub(t0)), d.done))
}

// ledgerUnread waits until the agent's /readyz says host-local's store is
// unread, and returns the answer.
func (f *faultLab) ledgerUnread(c *cell, from time.Time) readyState {
	s := waitReadyLog(c.t, f.agentReady, from, "the agent's /readyz to say the ledger is unread", func(s readyState) bool {
		return isReady(s) && strings.Contains(s.body, "not judged, a ledger unread")
	})
	if m := f.agentMetrics(); m.get("ghostwatch_rules_not_judged", `rule="ipam-unbooked-ip"`, `reason="source-error"`) != 1 {
		c.Errorf("ghostwatch_rules_not_judged does not say ipam-unbooked-ip was not judged (source-error)")
	}
	return s
}

// namedPipe wipes host-local's store and leaves a named pipe where a
// reservation was (once read as a free address): host-local counts the
// address reserved, and nobody can say for whom, so the store is not
// judged, and nothing is written, until the pipe is gone.
func (f *faultLab) namedPipe(t *testing.T) {
	const fault = "named pipe in the store"
	want := slices.Clone(f.hl.running)
	c := f.cell(t, fault, remedyHost)
	t0 := time.Now()
	f.wipe(t)
	if err := os.MkdirAll(f.hl.store(), 0o755); err != nil {
		t.Fatal(err)
	}
	fifo := filepath.Join(f.hl.store(), want[0].ip.String())
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	said := f.ledgerUnread(c, t0)
	f.judgedThrough(t, remedyHost, said.at)
	if k := f.hl.wrongful(nil); k > 0 {
		_, what := f.hl.holds(nil)
		c.wrong(k, "written while the store was unread: %s", what)
	}
	d0 := c.during(f.tally(remedyHost))
	if err := os.Remove(fifo); err != nil {
		t.Fatal(err)
	}
	removed := time.Now()
	bookedAt := f.hl.waitBooked(t, want, "the reservations written back once the pipe is gone")
	c.expect(len(want))
	c.spared(nil, want)
	c.report(fmt.Sprintf("200 `%s` %s after the pipe appeared", clause(said.body, "not judged"), secs(said.at.Sub(t0))),
		fmt.Sprintf("%v written while the pipe stood (%s); %d written %s after it was removed", d0.done, secs(removed.Sub(t0)), len(want), secs(bookedAt.Sub(removed))))
}

// linkedDataDir replaces host-local's data directory by a link to a
// directory outside the agent's host root (once followed there): the
// agent must neither read nor write there, say the store is unread, and
// write the reservations once it is a directory again.
func (f *faultLab) linkedDataDir(t *testing.T) {
	const fault = "data directory linked out of the root"
	want := slices.Clone(f.hl.running)
	outside := t.TempDir()
	if err := os.MkdirAll(filepath.Join(outside, hlNetwork), 0o755); err != nil {
		t.Fatal(err)
	}
	c := f.cell(t, fault, remedyHost)
	t0 := time.Now()
	f.wipe(t)
	if err := os.Symlink(outside, filepath.Join(f.hl.root, hlDataDir)); err != nil {
		t.Fatal(err)
	}
	said := f.ledgerUnread(c, t0)
	f.judgedThrough(t, remedyHost, said.at)
	entries, err := os.ReadDir(filepath.Join(outside, hlNetwork))
	if err != nil {
		t.Fatal(err)
	}
	c.wrong(len(entries), "%d files written outside the host root, through the link", len(entries))
	d0 := c.during(f.tally(remedyHost))
	if err := os.Remove(filepath.Join(f.hl.root, hlDataDir)); err != nil {
		t.Fatal(err)
	}
	removed := time.Now()
	bookedAt := f.hl.waitBooked(t, want, "the reservations written back once the link is gone")
	c.expect(len(want))
	c.spared(nil, want)
	c.report(fmt.Sprintf("200 `%s` %s after the link appeared", clause(said.body, "not judged"), secs(said.at.Sub(t0))),
		fmt.Sprintf("%v written while the link stood (%s), %d files outside the root; %d written %s after it was removed", d0.done, secs(removed.Sub(t0)), len(entries), len(want), secs(bookedAt.Sub(removed))))
}

// ownPodRunsOn kills member m's agent while its own pod runs on, and waits
// until the controller has judged it failed for a grace period: it must
// not be forced out.
func (f *faultLab) ownPodRunsOn(c *cell, m *memberGhost) {
	t := c.t
	failed0 := f.leaderMetrics().get("ghostwatch_gossip_members", `cluster="gossip/serf"`, `status="failed"`)
	t0 := time.Now()
	f.gossip.die(m.member)
	failedAt := waitTrue(t, "the controller to read "+m.name+" failed", func() bool {
		return f.leaderMetrics().get("ghostwatch_gossip_members", `cluster="gossip/serf"`, `status="failed"`) > failed0
	})
	f.judgedThrough(t, remedyGossip, failedAt)
	d := c.expect(0)
	c.spared(nil, nil)
	if s := f.gossip.listed(m.name); s != "failed" {
		c.wrong(1, "member %s, whose own pod runs, is listed %q", m.name, s)
	}
	c.report(f.leaderReady(t0), fmt.Sprintf("still listed failed %s after the controller read it so; %v done, %v refused", secs(time.Since(failedAt)), d.done, d.refused))
}

// foreignNamespace: a member whose own pod (apps/web-N, started long
// before) runs in another namespace than the cluster's other members
// fails (once forced out for it). A namespace proves nothing about an
// identity.
func (f *faultLab) foreignNamespace(t *testing.T) {
	m := &memberGhost{g: f.gossip, addr: f.gossip.addr(), pod: f.podName("web")}
	m.name = "node-" + strings.ReplaceAll(m.addr.String(), ".", "-")
	f.podAt(t, "apps", m.pod, m.addr, time.Now().Add(-time.Hour), false, nil)
	m.member = f.gossip.join(t, m.name, m.addr)
	f.ownPodRunsOn(f.cell(t, "member of another namespace", remedyGossip), m)
}

// aliveAgain: a ghost member pending its grace period comes back alive
// (its agent started again at its address) before the grace runs out: it
// is not forced out, and nothing is counted failed (a refusal once was).
func (f *faultLab) aliveAgain(t *testing.T) {
	const fault = "member alive again"
	m := f.gossip.arm(t)
	at := m.member.Gossip
	c := f.cell(t, fault, remedyGossip)
	t0 := time.Now()
	m.fire(t)
	f.waitPending(t, remedyGossip, c.before)
	f.gossip.live[m.name] = f.gossip.start(t, serftest.Config{Name: m.name, Gossip: at})
	aliveAt := waitTrue(t, m.name+" alive again in the survivor's list", func() bool { return f.gossip.listed(m.name) == "alive" })
	f.judgedThrough(t, remedyGossip, aliveAt)
	d := c.expect(0)
	c.spared(nil, nil)
	c.report(f.leaderReady(t0), fmt.Sprintf("alive again %s after it died; %v done, %v refused, %v failed", secs(aliveAt.Sub(t0)), d.done, d.refused, d.failed))
}

// leaderFailover runs a new pair of replicas on a Lease of their own with
// --budget=1: the leader forces a ghost out, spending the budget, and is
// killed (SIGKILL); once the other replica leads, a second ghost is made.
// The new leader must refuse it: the budget's spending is kept on the
// Lease, not in the dead leader's memory (a failover once reset it).
func (f *faultLab) leaderFailover(t *testing.T) {
	const fault = "leader failover"
	for _, d := range f.ctrl {
		d.stop(t)
	}
	clusters := filepath.Join(t.TempDir(), "gossip-clusters.yaml")
	if err := os.WriteFile(clusters, []byte("clusters:\n- {system: serf, namespace: gossip, allowPlaintextCredentials: true}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for i := range f.ctrl {
		f.ctrl[i] = f.controller(t, i, clusters, "faults-failover", "--budget=1", "--budget-interval=10m")
	}
	f.settle(t)
	c := f.cell(t, fault, remedyGossip)
	first := f.gossip.arm(t)
	first.fire(t)
	// Forced out, and counted: the leader has reported its action.
	waitTrue(t, "the first ghost forced out", func() bool { return first.gone() && f.ctrlMetrics().actions(ruleGossip, "done") > 0 })
	leader := slices.IndexFunc(f.ctrlReady[:], func(l *readyLog) bool { return leading(l.last()) })
	if leader < 0 {
		t.Fatal("no replica leads")
	}
	spent := f.ctrlMetrics().actions(ruleGossip, "done")
	t0 := time.Now()
	f.ctrl[leader].kill(t)
	other := 1 - leader
	took := waitReadyLog(t, f.ctrlReady[other], t0, "the other replica to lead", leading)
	second := f.gossip.arm(t)
	second.fire(t)
	metrics := func() metricSet { return scrape(&http.Client{Timeout: 2 * time.Second}, f.ctrlURL[other]+"/metrics") }
	refusedAt := waitTrue(t, "the new leader to refuse the second ghost", func() bool { return metrics().actions(ruleGossip, "refused") > 0 })
	f.judgedThrough(t, remedyGossip, refusedAt)
	m := metrics()
	if n := int(m.actions(ruleGossip, "done")); n > 0 {
		c.wrong(n, "the new leader forced %d ghosts out beyond the budget the dead leader spent", n)
	}
	if second.gone() && m.actions(ruleGossip, "done") == 0 {
		c.wrong(1, "the second ghost was forced out beyond the budget")
	}
	c.spared(nil, nil)
	c.report(fmt.Sprintf("the other replica leading %s after the kill", secs(took.at.Sub(t0))),
		fmt.Sprintf("%v forced out before the kill; the new leader refused the next ghost %s after the kill (%v refusals), 0 done", spent, secs(refusedAt.Sub(t0)), m.actions(ruleGossip, "refused")))
}
