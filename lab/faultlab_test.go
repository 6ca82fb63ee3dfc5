package lab

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/containernetworking/cni/libcni"
	current "github.com/containernetworking/cni/pkg/types/100"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/ghostwatch/ghostwatch/internal/poll"
	"github.com/ghostwatch/ghostwatch/internal/serftest"
	"github.com/ghostwatch/ghostwatch/lab/controlplane"
	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source/conntrack"
	sourcegossip "github.com/ghostwatch/ghostwatch/source/gossip"
)

// The world's parts.

// pooled is a client's pooled connection through the Service's frontend to
// one pod, left open and idle between requests.
type pooled struct {
	pod  string
	ip   netip.Addr
	conn net.Conn
	// reused is set once another pod holds ip: its flow is no ghost.
	reused bool
}

// pool opens connections from app through fe until one is answered by
// pod, and keeps that one.
func (f *faultLab) pool(t *testing.T, pod string) *pooled {
	t.Helper()
	p := &pooled{pod: pod}
	f.e.eventually(t, poll.Patience, "a connection through web/api answered by "+pod, func() bool {
		c, err := f.app.Dial(context.Background(), "tcp", "", f.fe.String())
		if err != nil {
			return false
		}
		if got, _ := roundTrip(c); got != pod {
			c.Close()
			return false
		}
		// No keep-alive probes: a probe of a connection whose address a
		// live pod took would be answered by a reset, which ends the flow
		// before ghostwatch is asked anything about it.
		if tc, ok := c.(*net.TCPConn); ok {
			tc.SetKeepAlive(false)
		}
		p.conn = c
		return true
	})
	p.ip = f.e.endpointIP(t, "web", "api", pod)
	t.Cleanup(func() { p.conn.Close() })
	return p
}

// checkControls fails the test unless every control connection is still
// translated to its pod and answered by it.
func (f *faultLab) checkControls(t *testing.T) {
	t.Helper()
	for _, c := range f.controls {
		if flows := f.e.flowsTo(t, c.ip); len(flows) == 0 {
			t.Errorf("the flow to live pod %s (%s) is gone: a wrongful delete", c.pod, c.ip)
		}
		if got, err := roundTrip(c.conn); got != c.pod {
			t.Errorf("the pooled connection to live pod %s is answered by %q (%v)", c.pod, got, err)
		}
	}
}

// podName names the next pod of a kind: kind-1, kind-2, ...
func (f *faultLab) podName(kind string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.names[kind]++
	return fmt.Sprintf("%s-%d", kind, f.names[kind])
}

// flowGhost makes a pod of web/api with a pooled connection to it, for
// killGhost to make a ghost of.
func (f *faultLab) flowGhost(t *testing.T) *pooled {
	t.Helper()
	name := f.podName("ghost")
	f.e.pod(t, "web", name, "api", netip.Addr{}, 0)
	p := f.pool(t, name)
	f.leftovers = append(f.leftovers, leftover{
		// Gone, or no ghost: its pod was not deleted, or its address went
		// to another pod.
		resolved: func(t *testing.T) bool {
			_, err := f.e.api.CoreV1().Pods("web").Get(context.Background(), p.pod, metav1.GetOptions{})
			return err == nil || p.reused || f.flowGone(t, p.ip)
		},
		clear: func(t *testing.T) {
			fs := f.e.flowsTo(t, p.ip)
			f.deleteFlows(t, len(fs), func(i int) snapshot.Flow { return fs[i] })
		},
	})
	return p
}

// killGhost deletes p's pod: its flow is left translated to a dead
// backend, a stale-nat-flow.
func (f *faultLab) killGhost(t *testing.T, p *pooled) {
	t.Helper()
	f.deletePod(t, "web", p.pod)
}

// deletePod deletes ns/name at once and waits until it is gone.
func (f *faultLab) deletePod(t *testing.T, ns, name string) {
	t.Helper()
	if err := f.e.api.CoreV1().Pods(ns).Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	f.e.gone(t, ns, name)
}

// flowGone reports whether the kernel no longer translates a flow to ip.
func (f *faultLab) flowGone(t *testing.T, ip netip.Addr) bool {
	return len(f.e.flowsTo(t, ip)) == 0
}

