package lab

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ghostwatch/ghostwatch/agent"
	"github.com/ghostwatch/ghostwatch/lab/netbed"
	"github.com/ghostwatch/ghostwatch/remedy"
	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source"
	"github.com/ghostwatch/ghostwatch/source/conntrack"
	"github.com/ghostwatch/ghostwatch/source/kube"
)

// timedDeleter deletes through a netlink socket in the node and counts the
// deletes per backend, waking whoever waits for a backend's last flow.
type timedDeleter struct {
	conn *conntrack.Conn
	mu   sync.Mutex
	n    map[netip.Addr]int
	all  int
	cond *sync.Cond
}

func newTimedDeleter(conn *conntrack.Conn) *timedDeleter {
	d := &timedDeleter{conn: conn, n: map[netip.Addr]int{}}
	d.cond = sync.NewCond(&d.mu)
	return d
}

func (d *timedDeleter) Delete(f *snapshot.Flow) error {
	if err := d.conn.Delete(f); err != nil {
		return err
	}
	d.mu.Lock()
	d.n[f.Reply.Src]++
	d.all++
	d.cond.Broadcast()
	d.mu.Unlock()
	return nil
}

// waitFor blocks until at least want flows to backend were deleted, or the
// deadline passes.
func (d *timedDeleter) waitFor(backend netip.Addr, want int, deadline time.Duration) bool {
	timer := time.AfterFunc(deadline, func() { d.mu.Lock(); d.cond.Broadcast(); d.mu.Unlock() })
	defer timer.Stop()
	end := time.Now().Add(deadline)
	d.mu.Lock()
	defer d.mu.Unlock()
	for d.n[backend] < want {
		if time.Now().After(end) {
			return false
		}
		d.cond.Wait()
	}
	return true
}

func (d *timedDeleter) total() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.all
}

// benchAgent runs the agent on the node as `ghostwatch agent` would:
// informers, conntrack events subscribed before the first dump, and, when
// del is set, the stale-nat-flow remedy without a grace period.
func benchAgent(b *testing.B, node *netbed.Node, cl *Cluster, cfg agent.Config, del *timedDeleter) (*agent.Agent, *agent.Metrics) {
	var sub *conntrack.Subscription
	if err := node.Do(func() error {
		var err error
		sub, err = conntrack.Subscribe()
		return err
	}); err != nil {
		b.Fatal(err)
	}
	m := agent.NewMetrics(prometheus.NewRegistry())
	cfg.NodeName = labNode
	cfg.Informers = kube.NewInformers(cl.Client, 0)
	cfg.Conntrack = func(keep conntrack.Keep) source.Source {
		return inNamespace{node, &conntrack.KernelSource{Keep: keep}}
	}
	cfg.FlowEvents = sub
	cfg.Metrics = m
	if del != nil {
		cfg.Remedy = &remedy.StaleFlows{Budget: &remedy.Budget{Max: 1 << 30, Interval: time.Minute}, Deleter: del}
	}
	a := agent.New(cfg)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		a.Run(ctx)
	}()
	b.Cleanup(func() {
		cancel()
		<-done
		sub.Close()
	})
	return a, m
}

