package lab

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/ghostwatch/ghostwatch/agent"
	"github.com/ghostwatch/ghostwatch/audit"
	"github.com/ghostwatch/ghostwatch/finding"
	"github.com/ghostwatch/ghostwatch/lab/netbed"
	"github.com/ghostwatch/ghostwatch/rule"
	"github.com/ghostwatch/ghostwatch/source"
	"github.com/ghostwatch/ghostwatch/source/conntrack"
	"github.com/ghostwatch/ghostwatch/source/kube/live"
)

// The memory a benchmark reports must be the scan's or the agent's, not
// that of the process that filled a million-entry table. So the benchmarks
// run the measured part in a child: this test binary again, started with
// `ip netns exec NODE` (the whole process in the node's namespace) and
// benchChildEnv naming what to do. The child builds the same cluster,
// does its part, and prints one line: benchChildMarker and a JSON
// childReport, measured from inside (its own VmHWM, VmRSS and CPU time,
// which a fresh exec starts from zero).
const (
	benchChildEnv    = "GHOSTWATCH_BENCH_CHILD"
	benchChildMarker = "ghostwatch-bench-child: "
)

type childReport struct {
	// ScanNS is the duration of the scan (mode scan).
	ScanNS int64 `json:"scan_ns,omitempty"`
	// Findings and Seen of the scan.
	Findings int `json:"findings,omitempty"`
	Seen     int `json:"seen,omitempty"`
	// CPUPercent of one core over the idle window (mode agent).
	CPUPercent float64 `json:"cpu_percent,omitempty"`
	// Flows the findings held (modes scan and ghost-scan); Cleared the flows the
	// agent deleted and ClearNS how long from its start until the last
	// (mode ghost-clear).
	Flows   int   `json:"flows,omitempty"`
	Cleared int   `json:"cleared,omitempty"`
	ClearNS int64 `json:"clear_ns,omitempty"`
	// Indexed flows at the end (mode agent).
	Indexed float64 `json:"indexed,omitempty"`
	// BaseKiB is VmHWM once the cluster is built, before the measured part.
	BaseKiB int `json:"base_kib"`
	// HWMKiB is the peak resident set of the whole child; RSSKiB its
	// resident set at the end.
	HWMKiB int `json:"hwm_kib"`
	RSSKiB int `json:"rss_kib"`
	// AnonKiB is the part of RSSKiB that is the process's own memory (heap,
	// stacks), not pages of the binary; HeapKiB the Go heap in use.
	AnonKiB int `json:"anon_kib"`
	HeapKiB int `json:"heap_kib"`
}

func TestMain(m *testing.M) {
	if spec := os.Getenv(podExecEnv); spec != "" {
		err := execPod(spec)
		fmt.Fprintf(os.Stderr, "container init: %v\n", err)
		os.Exit(127)
	}
	if mode := os.Getenv(benchChildEnv); mode != "" {
		r, err := benchChildRun(mode)
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench child %s: %v\n", mode, err)
			os.Exit(1)
		}
		b, _ := json.Marshal(r)
		fmt.Printf("%s%s\n", benchChildMarker, b)
		os.Exit(0)
	}
	code := m.Run()
	// The ghostwatch binary the tests built goes with them.
	if ghostwatchBin != "" {
		os.RemoveAll(filepath.Dir(ghostwatchBin))
	}
	os.Exit(code)
}