// podAt makes pod ns/name on a node without a kubelet, its status written
// as a kubelet would: running at ip, started at start, hostNetwork when
// asked.
func (f *faultLab) podAt(t *testing.T, ns, name string, ip netip.Addr, start time.Time, hostNetwork bool, annotations map[string]string) {
	t.Helper()
	ctx := context.Background()
	p, err := f.e.api.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: annotations},
		Spec: corev1.PodSpec{NodeName: "node-7", HostNetwork: hostNetwork,
			Containers: []corev1.Container{{Name: "work", Image: "work:1"}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.Status = corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip.String(), PodIPs: []corev1.PodIP{{IP: ip.String()}},
		StartTime: &metav1.Time{Time: start}}
	if _, err := f.e.api.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// skewStart moves the startTime of pod ns/name by d, as a node whose clock
// is off by d would have written it.
func (f *faultLab) skewStart(t *testing.T, ns, name string, d time.Duration) {
	t.Helper()
	ctx := context.Background()
	p, err := f.e.api.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if p.Status.StartTime != nil {
		start = p.Status.StartTime.Time
	}
	p.Status.StartTime = &metav1.Time{Time: start.Add(d)}
	if _, err := f.e.api.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// The binaries' metrics.

// metricSet is one scrape: each series' value by its name and labels as
// printed.
type metricSet map[string]float64

// scrape reads the Prometheus text at url; an unreachable one reads empty.
func scrape(c *http.Client, url string) metricSet {
	m := metricSet{}
	resp, err := c.Get(url)
	if err != nil {
		return m
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(b), "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			m[line[:i]] += v
		}
	}
	return m
}

// get sums the series of name that carry every label given (k="v").
func (m metricSet) get(name string, labels ...string) float64 {
	var sum float64
	for k, v := range m {
		if k != name && !strings.HasPrefix(k, name+"{") {
			continue
		}
		if slices.ContainsFunc(labels, func(l string) bool { return !strings.Contains(k, l) }) {
			continue
		}
		sum += v
	}
	return sum
}

// actions is ghostwatch_remedy_actions_total of rule with result.
func (m metricSet) actions(rule, result string) float64 {
	return m.get("ghostwatch_remedy_actions_total", `rule="`+rule+`"`, `result="`+result+`"`)
}

// deletedFlow is how the agent's log names the backend of the flows it
// deleted: "DNAT to ADDRESS:PORT" for one, "N flows to ADDRESS" for more.
var deletedFlow = regexp.MustCompile(`^time=(\S+) .*msg=remedy remedy=stale-nat-flow result=done target="(?:\d+ flows to |[^"]*DNAT to )(\d+\.\d+\.\d+\.\d+)`)

// flowsDeleted are the backends of the flows the agent's log says it
// deleted from since on, one for each action.
func (f *faultLab) flowsDeleted(t *testing.T, since time.Time) []netip.Addr {
	t.Helper()
	var out []netip.Addr
	for _, line := range strings.Split(f.agent.logs.String(), "\n") {
		m := deletedFlow.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, m[1])
		if err != nil {
			t.Fatalf("the agent's log line %q: %v", line, err)
		}
		if !at.Before(since.Truncate(time.Millisecond)) {
			out = append(out, netip.MustParseAddr(m[2]))
		}
	}
	return out
}

// agentMetrics scrapes the agent through f.agentHTTP, whose connection
// outlives a full conntrack table in node-1 (a new one would be dropped).
func (f *faultLab) agentMetrics() metricSet {
	return scrape(f.agentHTTP, "http://"+faultAgentListen+"/metrics")
}

// ctrlMetrics sums the running replicas' metrics.
func (f *faultLab) ctrlMetrics() metricSet {
	m := metricSet{}
	c := &http.Client{Timeout: 2 * time.Second}
	for i, d := range f.ctrl {
		if d == nil || !d.running() {
			continue
		}
		for k, v := range scrape(c, f.ctrlURL[i]+"/metrics") {
			m[k] += v
		}
	}
	return m
}

// The rules whose findings each remedy acts on.
const (
	ruleFlow   = "stale-nat-flow"
	ruleHost   = "ipam-unbooked-ip"
	ruleGossip = "gossip-ghost-member"
)

// counter reads one remedy's actions of a result, from the binary that
// runs it.
func (f *faultLab) counter(remedy, result string) float64 {
	switch remedy {
	case remedyFlow:
		return f.agentMetrics().actions(ruleFlow, result)
	case remedyHost:
		return f.agentMetrics().actions(ruleHost, result)
	default:
		return f.ctrlMetrics().actions(ruleGossip, result)
	}
}

// tally is one remedy's actions by result.
type tally struct{ done, refused, failed, pending float64 }

func (f *faultLab) tally(remedy string) tally {
	return tally{f.counter(remedy, "done"), f.counter(remedy, "refused"), f.counter(remedy, "failed"), f.counter(remedy, "pending")}
}

func (a tally) minus(b tally) tally {
	return tally{a.done - b.done, a.refused - b.refused, a.failed - b.failed, a.pending - b.pending}
}

