package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ghostwatch/ghostwatch/agent"
	"github.com/ghostwatch/ghostwatch/audit"
	"github.com/ghostwatch/ghostwatch/lab/netbed"
	"github.com/ghostwatch/ghostwatch/remedy"
	"github.com/ghostwatch/ghostwatch/rule"
	"github.com/ghostwatch/ghostwatch/sink"
	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source"
	"github.com/ghostwatch/ghostwatch/source/conntrack"
	"github.com/ghostwatch/ghostwatch/source/kube/live"
)

// daemonSetLimit is the agent DaemonSet's memory limit (deploy/agent).
const daemonSetLimit = 256 << 20

// ghostBackend is the dead backend of BenchmarkOneDeadBackend: Service 0's
// pod 9, which no pod holds and no EndpointSlice lists.
var ghostBackend = podIP(0, 9)

// BenchmarkOneDeadBackend is what bad news costs: a node whose table holds
// GHOSTWATCH_BENCH_GHOST_FLOWS entries (default 1,000,000), every one a
// connection through Service 0's ClusterIP to one dead backend (a busy
// database, a CoreDNS replica gone). Two children of their own, so that
// each one's peak resident memory is its own:
//
//   - the scan of the table as a text file (`conntrack -L -o extended,id`
//     in the node), its JSON report written (to nowhere): its findings and
//     peak RSS;
//   - the agent, with the stale-nat-flow remedy, --max-flows-per-backend
//     raised to the number of flows (the default, 10,000, would refuse so
//     many as a misread) and the soft memory limit the agent sets itself
//     under the DaemonSet's 256 MiB (75 %: GOMEMLIMIT in the child), from
//     its start until it has deleted every flow: the time and the peak RSS.
//
// Both must stay under the DaemonSet's limit: the benchmark fails if not.
func BenchmarkOneDeadBackend(b *testing.B) {
	n := envInt(b, "GHOSTWATCH_BENCH_GHOST_FLOWS", 1000000)
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
		fill(b, node, n, ghostFlow)
		out, err := os.Create(listing)
		if err != nil {
			b.Fatal(err)
		}
		cmd := exec.Command("ip", "netns", "exec", node.Name(), "conntrack", "-L", "-o", "extended,id")
		cmd.Stdout = out
		if err := cmd.Run(); err != nil {
			b.Fatalf("conntrack -L: %v", err)
		}
		out.Close()
		count := "GHOSTWATCH_BENCH_GHOST_FLOWS=" + strconv.Itoa(n)
		scan := benchChild(b, node, "ghost-scan", count, "GHOSTWATCH_BENCH_LISTING="+listing)
		clear := benchChild(b, node, "ghost-clear", count, fmt.Sprintf("GOMEMLIMIT=%dB", daemonSetLimit/100*75))
		b.ReportMetric(float64(scan.HWMKiB)/1024, "scan-peak-MiB")
		b.ReportMetric(float64(clear.HWMKiB)/1024, "agent-peak-MiB")
		b.ReportMetric(time.Duration(clear.ClearNS).Seconds(), "agent-clear-s")
		b.ReportMetric(float64(clear.Cleared), "cleared")
		b.Logf("%d flows to %s: scan peak RSS %.1f MiB (%.1f before it; %d findings of %d flows); agent peak RSS %.1f MiB (%.1f before it; heap in use at the end %.1f MiB), %d flows deleted in %s",
			n, ghostBackend, float64(scan.HWMKiB)/1024, float64(scan.BaseKiB)/1024, scan.Findings, scan.Flows,
			float64(clear.HWMKiB)/1024, float64(clear.BaseKiB)/1024, float64(clear.HeapKiB)/1024, clear.Cleared, time.Duration(clear.ClearNS).Round(time.Millisecond))
		if scan.Flows != n || clear.Cleared != n {
			b.Errorf("the scan's findings held %d flows and the agent deleted %d, want %d each", scan.Flows, clear.Cleared, n)
		}
		for name, kib := range map[string]int{"scan": scan.HWMKiB, "agent": clear.HWMKiB} {
			if kib*1024 > daemonSetLimit {
				b.Errorf("the %s peaked at %.1f MiB: over the DaemonSet's limit of 256 MiB", name, float64(kib)/1024)
			}
		}
	}
}

func envInt(b *testing.B, name string, def int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	n, err := strconv.Atoi(s)
	if err != nil || n <= 0 {
		b.Fatalf("%s=%q: want a positive number", name, s)
	}
	return n
}

// ghostFlow i is a connection from client 10.245.x.y:port through Service
// 0's ClusterIP to the dead backend.
func ghostFlow(i int) snapshot.Flow {
	client := netip.AddrFrom4([4]byte{10, 245, byte(i >> 16), byte(i >> 8)})
	sport := uint16(1024 + i%60000)
	if i/60000 > 0 {
		client = netip.AddrFrom4([4]byte{10, byte(128 + i/60000), byte(i >> 8), byte(i)})
	}
	return snapshot.Flow{Proto: snapshot.ProtoTCP, State: "ESTABLISHED", Timeout: 3600,
		Status: snapshot.StatusAssured | snapshot.StatusSeenReply,
		Orig:   snapshot.Tuple{Src: client, Dst: svcIP(0), SrcPort: sport, DstPort: 80},
		Reply:  snapshot.Tuple{Src: ghostBackend, Dst: client, SrcPort: 8080, DstPort: sport}}
}