func benchChildRun(mode string) (*childReport, error) {
	ctx := context.Background()
	cl, err := benchCluster(ctx)
	if err != nil {
		return nil, err
	}
	r := &childReport{}
	if r.BaseKiB, err = procStatusKiB("VmHWM"); err != nil {
		return nil, err
	}
	switch mode {
	case "scan":
		start := time.Now()
		res := audit.Run(ctx, audit.Config{
			NodeName: labNode,
			Sources:  []source.Source{&live.APISource{Client: cl.Client, Timeout: 30 * time.Second}, &conntrack.KernelSource{}},
			Rules:    rule.All(rule.Config{}),
		})
		r.ScanNS = int64(time.Since(start))
		if err := res.Incomplete(); err != nil {
			return nil, err
		}
		r.Findings, r.Seen, r.Flows = len(res.Findings), res.Snapshot.Conntrack.Seen, heldFlows(res)
	case "agent":
		idle, err := time.ParseDuration(os.Getenv("GHOSTWATCH_BENCH_IDLE"))
		if err != nil {
			return nil, fmt.Errorf("GHOSTWATCH_BENCH_IDLE: %w", err)
		}
		interval, err := time.ParseDuration(os.Getenv("GHOSTWATCH_BENCH_AUDIT_INTERVAL"))
		if err != nil {
			return nil, fmt.Errorf("GHOSTWATCH_BENCH_AUDIT_INTERVAL: %w", err)
		}
		conn, sub, err := openTableHere()
		if err != nil {
			return nil, err
		}
		defer conn.Close()
		defer sub.Close()
		rules := nodeRules()
		reg := prometheus.NewRegistry()
		m := conntrack.NewMetrics(reg, "ghostwatch")
		a := agent.New(agent.Config{
			NodeName:      labNode,
			Sources:       []source.Source{clusterSource(cl), &conntrack.Watch{Table: conn, Events: sub, Metrics: m}},
			Rules:         rules,
			AuditInterval: interval,
			Metrics:       agent.NewMetrics(reg, rules),
		})
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		go a.Run(ctx)
		deadline := time.Now().Add(5 * time.Minute)
		for st := a.Status(); st.LastAudit.IsZero() || st.Degraded != "" || testutil.ToFloat64(m.IndexFlows) == 0; st = a.Status() {
			if time.Now().After(deadline) {
				return nil, fmt.Errorf("no complete audit in 5m: %+v", st)
			}
			time.Sleep(10 * time.Millisecond)
		}
		if ready := os.Getenv("GHOSTWATCH_BENCH_READY"); ready != "" {
			// The parent churns the table during the window.
			if err := os.WriteFile(ready, nil, 0o644); err != nil {
				return nil, err
			}
		}
		cpu0, wall0 := processCPU(), time.Now()
		stop, err := cpuProfile()
		if err != nil {
			return nil, err
		}
		defer stop()
		time.Sleep(idle) // the measurement window
		r.CPUPercent = 100 * (processCPU() - cpu0).Seconds() / time.Since(wall0).Seconds()
		r.Indexed = testutil.ToFloat64(m.IndexFlows)
		// GHOSTWATCH_BENCH_HEAPPROFILE names a file for the heap profile at
		// the end of the window.
		if profile := os.Getenv("GHOSTWATCH_BENCH_HEAPPROFILE"); profile != "" {
			runtime.GC()
			f, err := os.Create(profile)
			if err != nil {
				return nil, err
			}
			err = pprof.WriteHeapProfile(f)
			f.Close()
			if err != nil {
				return nil, err
			}
		}
	case "ghost-scan":
		if err := ghostScan(ctx, cl, r); err != nil {
			return nil, err
		}
	case "ghost-clear":
		if err := ghostClear(ctx, cl, r); err != nil {
			return nil, err
		}
	default:
		ok, err := deadChildRun(ctx, mode, cl, r)
		if !ok {
			ok, err = sbsChildRun(ctx, mode, cl, r)
		}
		if !ok {
			return nil, fmt.Errorf("unknown mode %q", mode)
		} else if err != nil {
			return nil, err
		}
	}
	if r.HWMKiB, err = procStatusKiB("VmHWM"); err != nil {
		return nil, err
	}
	if r.RSSKiB, err = procStatusKiB("VmRSS"); err != nil {
		return nil, err
	}
	if r.AnonKiB, err = procStatusKiB("RssAnon"); err != nil {
		return nil, err
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	r.HeapKiB = int(ms.HeapInuse / 1024)
	return r, nil
}

// nodeRules are the rules the agent runs.
func nodeRules() []rule.Rule { return rule.InScope(rule.All(rule.Config{}), rule.ScopeNode) }

// clusterSource is the agent's view of the benchmarks' cluster, as
// `ghostwatch agent` builds it: the informers of what kube-proxy watches
// and of the node's pods, and the holders of addresses asked for.
func clusterSource(cl *Cluster) *live.Watch {
	return &live.Watch{Informers: live.NewInformers(cl.Client, live.InformerOptions{Node: labNode}),
		Holders: &live.Holders{Client: cl.Client}, Client: cl.Client}
}

// benchChild runs mode in a child process inside node's namespace.
func benchChild(b *testing.B, node *netbed.Node, mode string, env ...string) *childReport {
	b.Helper()
	cmd := exec.Command("ip", "netns", "exec", node.Name(), os.Args[0], "-test.run=^$")
	cmd.Env = append(append(os.Environ(), benchChildEnv+"="+mode), env...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		b.Fatalf("bench child %s: %v: %s", mode, err, stderr.Bytes())
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), benchChildMarker); ok {
			var r childReport
			if err := json.Unmarshal([]byte(rest), &r); err != nil {
				b.Fatalf("bench child %s: %v", mode, err)
			}
			return &r
		}
	}
	b.Fatalf("bench child %s printed no report: %s", mode, out)
	return nil
}

// procStatusKiB reads a "kB" field of /proc/self/status.
func procStatusKiB(field string) (int, error) {
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		if rest, ok := strings.CutPrefix(line, field+":"); ok {
			return strconv.Atoi(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")))
		}
	}
	return 0, errors.New("no " + field + " in /proc/self/status")
}

// processCPU is the user and system time the process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// timedRSS runs cmd under GNU time and returns its peak resident set in
// KiB; ok is false when /usr/bin/time is missing.
func timedRSS(cmd *exec.Cmd) (kib int, ok bool, err error) {
	if _, err := os.Stat("/usr/bin/time"); err != nil {
		return 0, false, cmd.Run()
	}
	f, err := os.CreateTemp("", "ghostwatch-time-")
	if err != nil {
		return 0, false, err
	}
	defer os.Remove(f.Name())
	f.Close()
	cmd.Args = append([]string{"/usr/bin/time", "-f", "%M", "-o", f.Name()}, cmd.Args...)
	cmd.Path = "/usr/bin/time"
	if err := cmd.Run(); err != nil {
		return 0, false, err
	}
	b, err := os.ReadFile(f.Name())
	if err != nil {
		return 0, false, err
	}
	kib, err = strconv.Atoi(strings.TrimSpace(string(b)))
	return kib, err == nil, err
}

// heldFlows is how many conntrack flows a scan's findings hold: a finding
// stands for all the flows to one ghost backend that its rule judged
// alike, or to many (a crowd).
func heldFlows(res *audit.Result) int {
	n := 0
	for _, f := range res.Findings {
		switch f.Target.(type) {
		case *finding.FlowTarget, *finding.CrowdTarget:
			n += f.Target.Size()
		}
	}
	return n
}