// waitPending waits until remedy has a finding pending beyond before: it
// holds in a complete pass, and its grace period runs.
func (f *faultLab) waitPending(t *testing.T, remedy string, before tally) {
	t.Helper()
	poll.Until(t, poll.Patience, remedy+": a ghost pending its grace period", func() bool {
		return f.counter(remedy, "pending") > before.pending
	})
}

// passes counts the complete judgements of remedy's binary: the agent's
// audits, the leader's passes.
func (f *faultLab) passes(remedy string) float64 {
	if remedy == remedyGossip {
		return f.ctrlMetrics().get("ghostwatch_controller_passes_total")
	}
	return f.agentMetrics().get("ghostwatch_audits_total", `outcome="complete"`)
}

// judgedThrough waits until remedy's binary has had the time to act
// since from: a grace period and an audit interval, and, for the agent,
// three complete audits (the controller's leader runs a pass on each
// change, and when a remedy's grace period runs out: a quiet cluster
// brings none).
func (f *faultLab) judgedThrough(t *testing.T, remedy string, from time.Time) {
	t.Helper()
	p0 := f.passes(remedy)
	poll.Until(t, poll.Patience, remedy+": a grace period of complete passes", func() bool {
		return time.Since(from) > faultGraceDur+faultAudit && (remedy == remedyGossip || f.passes(remedy) >= p0+3)
	})
}

// Processes.

// daemon is a long-running ghostwatch command of the matrix: the agent in
// node-1 (through ip netns exec), a controller replica in the host.
type daemon struct {
	name string
	argv []string
	logs *logFile
	cmd  *exec.Cmd
	done chan struct{}
	err  error
}

func newDaemon(t *testing.T, name string, argv []string) *daemon {
	t.Helper()
	d := &daemon{name: name, argv: argv, logs: newLogFile(t, name)}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("%s log ends:\n%s", d.name, tail(d.logs.String(), 60))
		}
		if d.running() {
			d.stop(t)
		}
	})
	return d
}

// start runs the command, with the output in logs.
func (d *daemon) start(t *testing.T) {
	t.Helper()
	d.cmd = exec.Command(d.argv[0], d.argv[1:]...)
	d.cmd.Stdout, d.cmd.Stderr = d.logs, d.logs
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d.done = make(chan struct{})
	go func(cmd *exec.Cmd, done chan struct{}) {
		d.err = cmd.Wait()
		close(done)
	}(d.cmd, d.done)
}

func (d *daemon) running() bool {
	if d.cmd == nil {
		return false
	}
	select {
	case <-d.done:
		return false
	default:
		return true
	}
}

// stop ends it with SIGINT, as a kubelet's SIGTERM would: it must exit 0
// within 30 s.
func (d *daemon) stop(t *testing.T) {
	t.Helper()
	_ = d.cmd.Process.Signal(os.Interrupt)
	select {
	case <-d.done:
		if d.err != nil {
			t.Errorf("%s exited with %v after SIGINT", d.name, d.err)
		}
	case <-time.After(30 * time.Second):
		d.kill(t)
		t.Errorf("%s did not stop within 30s of SIGINT", d.name)
	}
}

// kill ends it at once (SIGKILL), as a node's loss would.
func (d *daemon) kill(t *testing.T) {
	t.Helper()
	_ = d.cmd.Process.Kill()
	<-d.done
}

// exitedEarly fails the test when the process exited by itself.
func (d *daemon) check(t *testing.T) {
	t.Helper()
	if d.cmd != nil && !d.running() {
		t.Fatalf("%s exited: %v; its log ends:\n%s", d.name, d.err, tail(d.logs.String(), 40))
	}
}

// logFile is a process's log, in a file of the test's that outlives a
// failed run (its path is logged then), so that it can be read while the
// test runs and after.
type logFile struct {
	mu   sync.Mutex
	f    *os.File
	path string
}

func newLogFile(t *testing.T, name string) *logFile {
	t.Helper()
	f, err := os.CreateTemp("", "ghostwatch-faults-"+name+"-*.log")
	if err != nil {
		t.Fatal(err)
	}
	l := &logFile{f: f, path: f.Name()}
	t.Cleanup(func() {
		f.Close()
		if t.Failed() {
			t.Logf("%s's log is kept in %s", name, l.path)
			return
		}
		os.Remove(l.path)
	})
	return l
}

func (l *logFile) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.f.Write(p)
}

func (l *logFile) String() string {
	b, _ := os.ReadFile(l.path)
	return string(b)
}

// lockedBuffer is a buffer a process writes while a test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// pipe relays the TCP connections its listener accepts to target, so that
// a test can cut one client off from a server (its open connections
// closed, new ones closed at once) while others still reach it, and count
// the connections a client tries.
type pipe struct {
	ln       net.Listener
	target   string
	accepted atomic.Int64

	mu   sync.Mutex
	cut  bool
	open map[net.Conn]bool
}

