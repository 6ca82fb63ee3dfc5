package lab

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ghostwatch/ghostwatch/agent"
	"github.com/ghostwatch/ghostwatch/internal/poll"
	"github.com/ghostwatch/ghostwatch/internal/testenv"
	"github.com/ghostwatch/ghostwatch/lab/netbed"
	"github.com/ghostwatch/ghostwatch/remedy"
	"github.com/ghostwatch/ghostwatch/rule"
	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source"
	"github.com/ghostwatch/ghostwatch/source/conntrack"
)

// timedDeleter deletes through a netlink socket in the node, counts the
// deletes per backend and notes when each backend's first one happened. It
// wakes whoever waits for a backend only once that backend's last flow is
// gone, so that waiting costs the agent nothing while it deletes.
type timedDeleter struct {
	conn  *conntrack.Conn
	mu    sync.Mutex
	n     map[netip.Addr]int
	first map[netip.Addr]time.Time
	last  map[netip.Addr]time.Time
	want  map[netip.Addr]int
	all   int
	cond  *sync.Cond
}

func newTimedDeleter(conn *conntrack.Conn) *timedDeleter {
	d := &timedDeleter{conn: conn, n: map[netip.Addr]int{}, first: map[netip.Addr]time.Time{}, last: map[netip.Addr]time.Time{}, want: map[netip.Addr]int{}}
	d.cond = sync.NewCond(&d.mu)
	return d
}

// Dump reads the table, as the agent's full audits do.
func (d *timedDeleter) Dump(ctx context.Context, fn func(*snapshot.Flow) error) (int, error) {
	return d.conn.Dump(ctx, fn)
}

// Get reads the entry back, as the remedy does when a delete as judged
// finds nothing (to tell gone from replaced), and in a dry run.
func (d *timedDeleter) Get(f *snapshot.Flow) (snapshot.Flow, error) { return d.conn.Get(f) }

func (d *timedDeleter) Delete(f *snapshot.Flow) error {
	if err := d.conn.Delete(f); err != nil {
		return err
	}
	d.deleted(f)
	return nil
}

// GetEach and DeleteEach read back and delete many entries a system call,
// as the agent's table does.
func (d *timedDeleter) GetEach(fs []snapshot.Flow, fn func(int, snapshot.Flow, error)) error {
	return d.conn.GetEach(fs, fn)
}

func (d *timedDeleter) DeleteEach(fs []snapshot.Flow, fn func(int, error)) error {
	return d.conn.DeleteEach(fs, func(i int, err error) {
		if err == nil {
			d.deleted(&fs[i])
		}
		fn(i, err)
	})
}

// DeleteJudgedEach deletes many entries a system call as they were
// judged (by reply tuple, zone and ID), as the agent's table does.
func (d *timedDeleter) DeleteJudgedEach(fs []snapshot.Flow, fn func(int, error)) error {
	return d.conn.DeleteJudgedEach(fs, func(i int, err error) {
		if err == nil {
			d.deleted(&fs[i])
		}
		fn(i, err)
	})
}

// deleted notes that f was deleted.
func (d *timedDeleter) deleted(f *snapshot.Flow) {
	now := time.Now()
	d.mu.Lock()
	defer d.mu.Unlock()
	b := f.Reply.Src
	if d.n[b] == 0 {
		d.first[b] = now
	}
	d.n[b]++
	d.last[b] = now
	d.all++
	if w, ok := d.want[b]; !ok || d.n[b] >= w {
		d.cond.Broadcast()
	}
}

// waitFor blocks until at least want flows to backend were deleted, or the
// deadline passes. It returns when the first of them was deleted.
func (d *timedDeleter) waitFor(backend netip.Addr, want int, deadline time.Duration) (first time.Time, ok bool) {
	timer := time.AfterFunc(deadline, func() { d.mu.Lock(); d.cond.Broadcast(); d.mu.Unlock() })
	defer timer.Stop()
	end := time.Now().Add(deadline)
	d.mu.Lock()
	defer d.mu.Unlock()
	d.want[backend] = want
	defer delete(d.want, backend)
	for d.n[backend] < want {
		if time.Now().After(end) {
			return time.Time{}, false
		}
		d.cond.Wait()
	}
	return d.first[backend], true
}

// lastAt is when the last flow to backend was deleted.
func (d *timedDeleter) lastAt(backend netip.Addr) time.Time {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.last[backend]
}

func (d *timedDeleter) total() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.all
}

// benchAgent runs the agent on the node as `ghostwatch agent` would:
// informers, conntrack events subscribed before the first dump, and, when
// del is set, the stale-nat-flow remedy without a grace period.
func benchAgent(b *testing.B, node *netbed.Node, cl *Cluster, cfg agent.Config, del *timedDeleter) (*agent.Agent, *conntrack.Metrics) {
	return benchAgentWith(b, node, cl, cfg, del, remedy.Settings{Budget: 1 << 30, BudgetInterval: time.Minute})
}

