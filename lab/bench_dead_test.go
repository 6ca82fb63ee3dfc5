package lab

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"

	"github.com/ghostwatch/ghostwatch/agent"
	"github.com/ghostwatch/ghostwatch/deploy"
	"github.com/ghostwatch/ghostwatch/internal/testenv"
	"github.com/ghostwatch/ghostwatch/lab/netbed"
	"github.com/ghostwatch/ghostwatch/rule"
	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source"
	"github.com/ghostwatch/ghostwatch/source/conntrack"
)

// deadGoal is the peak resident set the agent's pass and the scan must
// stay under on a node whose workloads all died: well under the
// DaemonSet's limit, so that the agent stays up when it matters most.
const deadGoal = 200 << 20

// BenchmarkDeadBackends is the worst hour of a node: every workload it
// talked to restarted elsewhere, and its table holds
// GHOSTWATCH_BENCH_DEAD_FLOWS entries (default 1,000,000) to
// GHOSTWATCH_BENCH_DEAD_BACKENDS dead backends (default 100,000), spread
// over the benchmarks' 100 Services, every one a stale flow. Two children
// of their own, so that each one's peak resident memory is its own:
//
//   - the agent as `ghostwatch agent` ships (report only), under the soft
//     memory limit it sets itself under the DaemonSet's (75 %: GOMEMLIMIT
//     in the child), from its start until two complete audits have judged
//     every backend (the first, then a scheduled one while the first's
//     findings stand): its peak RSS and the time to the first;
//   - the scan of the table's listing (`conntrack -L -o extended,id` in
//     the node), its JSON report written (to nowhere): its peak RSS.
//
// The goal is 200 MiB each (deadGoal), reported with the DaemonSet's
// limit, read from deploy/agent: scripts/bench.sh says whether it was met.
// Over the limit, where the kernel would kill the agent, the benchmark
// fails.
func BenchmarkDeadBackends(b *testing.B) {
	testenv.RequireRoot(b, "needs root: builds a node namespace and fills its conntrack table")
	n := envInt(b, "GHOSTWATCH_BENCH_DEAD_FLOWS", 1000000)
	dead := envInt(b, "GHOSTWATCH_BENCH_DEAD_BACKENDS", 100000)
	if dead > n || dead > 1<<20 {
		b.Fatalf("GHOSTWATCH_BENCH_DEAD_BACKENDS=%d: want at most the flows (%d) and at most %d", dead, n, 1<<20)
	}
	limit := agentMemoryLimit(b)
	b.Cleanup(raiseConntrackMax(b, n))
	bed, err := netbed.New(prefix())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { bed.Close() })
	node, err := bed.AddNode("node", netbed.NodeOptions{Addrs: []netip.Prefix{hostPfx(nodeIP)}})
	if err != nil {
		b.Fatal(err)
	}
	listing := filepath.Join(b.TempDir(), "conntrack.txt")
	for b.Loop() {
		fill(b, node, n, func(i int) snapshot.Flow { return deadFlow(i, dead) })
		out, err := os.Create(listing)
		if err != nil {
			b.Fatal(err)
		}
		cmd := exec.Command("ip", "netns", "exec", node.Name(), "conntrack", "-L", "-o", "extended,id")
		cmd.Stdout = out
		err = cmd.Run()
		out.Close()
		if err != nil {
			b.Fatalf("conntrack -L: %v", err)
		}
		env := []string{"GHOSTWATCH_BENCH_DEAD_FLOWS=" + strconv.Itoa(n), "GHOSTWATCH_BENCH_DEAD_BACKENDS=" + strconv.Itoa(dead)}
		ag := benchChild(b, node, "dead-agent", append(env, fmt.Sprintf("GOMEMLIMIT=%dB", limit/100*75))...)
		scan := benchChild(b, node, "dead-scan", append(env, "GHOSTWATCH_BENCH_LISTING="+listing)...)
		b.ReportMetric(float64(n), "flows")
		b.ReportMetric(float64(dead), "dead-backends")
		b.ReportMetric(float64(ag.HWMKiB)/1024, "agent-peak-MiB")
		b.ReportMetric(float64(ag.HWMKiB-ag.BaseKiB)/1024, "agent-added-peak-MiB")
		b.ReportMetric(float64(ag.ScanNS)/1e9, "agent-first-pass-s")
		b.ReportMetric(float64(scan.HWMKiB)/1024, "scan-peak-MiB")
		b.ReportMetric(float64(scan.HWMKiB-scan.BaseKiB)/1024, "scan-added-peak-MiB")
		b.ReportMetric(float64(scan.ScanNS)/1e9, "scan-s")
		b.ReportMetric(float64(deadGoal>>20), "goal-MiB")
		b.ReportMetric(float64(limit>>20), "limit-MiB")
		b.Logf("%d flows to %d dead backends: agent peak RSS %.1f MiB (%.1f before it; heap in use at the end %.1f MiB), first pass %s, %d findings of %d flows; scan peak RSS %.1f MiB (%.1f before it), %s, %d findings of %d flows; goal %d MiB, DaemonSet limit %d MiB",
			n, dead, float64(ag.HWMKiB)/1024, float64(ag.BaseKiB)/1024, float64(ag.HeapKiB)/1024, time.Duration(ag.ScanNS).Round(time.Millisecond), ag.Findings, ag.Flows,
			float64(scan.HWMKiB)/1024, float64(scan.BaseKiB)/1024, time.Duration(scan.ScanNS).Round(time.Millisecond), scan.Findings, scan.Flows,
			deadGoal>>20, limit>>20)
		if want := deadFindings(dead); ag.Findings != want || ag.Flows != n || scan.Findings != want || scan.Flows != n {
			b.Errorf("the agent made %d findings of %d flows and the scan %d of %d; want %d of %d each", ag.Findings, ag.Flows, scan.Findings, scan.Flows, want, n)
		}
		for name, kib := range map[string]int{"agent": ag.HWMKiB, "scan": scan.HWMKiB} {
			if int64(kib)*1024 > limit {
				b.Errorf("the %s peaked at %.1f MiB: over the DaemonSet's limit of %d MiB", name, float64(kib)/1024, limit>>20)
			}
		}
	}
}