func newPipe(t *testing.T, ln net.Listener, target string) *pipe {
	p := &pipe{ln: ln, target: target, open: map[net.Conn]bool{}}
	go p.serve()
	t.Cleanup(func() {
		ln.Close()
		p.closeAll()
	})
	return p
}

func (p *pipe) serve() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.accepted.Add(1)
		if !p.keep(c) {
			continue
		}
		go p.relay(c)
	}
}

// keep tracks c, or closes it when the pipe is cut.
func (p *pipe) keep(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cut {
		c.Close()
		return false
	}
	p.open[c] = true
	return true
}

func (p *pipe) drop(c net.Conn) {
	c.Close()
	p.mu.Lock()
	delete(p.open, c)
	p.mu.Unlock()
}

func (p *pipe) relay(c net.Conn) {
	defer p.drop(c)
	up, err := net.DialTimeout("tcp", p.target, 5*time.Second)
	if err != nil || !p.keep(up) {
		return
	}
	defer p.drop(up)
	controlplane.Splice(c, up)
}

// Cut closes every open connection and every new one until Mend.
func (p *pipe) Cut() {
	p.mu.Lock()
	p.cut = true
	p.mu.Unlock()
	p.closeAll()
}

// Mend relays again.
func (p *pipe) Mend() {
	p.mu.Lock()
	p.cut = false
	p.mu.Unlock()
}

func (p *pipe) closeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for c := range p.open {
		c.Close()
	}
}

// Readiness, sampled.

// readyLog is what one /readyz answered, sampled every 200 ms from its
// start: each change of status or body, with when it was first seen.
type readyLog struct {
	mu     sync.Mutex
	states []readyState
}

type readyState struct {
	at   time.Time
	code int // 0: no answer
	body string
}

func (s readyState) String() string {
	if s.code == 0 {
		return "no answer (" + s.body + ")"
	}
	return fmt.Sprintf("%d `%s`", s.code, s.body)
}

func watchReady(t *testing.T, c *http.Client, url string) *readyLog {
	l := &readyLog{}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	sample := func() readyState {
		s := readyState{at: time.Now()}
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		resp, err := c.Do(req)
		if err != nil {
			s.body = "no answer"
			return s
		}
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		resp.Body.Close()
		s.code, s.body = resp.StatusCode, strings.TrimSpace(strings.SplitN(string(b), "\n", 2)[0])
		return s
	}
	l.add(sample())
	go func() {
		tick := time.NewTicker(200 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
				l.add(sample())
			}
		}
	}()
	return l
}

func (l *readyLog) add(s readyState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if n := len(l.states); n > 0 && l.states[n-1].code == s.code && l.states[n-1].body == s.body {
		return
	}
	l.states = append(l.states, s)
}

func (l *readyLog) last() readyState {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.states[len(l.states)-1]
}

// from is the state holding at t and every later one.
func (l *readyLog) from(t time.Time) []readyState {
	l.mu.Lock()
	defer l.mu.Unlock()
	i := 0
	for j, s := range l.states {
		if !s.at.After(t) {
			i = j
		}
	}
	return slices.Clone(l.states[i:])
}

// first is the first state at or after t that cond accepts.
func (l *readyLog) first(t time.Time, cond func(readyState) bool) (readyState, bool) {
	for _, s := range l.from(t) {
		if cond(s) {
			if s.at.Before(t) {
				s.at = t
			}
			return s, true
		}
	}
	return readyState{}, false
}

func notReady(s readyState) bool { return s.code != http.StatusOK }
func isReady(s readyState) bool  { return s.code == http.StatusOK }

// leading accepts a controller replica's answer while it leads and is
// ready.
func leading(s readyState) bool { return isReady(s) && strings.HasPrefix(s.body, "ok: leading") }

// waitReadyLog waits until l holds a state at or after t that cond
// accepts, and returns it.
func waitReadyLog(t *testing.T, l *readyLog, from time.Time, what string, cond func(readyState) bool) readyState {
	t.Helper()
	var got readyState
	poll.UntilNoted(t, poll.Patience, what, func() (bool, string) {
		s, ok := l.first(from, cond)
		got = s
		return ok, l.last().String()
	})
	return got
}

// steady says what l answered from from on: "200 throughout" when it
// never said otherwise, or each answer that was not 200.
func (l *readyLog) steady(from time.Time) (string, bool) {
	var bad []string
	for _, s := range l.from(from) {
		if !isReady(s) {
			bad = append(bad, fmt.Sprintf("%s %.1f s in", s, s.at.Sub(from).Seconds()))
		}
	}
	if len(bad) == 0 {
		return "200 throughout", true
	}
	return strings.Join(bad, "; "), false
}