// BenchmarkBackendDeath measures how long the agent takes, from the
// moment a backend pod is deleted in the API, to delete every flow of that
// backend from a table of GHOSTWATCH_BENCH_FLOWS entries (default 100,000),
// judging from its index and not from a dump. Each iteration kills another
// of the 300 backends (about n/375 flows each); the report gives p50 and
// p99. Debounce is 1ms: the agent's default of 50ms, which gathers bursts
// of changes into one audit, would be measured instead.
func BenchmarkBackendDeath(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root: builds a node namespace and fills its conntrack table")
	}
	n := benchFlows(b)
	node, cl := benchNode(b, n)
	perBackend := map[netip.Addr]int{}
	initialStale := 0
	for i := 0; i < n; i++ {
		f := benchFlow(i, benchServices)
		if f.DNAT() {
			perBackend[f.Reply.Src]++
			if f.Reply.Src.As4()[3] == 9 {
				initialStale++
			}
		}
	}
	var conn *conntrack.Conn
	if err := node.Do(func() error {
		var err error
		conn, err = conntrack.Open()
		return err
	}); err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	del := newTimedDeleter(conn)
	_, m := benchAgent(b, node, cl, agent.Config{Debounce: time.Millisecond, AuditInterval: time.Hour}, del)
	// The flows to the pods deleted before the agent started go first.
	deadline := time.Now().Add(5 * time.Minute)
	for del.total() < initialStale {
		if time.Now().After(deadline) {
			b.Fatalf("the agent deleted %d of the %d stale flows present at start", del.total(), initialStale)
		}
		time.Sleep(10 * time.Millisecond)
	}

	// The backends that have flows, in the order they are killed.
	type backend struct{ s, p int }
	var victims []backend
	for p := 1; p <= 3; p++ {
		for s := 0; s < benchServices; s++ {
			if perBackend[podIP(s, p)] > 0 {
				victims = append(victims, backend{s, p})
			}
		}
	}
	ctx := context.Background()
	var lat []time.Duration
	i := 0
	for b.Loop() {
		if i >= len(victims) {
			b.Fatalf("only %d backends to kill: use -benchtime %dx or less", len(victims), len(victims))
		}
		s, p := victims[i].s, victims[i].p
		i++
		ip := podIP(s, p)
		start := time.Now()
		if err := cl.DeletePod(ctx, fmt.Sprintf("ns%d", s), fmt.Sprintf("svc-%d", p)); err != nil {
			b.Fatal(err)
		}
		if !del.waitFor(ip, perBackend[ip], time.Minute) {
			b.Fatalf("the flows of %s were not all deleted within a minute", ip)
		}
		lat = append(lat, time.Since(start))
	}
	sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
	pct := func(q float64) float64 { return float64(lat[int(q*float64(len(lat)-1))]) / 1e6 }
	b.ReportMetric(pct(0.5), "p50-ms")
	b.ReportMetric(pct(0.99), "p99-ms")
	b.ReportMetric(float64(perBackend[podIP(victims[0].s, victims[0].p)]), "flows/backend")
	b.ReportMetric(testutil.ToFloat64(m.IndexFlows), "indexed")
}

// BenchmarkAgentSteadyState measures what the agent costs while nothing
// changes, on a table of GHOSTWATCH_BENCH_FLOWS entries (default 100,000):
// CPU time over wall time of the whole process, and its resident memory.
// Each iteration is one second of doing nothing; the full audit runs every
// GHOSTWATCH_BENCH_AUDIT_INTERVAL (default 2m, the agent's default).
func BenchmarkAgentSteadyState(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("needs root: builds a node namespace and fills its conntrack table")
	}
	n := benchFlows(b)
	interval := 2 * time.Minute
	if s := os.Getenv("GHOSTWATCH_BENCH_AUDIT_INTERVAL"); s != "" {
		var err error
		if interval, err = time.ParseDuration(s); err != nil {
			b.Fatalf("GHOSTWATCH_BENCH_AUDIT_INTERVAL: %v", err)
		}
	}
	node, cl := benchNode(b, n)
	a, m := benchAgent(b, node, cl, agent.Config{AuditInterval: interval}, nil)
	deadline := time.Now().Add(5 * time.Minute)
	for a.Status().LastAudit.IsZero() || a.Status().Degraded != "" || testutil.ToFloat64(m.IndexFlows) == 0 {
		if time.Now().After(deadline) {
			b.Fatalf("no complete audit: %+v", a.Status())
		}
		time.Sleep(10 * time.Millisecond)
	}
	cpu0, wall0 := cpuTime(b), time.Now()
	for b.Loop() {
		time.Sleep(time.Second) // the measurement window: the agent idles
	}
	cpu, wall := cpuTime(b)-cpu0, time.Since(wall0)
	b.ReportMetric(100*cpu.Seconds()/wall.Seconds(), "cpu-%")
	b.ReportMetric(rssMiB(b), "rss-MiB")
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	b.ReportMetric(float64(ms.HeapInuse)/(1<<20), "heap-MiB")
	b.ReportMetric(testutil.ToFloat64(m.IndexFlows), "indexed")
}

func cpuTime(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// rssMiB is the process's resident set now (VmRSS).
func rssMiB(b *testing.B) float64 {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			kb, err := strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")))
			if err != nil {
				b.Fatal(err)
			}
			return float64(kb) / 1024
		}
	}
	b.Fatal("no VmRSS in /proc/self/status")
	return 0
}

// maxRSSMiB is the largest resident set the process has had (ru_maxrss).
func maxRSSMiB(b *testing.B) float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return float64(ru.Maxrss) / 1024
}