// agentMemoryLimit is the memory limit of the agent's DaemonSet
// (deploy/agent), in bytes.
func agentMemoryLimit(b *testing.B) int64 {
	ms, err := deploy.Agent()
	if err != nil {
		b.Fatal(err)
	}
	for _, m := range ms {
		if ds, ok := m.Object.(*appsv1.DaemonSet); ok {
			for _, c := range ds.Spec.Template.Spec.Containers {
				if q, ok := c.Resources.Limits[corev1.ResourceMemory]; ok {
					return q.Value()
				}
			}
		}
	}
	b.Fatal("deploy/agent: the DaemonSet's container has no memory limit")
	return 0
}

// deadIP is dead backend k: 10.200.0.0 plus k, an address no pod holds and
// no EndpointSlice lists.
func deadIP(k int) netip.Addr {
	return netip.AddrFrom4([4]byte{10, byte(200 + k>>16), byte(k >> 8), byte(k)})
}

// deadFlow i of a table of flows to dead backends: a client
// (10.245.x.y:port, as ghostFlow's) through the ClusterIP of Service k %
// 100 to dead backend k = i % dead.
func deadFlow(i, dead int) snapshot.Flow {
	f := ghostFlow(i)
	k := i % dead
	f.Orig.Dst = svcIP(k % benchServices)
	f.Reply.Src = deadIP(k)
	return f
}

// deadFindings is how many findings the stale flows to dead backends
// make: a finding a dead backend, but one for all of a Service's when it
// has more than rule.DefaultOneByOne.
func deadFindings(dead int) int {
	n := 0
	for s := range benchServices {
		k := dead / benchServices
		if s < dead%benchServices {
			k++
		}
		if k > rule.DefaultOneByOne {
			k = 1
		}
		n += k
	}
	return n
}

// deadChildRun runs the child modes of BenchmarkDeadBackends; ok is false
// for a mode that is not one of them.
func deadChildRun(ctx context.Context, mode string, cl *Cluster, r *childReport) (ok bool, err error) {
	switch mode {
	case "dead-scan":
		heap := heapProfile{file: os.Getenv("GHOSTWATCH_BENCH_SCAN_HEAPPROFILE")}
		stop := make(chan struct{})
		defer close(stop)
		go func() {
			for {
				heap.sample()
				select {
				case <-stop:
					return
				case <-time.After(20 * time.Millisecond):
				}
			}
		}()
		start := time.Now()
		err := ghostScan(ctx, cl, r)
		r.ScanNS = int64(time.Since(start))
		return true, err
	case "dead-agent":
		return true, deadAgent(ctx, cl, r)
	}
	return false, nil
}

// deadAgent runs the agent, report only, until two complete audits have
// judged every flow to a dead backend stale: the first, then a scheduled
// one. r.ScanNS is the time to the first.
func deadAgent(ctx context.Context, cl *Cluster, r *childReport) error {
	n, err := strconv.Atoi(os.Getenv("GHOSTWATCH_BENCH_DEAD_FLOWS"))
	if err != nil {
		return fmt.Errorf("GHOSTWATCH_BENCH_DEAD_FLOWS: %w", err)
	}
	conn, sub, err := openTableHere()
	if err != nil {
		return err
	}
	defer conn.Close()
	defer sub.Close()
	rules := nodeRules()
	reg := prometheus.NewRegistry()
	m := agent.NewMetrics(reg, rules)
	a := agent.New(agent.Config{
		NodeName:      labNode,
		Sources:       []source.Source{clusterSource(cl), &conntrack.Watch{Table: conn, Events: sub, Metrics: conntrack.NewMetrics(reg, "ghostwatch")}},
		Rules:         rules,
		AuditInterval: 5 * time.Second,
		Metrics:       m,
	})
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	heap := heapProfile{file: os.Getenv("GHOSTWATCH_BENCH_HEAPPROFILE")}
	deadline := time.Now().Add(15 * time.Minute)
	// stale is how many flows the last complete audit's findings hold, as
	// the agent's gauge counts them.
	stale := func() int {
		mfs, err := reg.Gather()
		if err != nil {
			return -1
		}
		held := 0
		for _, mf := range mfs {
			if mf.GetName() == "ghostwatch_conntrack_stale_entries" {
				for _, mt := range mf.GetMetric() {
					held += int(mt.GetGauge().GetValue())
				}
			}
		}
		return held
	}
	// The series are gathered only after an audit: gathering costs the
	// process memory of its own, which would be counted as the agent's.
	// complete counts the complete audits seen to judge every flow.
	var last time.Time
	complete := 0
	for {
		st := a.Status()
		if !st.LastAudit.Equal(last) {
			last = st.LastAudit
			if st.Degraded == "" && stale() == n {
				complete++
				if r.ScanNS == 0 {
					r.ScanNS = int64(time.Since(start))
				}
			}
		}
		if complete >= 2 {
			break
		}
		heap.sample()
		select {
		case err := <-done:
			return fmt.Errorf("the agent stopped: %v", err)
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the agent had not judged every flow to a dead backend twice after 15 minutes: %d judged stale, %d complete audits that did, %+v", stale(), complete, st)
		}
	}
	r.Findings, r.Flows = a.Status().Findings, stale()
	return nil
}