// reason shortens a /readyz body for the matrix: its first clause.
func reason(body string) string {
	if i := strings.IndexAny(body, ";("); i > 0 {
		body = strings.TrimSpace(body[:i])
	}
	if len(body) > 90 {
		body = body[:90] + "…"
	}
	return body
}

// clause is the clause of a /readyz body that starts with prefix, up to
// its reason in parentheses: "not judged, a ledger unread: RULES".
func clause(body, prefix string) string {
	i := strings.Index(body, prefix)
	if i < 0 {
		return reason(body)
	}
	body = body[i:]
	if j := strings.IndexAny(body, ";("); j > 0 {
		body = strings.TrimSpace(body[:j])
	}
	return body
}

// secs is d in seconds with one decimal.
func secs(d time.Duration) string { return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + " s" }

// nodeStore is node-1's host-local store, under the agent's host root:
// kind's kindnet configuration, on a range of node-1's pod CIDR that the
// kubelet stand-in does not hand out by itself, and pods started on it as
// a runtime starts them: the real plugin called through libcni with the
// pod's names and UID in CNI_ARGS (its result cached under
// /var/lib/cni/results, where the agent finds the sandbox), the address
// asked of the plugin and of the kubelet stand-in alike.
type nodeStore struct {
	root string
	cni  *libcni.CNIConfig
	list *libcni.NetworkConfigList
	// running are the pods started and not deleted, in order.
	running []hlPod
	next    netip.Addr
}

type hlPod struct {
	name    string
	uid     types.UID
	ip      netip.Addr
	sandbox string
}

// The store's node paths and configuration.
const (
	hlDataDir = "/run/cni-ipam-state"
	hlNetwork = "kindnet"
	hlConf    = `{"cniVersion":"1.0.0","name":"kindnet","plugins":[{"type":"host-local",
 "ipam":{"type":"host-local","dataDir":%q,"ranges":[[{"subnet":"10.244.7.0/24","rangeStart":"10.244.7.200","rangeEnd":"10.244.7.240"}]]}}]}`
)

func newNodeStore(t *testing.T, bin string) *nodeStore {
	t.Helper()
	root := t.TempDir()
	for p, content := range map[string]string{
		"etc/cni/net.d/10-kindnet.conflist": fmt.Sprintf(hlConf, hlDataDir),
		"run/.keep":                         "",
	} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(root, p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, p), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	list, err := libcni.ConfListFromBytes([]byte(fmt.Sprintf(hlConf, filepath.Join(root, hlDataDir))))
	if err != nil {
		t.Fatal(err)
	}
	return &nodeStore{root: root, list: list, next: netip.MustParseAddr("10.244.7.200"),
		cni: libcni.NewCNIConfigWithCacheDir([]string{bin}, filepath.Join(root, "var/lib/cni"), nil)}
}

// store is the store's directory on this host.
func (h *nodeStore) store() string { return filepath.Join(h.root, hlDataDir, hlNetwork) }

func (h *nodeStore) rt(p hlPod) *libcni.RuntimeConf {
	return &libcni.RuntimeConf{ContainerID: p.sandbox, NetNS: "/var/run/netns/" + p.sandbox, IfName: "eth0",
		Args: [][2]string{{"IgnoreUnknown", "1"}, {"K8S_POD_NAMESPACE", "default"}, {"K8S_POD_NAME", p.name},
			{"K8S_POD_UID", string(p.uid)}, {"IP", p.ip.String()}}}
}

// start starts pod default/hl-N on node-1 at the next address of the
// range: the Pod asks the kubelet stand-in for it, and host-local books it
// for the pod's sandbox. It returns once the pod runs.
func (h *nodeStore) start(t *testing.T, f *faultLab) hlPod {
	t.Helper()
	ctx := context.Background()
	p := hlPod{name: f.podName("hl"), ip: h.next}
	h.next = h.next.Next()
	p.sandbox = "sandbox-" + p.name
	created, err := f.e.api.CoreV1().Pods("default").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: p.name, Annotations: map[string]string{controlplane.IPAnnotation: p.ip.String()}},
		Spec: corev1.PodSpec{NodeName: f.e.node.Name, TerminationGracePeriodSeconds: new(int64),
			Containers: []corev1.Container{{Name: "web", Image: "web:1"}}}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.uid = created.UID
	res, err := h.cni.AddNetworkList(ctx, h.list, h.rt(p))
	if err != nil {
		t.Fatalf("CNI ADD for pod %s: %v", p.name, err)
	}
	r, err := current.NewResultFromResult(res)
	if err != nil || len(r.IPs) != 1 || r.IPs[0].Address.IP.String() != p.ip.String() {
		t.Fatalf("CNI ADD for pod %s asked %s: %v, %v", p.name, p.ip, res, err)
	}
	f.e.eventually(t, poll.Patience, "pod default/"+p.name+" running at "+p.ip.String(), func() bool {
		got, err := f.e.api.CoreV1().Pods("default").Get(ctx, p.name, metav1.GetOptions{})
		return err == nil && got.Status.Phase == corev1.PodRunning && got.Status.PodIP == p.ip.String()
	})
	h.running = append(h.running, p)
	return p
}