// ghostScan scans the listing GHOSTWATCH_BENCH_LISTING names against the
// benchmark's cluster, and writes the JSON report to nowhere.
func ghostScan(ctx context.Context, cl *Cluster, r *childReport) error {
	rules := rule.All(rule.Config{})
	res := audit.Run(ctx, audit.Config{
		NodeName: labNode,
		Sources: []source.Source{&live.APISource{Client: cl.Client, Timeout: 30 * time.Second},
			&conntrack.FileSource{Path: os.Getenv("GHOSTWATCH_BENCH_LISTING")}},
		Rules: rules,
	})
	if err := res.Incomplete(); err != nil {
		return err
	}
	if err := sink.JSON(io.Discard, &res.Report); err != nil {
		return err
	}
	r.Findings, r.Seen, r.Flows = len(res.Findings), res.Snapshot.Conntrack.Seen, heldFlows(res)
	return nil
}

// countingTable counts the entries deleted from a table.
type countingTable struct {
	*conntrack.Conn
	deleted atomic.Int64
}

func (t *countingTable) Delete(f *snapshot.Flow) error {
	err := t.Conn.Delete(f)
	if err == nil {
		t.deleted.Add(1)
	}
	return err
}

// DeleteEach counts as Delete does: the Conn's own, which the remedy
// prefers, would delete uncounted.
func (t *countingTable) DeleteEach(fs []snapshot.Flow, fn func(int, error)) error {
	return t.Conn.DeleteEach(fs, func(i int, err error) {
		if err == nil {
			t.deleted.Add(1)
		}
		fn(i, err)
	})
}

// DeleteJudgedEach counts as Delete does: the remedy deletes as judged
// when the table can.
func (t *countingTable) DeleteJudgedEach(fs []snapshot.Flow, fn func(int, error)) error {
	return t.Conn.DeleteJudgedEach(fs, func(i int, err error) {
		if err == nil {
			t.deleted.Add(1)
		}
		fn(i, err)
	})
}

// ghostClear runs the agent, as `ghostwatch agent --remedy=stale-nat-flow
// --grace=1s --max-flows-per-backend=N` builds it, until it has deleted
// GHOSTWATCH_BENCH_GHOST_FLOWS flows.
func ghostClear(ctx context.Context, cl *Cluster, r *childReport) error {
	n, err := strconv.Atoi(os.Getenv("GHOSTWATCH_BENCH_GHOST_FLOWS"))
	if err != nil {
		return fmt.Errorf("GHOSTWATCH_BENCH_GHOST_FLOWS: %w", err)
	}
	conn, sub, err := openTableHere()
	if err != nil {
		return err
	}
	defer conn.Close()
	defer sub.Close()
	tab := &countingTable{Conn: conn}
	rules := nodeRules()
	reg := prometheus.NewRegistry()
	watch := &conntrack.Watch{Table: tab, Events: sub, Metrics: conntrack.NewMetrics(reg, sink.Namespace)}
	rems, err := remedy.Build(rules, []string{rule.StaleNATFlowID}, remedy.Settings{
		Grace: remedy.MinGrace, Budget: remedy.DefaultBudget, BudgetInterval: remedy.DefaultBudgetInterval, MaxPerGroup: n,
	}, &remedy.Flows{Table: watch})
	if err != nil {
		return err
	}
	a := agent.New(agent.Config{
		NodeName: labNode,
		Sources:  []source.Source{clusterSource(cl), watch},
		Rules:    rules,
		Remedies: rems,
		Metrics:  agent.NewMetrics(reg, rules),
	})
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := time.Now()
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	deadline := time.Now().Add(10 * time.Minute)
	heap := heapProfile{file: os.Getenv("GHOSTWATCH_BENCH_HEAPPROFILE")}
	for tab.deleted.Load() < int64(n) {
		heap.sample()
		select {
		case err := <-done:
			return fmt.Errorf("the agent stopped after deleting %d flows: %v", tab.deleted.Load(), err)
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return errors.New("the agent had not deleted every flow after 10 minutes: " + strconv.FormatInt(tab.deleted.Load(), 10))
		}
	}
	r.ClearNS = int64(time.Since(start))
	r.Cleared = int(tab.deleted.Load())
	return nil
}

// heapProfile writes the heap profile of the largest heap sampled to
// file (GHOSTWATCH_BENCH_HEAPPROFILE), when one is named: a child's
// profile at its peak.
type heapProfile struct {
	file string
	most uint64
}

// sample writes the profile when the heap in use grew 8 MiB past the
// largest written.
func (h *heapProfile) sample() {
	if h.file == "" {
		return
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	if ms.HeapInuse <= h.most+8<<20 {
		return
	}
	h.most = ms.HeapInuse
	if f, err := os.Create(h.file); err == nil {
		pprof.WriteHeapProfile(f)
		f.Close()
	}
}