// benchAgentWith is benchAgent with the remedy's settings st.
func benchAgentWith(b *testing.B, node *netbed.Node, cl *Cluster, cfg agent.Config, del *timedDeleter, st remedy.Settings) (*agent.Agent, *conntrack.Metrics) {
	var sub *conntrack.Subscription
	if err := node.Do(func() error {
		var err error
		sub, err = conntrack.Subscribe()
		return err
	}); err != nil {
		b.Fatal(err)
	}
	rules := nodeRules()
	m := agent.NewMetrics(prometheus.NewRegistry(), rules)
	cfg.NodeName = labNode
	var tab conntrack.Table
	if del != nil {
		tab = del
	} else {
		conn, err := openIn(node)()
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { conn.Close() })
		tab = conn
	}
	cm := conntrack.NewMetrics(prometheus.NewRegistry(), "ghostwatch")
	table := &conntrack.Watch{Table: tab, Events: sub, Metrics: cm}
	cfg.Sources = []source.Source{clusterSource(cl), table}
	cfg.Rules = rules
	cfg.Metrics = m
	if del != nil {
		rems, err := remedy.Build(rules, []string{rule.StaleNATFlowID}, st, &remedy.Flows{Table: table})
		if err != nil {
			b.Fatal(err)
		}
		cfg.Remedies = rems
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
	return a, cm
}

// BenchmarkBackendDeath measures how long the agent takes, from the
// moment a backend pod is deleted in the API, to delete every flow of that
// backend from a table of GHOSTWATCH_BENCH_FLOWS entries (default 100,000),
// judging from its index and not from a dump. Each iteration kills another
// of the 300 backends (about n/375 flows each); the report gives p50 and
// p99. Debounce is 1ms: the agent's default of 50ms, which gathers bursts
// of changes into one audit, would be measured instead.
func BenchmarkBackendDeath(b *testing.B) {
	testenv.RequireRoot(b, "needs root: builds a node namespace and fills its conntrack table")
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
	poll.UntilNoted(b, 5*time.Minute, fmt.Sprintf("the agent to delete the %d stale flows present at start", initialStale), func() (bool, string) {
		n := del.total()
		return n >= initialStale, fmt.Sprintf("%d deleted", n)
	})

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
	// Per kill: the whole (pod deleted in the API to last flow deleted),
	// and its parts: the API write (the pod, then the EndpointSlices, as
	// the controller would), the agent's reaction (informer events, the
	// index look-up, judging, the re-check) up to the first delete, and
	// the deletes themselves.
	var whole, api, react, deletes []time.Duration
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
		written := time.Now()
		first, ok := del.waitFor(ip, perBackend[ip], time.Minute)
		if !ok {
			b.Fatalf("the flows of %s were not all deleted within a minute", ip)
		}
		end := time.Now()
		whole = append(whole, end.Sub(start))
		api = append(api, written.Sub(start))
		react = append(react, first.Sub(written))
		deletes = append(deletes, end.Sub(first))
	}
	for _, m := range []struct {
		name string
		d    []time.Duration
	}{{"", whole}, {"api-", api}, {"react-", react}, {"delete-", deletes}} {
		b.ReportMetric(float64(percentile(m.d, 0.5))/1e6, m.name+"p50-ms")
		b.ReportMetric(float64(percentile(m.d, 0.99))/1e6, m.name+"p99-ms")
	}
	b.ReportMetric(float64(perBackend[podIP(victims[0].s, victims[0].p)]), "flows/backend")
	b.ReportMetric(testutil.ToFloat64(m.IndexFlows), "indexed")
}

// BenchmarkAgentSteadyState measures what the agent costs while nothing
// changes, on a table of GHOSTWATCH_BENCH_FLOWS entries (default 100,000):
// CPU time over wall time, and resident memory, of a process that runs the
// agent and nothing else (benchChild). After the first complete audit, the
// agent idles for GHOSTWATCH_BENCH_IDLE (default 20s) per iteration; the
// full audit runs every GHOSTWATCH_BENCH_AUDIT_INTERVAL (default 2m, the
// agent's default).
func BenchmarkAgentSteadyState(b *testing.B) {
	testenv.RequireRoot(b, "needs root: builds a node namespace and fills its conntrack table")
	n := benchFlows(b)
	interval, idle := envDuration(b, "GHOSTWATCH_BENCH_AUDIT_INTERVAL", 2*time.Minute), envDuration(b, "GHOSTWATCH_BENCH_IDLE", 20*time.Second)
	node, _ := benchNode(b, n)
	var cpu, rss, anon, heap, peak, indexed float64
	for b.Loop() {
		r := benchChild(b, node, "agent", "GHOSTWATCH_BENCH_AUDIT_INTERVAL="+interval.String(), "GHOSTWATCH_BENCH_IDLE="+idle.String())
		cpu, indexed = max(cpu, r.CPUPercent), r.Indexed
		rss, peak = max(rss, float64(r.RSSKiB)/1024), max(peak, float64(r.HWMKiB)/1024)
		anon, heap = max(anon, float64(r.AnonKiB)/1024), max(heap, float64(r.HeapKiB)/1024)
	}
	b.ReportMetric(cpu, "cpu-%")
	b.ReportMetric(rss, "rss-MiB")
	b.ReportMetric(peak, "peak-rss-MiB")
	b.ReportMetric(anon, "anon-rss-MiB")
	b.ReportMetric(heap, "heap-MiB")
	b.ReportMetric(indexed, "indexed")
}

// envDuration reads a duration from the environment, def when unset.
func envDuration(b *testing.B, name string, def time.Duration) time.Duration {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		b.Fatalf("%s=%q: %v", name, s, err)
	}
	return d
}