// stop deletes pod p as the kubelet does: its sandbox's CNI DEL, then the
// Pod.
func (h *nodeStore) stop(t *testing.T, f *faultLab, p hlPod) {
	t.Helper()
	if err := h.cni.DelNetworkList(context.Background(), h.list, h.rt(p)); err != nil {
		t.Fatalf("CNI DEL for pod %s: %v", p.name, err)
	}
	f.deletePod(t, "default", p.name)
	h.running = slices.DeleteFunc(h.running, func(q hlPod) bool { return q.name == p.name })
}

// wipe removes host-local's data directory, as a node restore cleaning CNI
// state does (seed 003): the pods run on, their addresses unbooked.
func (h *nodeStore) wipe(t *testing.T) {
	t.Helper()
	if err := os.RemoveAll(filepath.Join(h.root, hlDataDir)); err != nil {
		t.Fatal(err)
	}
}

// wiped is a wipe of the store as a leftover: resolved once the store
// books its running pods again; cleared by a wipe of whatever a phase
// left in its place, which the agent then books.
func (h *nodeStore) wiped() leftover {
	return leftover{
		resolved: func(*testing.T) bool { ok, _ := h.holds(h.running); return ok },
		clear: func(t *testing.T) {
			h.wipe(t)
			h.waitBooked(t, h.running, "the store booked again after a phase left it")
		},
	}
}

// booked are the store's reservations: the content of each file named by
// an address.
func (h *nodeStore) booked() map[netip.Addr]string {
	out := map[netip.Addr]string{}
	entries, err := os.ReadDir(h.store())
	if err != nil {
		return out
	}
	for _, e := range entries {
		a, err := netip.ParseAddr(e.Name())
		if err != nil || !e.Type().IsRegular() {
			// A named pipe would block the read: not a reservation.
			continue
		}
		b, _ := os.ReadFile(filepath.Join(h.store(), e.Name()))
		out[a] = string(b)
	}
	return out
}

// holds reports whether the store books exactly want, each for its pod's
// sandbox, and says what it books otherwise.
func (h *nodeStore) holds(want []hlPod) (bool, string) {
	got := h.booked()
	ok := len(got) == len(want)
	for _, p := range want {
		if got[p.ip] != p.sandbox+"\r\neth0" {
			ok = false
		}
	}
	var desc []string
	for a, c := range got {
		desc = append(desc, fmt.Sprintf("%s=%q", a, c))
	}
	slices.Sort(desc)
	return ok, "the store books " + strings.Join(desc, ", ")
}

// waitBooked waits until the store books exactly want.
func (h *nodeStore) waitBooked(t *testing.T, want []hlPod, what string) time.Time {
	t.Helper()
	poll.UntilNoted(t, poll.Patience, what, func() (bool, string) { return h.holds(want) })
	return time.Now()
}

// checkBooked fails the test unless the store books exactly want: a
// reservation written for a pod that is gone, or at a shared address, is
// a wrongful action.
func (h *nodeStore) wrongful(want []hlPod) int {
	n := 0
	got := h.booked()
	for a := range got {
		if !slices.ContainsFunc(want, func(p hlPod) bool { return p.ip == a }) {
			n++
		}
	}
	return n
}

// serfCluster is the Serf cluster of namespace gossip, as the controller's
// declaration reads it: pod serf-0's agent (the survivor, the oldest pod,
// asked for the member list through a pipe that counts who asks) and the
// members the cells add.
type serfCluster struct {
	f        *faultLab
	survivor *serftest.Agent
	rpc      *pipe
	// live are the members that must stay in the cluster, by name.
	live map[string]*serftest.Agent
	next byte
}

// survivorIP is the address of pod gossip/serf-0 and its agent.
var survivorIP = netip.MustParseAddr("127.0.0.140")

func newGossipLab(t *testing.T, f *faultLab) *serfCluster {
	t.Helper()
	g := &serfCluster{f: f, live: map[string]*serftest.Agent{}, next: 140}
	g.survivor = serftest.Start(t, serftest.Config{Name: "serf-0", Gossip: netip.AddrPortFrom(survivorIP, 0), RPC: netip.AddrPortFrom(survivorIP, 0)})
	g.live["serf-0"] = g.survivor
	ln, err := net.Listen("tcp", netip.AddrPortFrom(survivorIP, 0).String())
	if err != nil {
		t.Fatal(err)
	}
	g.rpc = newPipe(t, ln, g.survivor.RPC)
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	f.podAt(t, "gossip", "serf-0", survivorIP, time.Now().Add(-time.Hour), false,
		map[string]string{sourcegossip.AnnotationGossip: "serf", sourcegossip.AnnotationGossipPort: port})
	return g
}

// start starts an agent joined to the survivor, until the test ends.
func (g *serfCluster) start(t *testing.T, c serftest.Config) *serftest.Agent {
	t.Helper()
	a, err := serftest.Create(c)
	if err != nil {
		t.Fatal(err)
	}
	g.f.top.Cleanup(a.Kill)
	a.Join(t, g.survivor.Gossip)
	return a
}

// addr is the next loopback address of the cells' members.
func (g *serfCluster) addr() netip.Addr {
	g.next++
	return netip.AddrFrom4([4]byte{127, 0, 0, g.next})
}

// alive is how many members the controller read alive in the cluster.
func (g *serfCluster) alive() float64 {
	return g.f.ctrlMetrics().get("ghostwatch_gossip_members", `cluster="gossip/serf"`, `status="alive"`)
}

// join starts member name at addr, joined to the survivor, and waits
// until the controller has read it alive: from then on it has read it
// listed.
func (g *serfCluster) join(t *testing.T, name string, addr netip.Addr) *serftest.Agent {
	t.Helper()
	a := g.start(t, serftest.Config{Name: name, Gossip: netip.AddrPortFrom(addr, 0)})
	g.live[name] = a
	want := float64(len(g.live))
	poll.UntilNoted(t, poll.Patience, "the controller to read "+name+" alive", func() (bool, string) {
		n := g.alive()
		return n >= want, fmt.Sprintf("%v alive, want %v", n, want)
	})
	return a
}

// die kills member a without a leave: it fails, as a pod killed by SIGKILL
// or an OOM does.
func (g *serfCluster) die(a *serftest.Agent) {
	a.Kill()
	delete(g.live, a.Name)
}

// listed is the survivor's own view of name: its status, or "" when it no
// longer lists it.
func (g *serfCluster) listed(name string) string {
	for _, m := range g.survivor.Members() {
		if m.Name == name {
			return m.Status.String()
		}
	}
	return ""
}

// wrongful counts the live members the survivor no longer lists alive.
func (g *serfCluster) wrongful() (int, string) {
	n := 0
	var gone []string
	for name := range g.live {
		if s := g.listed(name); s != "alive" {
			n++
			gone = append(gone, fmt.Sprintf("%s (%q)", name, s))
		}
	}
	return n, strings.Join(gone, ", ")
}

// memberGhost is seed 000 made in the cluster, once armed: pod gossip/N
// with its member (named after its address) is listed; fire kills the
// member without a leave, deletes the pod, and gives the address to a new
// pod with a member of another name.
type memberGhost struct {
	g      *serfCluster
	name   string
	addr   netip.Addr
	pod    string
	member *serftest.Agent
	listed time.Time
}

func (g *serfCluster) arm(t *testing.T) *memberGhost {
	t.Helper()
	m := &memberGhost{g: g, addr: g.addr(), pod: g.f.podName("serf")}
	m.name = "node-" + strings.ReplaceAll(m.addr.String(), ".", "-")
	g.f.podAt(t, "gossip", m.pod, m.addr, time.Now().Add(-30*time.Minute), false, map[string]string{sourcegossip.AnnotationGossip: "serf"})
	m.member = g.join(t, m.name, m.addr)
	m.listed = time.Now()
	return m
}

func (m *memberGhost) fire(t *testing.T) {
	t.Helper()
	fired := time.Now()
	// Forced out, or withheld: one not forced out within three grace
	// periods will not be.
	m.g.f.leftovers = append(m.g.f.leftovers, leftover{resolved: func(*testing.T) bool {
		return m.gone() || time.Since(fired) > 3*faultGraceDur
	}})
	m.g.die(m.member)
	m.g.f.deletePod(t, "gossip", m.pod)
	// The new pod is created more than the clocks' offsets after the
	// controller first read the member listed (one machine: a second of
	// resolution each way), so that it is proven another identity.
	time.Sleep(time.Until(m.listed.Add(3 * time.Second)))
	next := m.pod + "-b"
	m.g.f.podAt(t, "gossip", next, m.addr, time.Now(), false, map[string]string{sourcegossip.AnnotationGossip: "serf"})
	m.g.live[next] = m.g.start(t, serftest.Config{Name: next, Gossip: netip.AddrPortFrom(m.addr, 0)})
}

// gone reports whether the survivor no longer lists the ghost.
func (m *memberGhost) gone() bool { return m.g.listed(m.name) == "" }

// The phases: one fault each, its cells' ghosts made together.

// within polls cond until it holds or d passes, and says when it held.
func within(d time.Duration, cond func() bool) (time.Time, bool) {
	deadline := time.Now().Add(d)
	for {
		if cond() {
			return time.Now(), true
		}
		if time.Now().After(deadline) {
			return time.Time{}, false
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// waitTrue waits with poll.Patience for cond, and returns when it held.
func waitTrue(t *testing.T, what string, cond func() bool) time.Time {
	t.Helper()
	poll.Until(t, poll.Patience, what, cond)
	return time.Now()
}

// waitEach waits until each of conds has held once, checking them in
// turn, and returns when each first did: the cells' remedies act
// independently, and each is timed on its own.
func waitEach(t *testing.T, what string, conds ...func() bool) []time.Time {
	t.Helper()
	at := make([]time.Time, len(conds))
	poll.UntilNoted(t, poll.Patience, what, func() (bool, string) {
		var pending []string
		for i, c := range conds {
			if at[i].IsZero() && c() {
				at[i] = time.Now()
			}
			if at[i].IsZero() {
				pending = append(pending, strconv.Itoa(i+1))
			}
		}
		return len(pending) == 0, "not yet: " + strings.Join(pending, ", ")
	})
	return at
}

// conntrackTable reads node-1's nf_conntrack_count and the kernel's
// nf_conntrack_max.
func (f *faultLab) conntrackTable(t *testing.T) (count, limit int) {
	t.Helper()
	read := func(name string) int {
		b, err := os.ReadFile("/proc/sys/net/netfilter/" + name)
		if err != nil {
			t.Fatal(err)
		}
		n, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil {
			t.Fatal(err)
		}
		return n
	}
	if err := f.e.node.Net.Do(func() error { count, limit = read("nf_conntrack_count"), read("nf_conntrack_max"); return nil }); err != nil {
		t.Fatal(err)
	}
	return count, limit
}

// filler is entry i of the entries a cell fills node-1's table with: an
// assured TCP flow between two addresses no Service or pod has, which
// no rule asks about and the kernel never evicts to make room; base
// keeps the fills of two cells apart.
func filler(base, i int) snapshot.Flow {
	src := netip.AddrFrom4([4]byte{10, byte(base + i>>16), byte(i >> 8), byte(i)})
	dst := netip.AddrFrom4([4]byte{10, 252, 0, 1})
	return snapshot.Flow{Proto: snapshot.ProtoTCP, State: "ESTABLISHED", Timeout: 600,
		Status: snapshot.StatusAssured | snapshot.StatusSeenReply,
		Orig:   snapshot.Tuple{Src: src, Dst: dst, SrcPort: 40000, DstPort: 9},
		Reply:  snapshot.Tuple{Src: dst, Dst: src, SrcPort: 9, DstPort: 40000}}
}

// createFlows creates flow(0) to flow(n-1) in node-1 with two writers,
// until the kernel refuses one, and returns how many it created.
func (f *faultLab) createFlows(t *testing.T, n int, flow func(int) snapshot.Flow) int {
	t.Helper()
	var created atomic.Int64
	var wg sync.WaitGroup
	var stop atomic.Bool
	for w := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			err := f.e.node.Net.Do(func() error {
				c, err := conntrack.Open()
				if err != nil {
					return err
				}
				defer c.Close()
				for i := w; i < n && !stop.Load(); i += 2 {
					fl := flow(i)
					if err := c.Create(&fl); err != nil {
						stop.Store(true)
						return nil
					}
					created.Add(1)
				}
				return nil
			})
			if err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	return int(created.Load())
}

// deleteFlows deletes flow(0) to flow(n-1) from node-1, 256 to a system
// call; those already gone are no matter.
func (f *faultLab) deleteFlows(t *testing.T, n int, flow func(int) snapshot.Flow) {
	t.Helper()
	err := f.e.node.Net.Do(func() error {
		c, err := conntrack.Open()
		if err != nil {
			return err
		}
		defer c.Close()
		batch := make([]snapshot.Flow, 0, 4096)
		for i := 0; i < n; i++ {
			batch = append(batch, flow(i))
			if len(batch) == cap(batch) || i == n-1 {
				if err := c.DeleteEach(batch, func(int, error) {}); err != nil {
					return err
				}
				batch = batch[:0]
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// procStatusOf reads a kB field of /proc/PID/status.
func procStatusOf(t *testing.T, pid int, field string) int {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, field+":"); ok {
			n, _ := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(v), " kB"))
			return n
		}
	}
	t.Fatalf("/proc/%d/status has no %s", pid, field)
	return 0
}
