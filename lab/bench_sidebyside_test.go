package lab

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"

	"github.com/ghostwatch/ghostwatch/agent"
	"github.com/ghostwatch/ghostwatch/audit"
	"github.com/ghostwatch/ghostwatch/internal/poll"
	"github.com/ghostwatch/ghostwatch/internal/testenv"
	"github.com/ghostwatch/ghostwatch/lab/netbed"
	"github.com/ghostwatch/ghostwatch/remedy"
	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source"
	"github.com/ghostwatch/ghostwatch/source/conntrack"
)

// BenchmarkSideBySide measures, on one table of GHOSTWATCH_BENCH_FLOWS
// entries (default 100,000; sbsFlow: TCP, UDP and SCTP, IPv4 and IPv6, 1 %
// to deleted backends) in a namespace of its own, ghostwatch beside what
// operators run today, each sub-benchmark reporting the median of
// GHOSTWATCH_BENCH_REPS runs (default 3):
//
//   - audit: the agent's full audit (dump, index seed, every node rule) in
//     a process of its own, its time and peak RSS;
//   - floor: a count-only netlink dump, nothing parsed: the kernel's cost;
//   - conntrack-L: `conntrack -L > /dev/null`;
//   - kube-proxy: vishvananda/netlink ConntrackTableList of each family and
//     a filter on the dead backends, as kube-proxy's reconciler reads;
//   - cleaner-1s: that dump and filter once a second, as conntrack-cleaner
//     DaemonSets do, its CPU over GHOSTWATCH_BENCH_WINDOW (default 10s);
//   - agent-rest, agent-churn: the agent (events, index) idle, then with
//     GHOSTWATCH_BENCH_CHURN flows created and destroyed a second (default
//     500 each), over that window: CPU and RSS;
//   - offline-scan and awk: `scan` of the table's `conntrack -L -o
//     extended,id` listing against `awk '{print $5}'` on the same file;
//   - shell-loop (tables of at most 20,000 flows): `conntrack -L | grep`
//     and one `conntrack -D` per stale line;
//   - backend-death: with the agent's shipped settings (grace, debounce,
//     budget), from a pod's deletion in the API to its last flow deleted,
//     for GHOSTWATCH_BENCH_KILLS pods (default 10: the default budget of 20
//     ghost IPs a minute, two per dual-stack pod) killed 500ms apart.
//
// scripts/bench.sh runs it at each table size and writes
// docs/performance.md from what it prints.
func BenchmarkSideBySide(b *testing.B) {
	testenv.RequireRoot(b, "needs root: builds a node namespace and fills its conntrack table")
	n := benchFlows(b)
	reps := envInt(b, "GHOSTWATCH_BENCH_REPS", 3)
	node, cl := sbsNode(b, n)
	stale := sbsStale(n)
	report := func(b *testing.B, ms float64, rssKiB int) {
		b.ReportMetric(float64(n), "flows")
		b.ReportMetric(ms, "ms")
		if rssKiB > 0 {
			b.ReportMetric(float64(rssKiB)/1024, "peak-rss-MiB")
		}
	}
	// A child is this test binary: what it holds before its measured part
	// (its code, the Go runtime, the cluster's objects) is not the part's.
	reportChild := func(b *testing.B, r *childReport) {
		report(b, float64(r.ScanNS)/1e6, r.HWMKiB)
		b.ReportMetric(float64(r.HWMKiB-r.BaseKiB)/1024, "added-peak-rss-MiB")
	}
	child := func(b *testing.B, mode string, env ...string) *childReport {
		var r *childReport
		for b.Loop() {
			r = benchChild(b, node, mode, append(env, "GHOSTWATCH_BENCH_REPS="+strconv.Itoa(reps), "GHOSTWATCH_BENCH_FLOWS="+strconv.Itoa(n))...)
		}
		return r
	}

	b.Run("audit", func(b *testing.B) {
		r := child(b, "sbs-audit")
		if r.Seen != n || r.Flows != stale {
			b.Fatalf("audit saw %d entries and held %d stale flows; want %d and %d", r.Seen, r.Flows, n, stale)
		}
		reportChild(b, r)
		b.ReportMetric(float64(reps), "reps")
		b.ReportMetric(float64(r.AnonKiB)/1024, "anon-rss-MiB")
		b.ReportMetric(float64(r.HeapKiB)/1024, "heap-MiB")
	})
	b.Run("floor", func(b *testing.B) {
		r := child(b, "sbs-floor")
		if r.Seen != n {
			b.Fatalf("count-only dump saw %d entries, want %d", r.Seen, n)
		}
		reportChild(b, r)
	})
	b.Run("conntrack-L", func(b *testing.B) {
		if _, err := exec.LookPath("conntrack"); err != nil {
			testenv.Unavailable(b, "conntrack(8) not installed")
		}
		ms, peak := commandRuns(b, reps, func() *exec.Cmd {
			return exec.Command("ip", "netns", "exec", node.Name(), "conntrack", "-L")
		})
		report(b, ms, peak)
	})
	b.Run("kube-proxy", func(b *testing.B) {
		r := child(b, "sbs-kubeproxy")
		if r.Seen != n || r.Flows != stale {
			b.Fatalf("kube-proxy's way saw %d entries and %d stale flows; want %d and %d", r.Seen, r.Flows, n, stale)
		}
		reportChild(b, r)
	})
	window := envDuration(b, "GHOSTWATCH_BENCH_WINDOW", 10*time.Second)
	b.Run("cleaner-1s", func(b *testing.B) {
		r := child(b, "sbs-cleaner", "GHOSTWATCH_BENCH_WINDOW="+window.String())
		if r.Flows != stale {
			b.Fatalf("the cleaner found %d stale flows, want %d", r.Flows, stale)
		}
		reportChild(b, r)
		b.ReportMetric(r.CPUPercent, "cpu-%")
	})
	churn := envInt(b, "GHOSTWATCH_BENCH_CHURN", 500)
	for _, rate := range []int{0, churn} {
		name := "agent-rest"
		if rate > 0 {
			name = "agent-churn"
		}
		b.Run(name, func(b *testing.B) {
			var r *childReport
			for b.Loop() {
				r = sbsAgent(b, node, n, window, rate)
			}
			b.ReportMetric(float64(n), "flows")
			b.ReportMetric(r.CPUPercent, "cpu-%")
			b.ReportMetric(float64(r.RSSKiB)/1024, "rss-MiB")
			b.ReportMetric(float64(r.AnonKiB)/1024, "anon-rss-MiB")
			b.ReportMetric(float64(r.HeapKiB)/1024, "heap-MiB")
			b.ReportMetric(float64(r.HWMKiB)/1024, "peak-rss-MiB")
			b.ReportMetric(r.Indexed, "indexed")
			if rate > 0 {
				b.ReportMetric(float64(rate), "churn/s")
			}
		})
	}

	listing := filepath.Join(b.TempDir(), "conntrack.txt")
	b.Run("offline-scan", func(b *testing.B) {
		out, err := os.Create(listing)
		if err != nil {
			b.Fatal(err)
		}
		cmd := exec.Command("ip", "netns", "exec", node.Name(), "conntrack", "-L", "-o", "extended,id")
		cmd.Stdout = out
		err = cmd.Run()
		out.Close()
		if err != nil {
			b.Fatal(err)
		}
		r := child(b, "sbs-offline", "GHOSTWATCH_BENCH_LISTING="+listing)
		if r.Seen != n || r.Flows != stale {
			b.Fatalf("offline scan saw %d entries and held %d stale flows; want %d and %d", r.Seen, r.Flows, n, stale)
		}
		reportChild(b, r)
	})
	b.Run("awk", func(b *testing.B) {
		ms, peak := commandRuns(b, reps, func() *exec.Cmd {
			return exec.Command("awk", "{print $5}", listing) // stdout: /dev/null
		})
		report(b, ms, peak)
	})
	if n <= 20000 {
		b.Run("shell-loop", func(b *testing.B) {
			var d time.Duration
			for b.Loop() {
				d = sbsShellLoop(b, node, stale)
			}
			report(b, float64(d)/1e6, 0)
			b.ReportMetric(float64(stale), "deletes")
		})
	}
	b.Run("kernel-ops", func(b *testing.B) {
		var one, batched, judged sbsOps
		for b.Loop() {
			one, batched, judged = sbsKernelOps(b, node, n, opsOne), sbsKernelOps(b, node, n, opsBatched), sbsKernelOps(b, node, n, opsJudged)
		}
		b.ReportMetric(float64(n), "flows")
		b.ReportMetric(float64(sbsOpsFlows), "entries")
		b.ReportMetric(one.get, "get-us/entry")
		b.ReportMetric(one.del, "delete-us/entry")
		b.ReportMetric(batched.get, "batched-get-us/entry")
		b.ReportMetric(batched.del, "batched-delete-us/entry")
		b.ReportMetric(judged.del, "judged-delete-us/entry")
	})
	b.Run("backend-death", func(b *testing.B) {
		kills := envInt(b, "GHOSTWATCH_BENCH_KILLS", 10)
		var whole []time.Duration
		for b.Loop() {
			whole = sbsBackendDeath(b, node, cl, n, kills)
		}
		grace := float64(remedy.DefaultGrace) / 1e6
		b.ReportMetric(float64(n), "flows")
		b.ReportMetric(float64(percentile(whole, 0.5))/1e6, "p50-ms")
		b.ReportMetric(float64(percentile(whole, 0.99))/1e6, "p99-ms")
		b.ReportMetric(grace, "grace-ms")
		b.ReportMetric(float64(percentile(whole, 0.5))/1e6-grace, "beyond-grace-p50-ms")
		b.ReportMetric(float64(percentile(whole, 0.99))/1e6-grace, "beyond-grace-p99-ms")
		v4, v6 := sbsPerPod(n, 0, 1)
		b.ReportMetric(float64(v4+v6), "flows/pod")
		b.ReportMetric(float64(kills), "kills")
	})
}

// commandRuns runs the command cmd makes reps times (at each iteration of
// b), its output to /dev/null, and returns the median time in
// milliseconds and the largest peak RSS in KiB (GNU time's).
func commandRuns(b *testing.B, reps int, cmd func() *exec.Cmd) (ms float64, peakKiB int) {
	var ts []time.Duration
	for b.Loop() {
		for range reps {
			start := time.Now()
			kib, _, err := timedRSS(cmd())
			if err != nil {
				b.Fatal(err)
			}
			ts = append(ts, time.Since(start))
			peakKiB = max(peakKiB, kib)
		}
	}
	return median(ts), peakKiB
}

// median of ts, in milliseconds.
func median(ts []time.Duration) float64 { return float64(percentile(ts, 0.5)) / 1e6 }

// sbsNode builds a node namespace whose table holds sbsFlow(0..n-1), and
// the benchmarks' cluster.
func sbsNode(b *testing.B, n int) (*netbed.Node, *Cluster) {
	ctx := context.Background()
	b.Cleanup(raiseConntrackMax(b, n+200000))
	bed, err := netbed.New(prefix())
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { bed.Close() })
	node, err := bed.AddNode("node", netbed.NodeOptions{Addrs: []netip.Prefix{hostPfx(nodeIP)}})
	if err != nil {
		b.Fatal(err)
	}
	cl, err := benchCluster(ctx)
	if err != nil {
		b.Fatal(err)
	}
	fill(b, node, n, sbsFlow)
	return node, cl
}

// sbsFlow is flow i of the side-by-side table: one in five between two pods
// without NAT, the others from a client pod to a Service's ClusterIP; one
// in ten IPv6; of every 20, 14 TCP, 5 UDP and 1 SCTP; flow i%100 == 0 to a
// deleted backend (pod 9 of its Service): 1 % of the table.
func sbsFlow(i int) snapshot.Flow {
	v6 := i%10 == 9
	client := netip.AddrFrom4([4]byte{10, 245, byte(i >> 16), byte(i >> 8)})
	if v6 {
		client = netip.AddrFrom16([16]byte{0: 0xfd, 2: 0x02, 3: 0x45, 13: byte(i >> 24), 14: byte(i >> 16), 15: byte(i >> 8)})
	}
	sport := uint16(1024 + i%60000)
	f := snapshot.Flow{Timeout: 3600, Status: snapshot.StatusAssured | snapshot.StatusSeenReply}
	var port, target uint16
	switch k := i % 20; {
	case k < 14:
		f.Proto, f.State, port, target = snapshot.ProtoTCP, "ESTABLISHED", 80, 8080
	case k < 19:
		f.Proto, port, target = snapshot.ProtoUDP, 53, 5353
	default:
		f.Proto, f.State, port, target = snapshot.ProtoSCTP, "ESTABLISHED", 3868, 3868
	}
	if i%5 == 4 {
		dst := netip.AddrFrom4([4]byte{10, 246, byte(i >> 16), byte(i >> 8)})
		if v6 {
			dst = netip.AddrFrom16([16]byte{0: 0xfd, 2: 0x02, 3: 0x46, 13: byte(i >> 24), 14: byte(i >> 16), 15: byte(i >> 8)})
		}
		f.Orig = snapshot.Tuple{Src: client, Dst: dst, SrcPort: sport, DstPort: 9000}
		f.Reply = snapshot.Tuple{Src: dst, Dst: client, SrcPort: 9000, DstPort: sport}
		return f
	}
	s, p := sbsBackend(i)
	svc, backend := svcIP(s), podIP(s, p)
	if v6 {
		svc, backend = svcIP6(s), podIP6(s, p)
	}
	f.Orig = snapshot.Tuple{Src: client, Dst: svc, SrcPort: sport, DstPort: port}
	f.Reply = snapshot.Tuple{Src: backend, Dst: client, SrcPort: target, DstPort: sport}
	return f
}

// sbsBackend is the Service and pod of flow i through a Service: pod 9,
// deleted, when i%100 == 0.
func sbsBackend(i int) (s, p int) {
	s = (i / 5) % benchServices
	if i%100 == 0 {
		return s, 9
	}
	return s, 1 + (i/7)%3
}

// sbsStale is how many of sbsFlow(0..n-1) go to a deleted backend.
func sbsStale(n int) int { return (n + 99) / 100 }

// sbsPerPod is how many of sbsFlow(0..n-1) go to pod p of Service s: to
// its IPv4 address, and to its IPv6 one.
func sbsPerPod(n, s, p int) (v4, v6 int) {
	for i := 0; i < n; i++ {
		if i%5 == 4 {
			continue
		}
		if ss, pp := sbsBackend(i); ss == s && pp == p {
			if i%10 == 9 {
				v6++
			} else {
				v4++
			}
		}
	}
	return v4, v6
}

// sbsDead reports whether a is a deleted backend of the benchmarks' cluster.
func sbsDead(a netip.Addr) bool {
	if a.Is4() {
		b := a.As4()
		return b[0] == 10 && b[1] == 244 && b[3] == 9
	}
	b := a.As16()
	return b[0] == 0xfd && b[2] == 0x02 && b[3] == 0x44 && b[15] == 9
}

// sbsChildRun runs the side-by-side child modes; ok is false for a mode
// that is not one of them.
func sbsChildRun(ctx context.Context, mode string, cl *Cluster, r *childReport) (ok bool, err error) {
	reps, err := strconv.Atoi(os.Getenv("GHOSTWATCH_BENCH_REPS"))
	if err != nil || reps < 1 {
		reps = 1
	}
	stop, err := cpuProfile()
	if err != nil {
		return true, err
	}
	defer stop()
	// GHOSTWATCH_BENCH_MEMPROFILE names a file for the allocations of the
	// measured part.
	if profile := os.Getenv("GHOSTWATCH_BENCH_MEMPROFILE"); profile != "" {
		runtime.MemProfileRate = 64 << 10
		defer func() {
			if f, err := os.Create(profile); err == nil {
				pprof.Lookup("allocs").WriteTo(f, 0)
				f.Close()
			}
		}()
	}
	var ts []time.Duration
	timed := func(fn func() error) error {
		for range reps {
			start := time.Now()
			if err := fn(); err != nil {
				return err
			}
			ts = append(ts, time.Since(start))
		}
		r.ScanNS = int64(percentile(ts, 0.5))
		return nil
	}
	switch mode {
	case "sbs-audit":
		return true, sbsAudit(ctx, cl, reps, r)
	case "sbs-floor":
		return true, timed(func() (err error) { r.Seen, err = countOnlyDump(); return err })
	case "sbs-kubeproxy":
		return true, timed(func() (err error) { r.Seen, r.Flows, err = kubeProxyList(); return err })
	case "sbs-cleaner":
		window, err := time.ParseDuration(os.Getenv("GHOSTWATCH_BENCH_WINDOW"))
		if err != nil {
			return true, fmt.Errorf("GHOSTWATCH_BENCH_WINDOW: %w", err)
		}
		cpu0, wall0 := processCPU(), time.Now()
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for time.Since(wall0) < window {
			start := time.Now()
			if r.Seen, r.Flows, err = kubeProxyList(); err != nil {
				return true, err
			}
			ts = append(ts, time.Since(start))
			// A dump longer than a second left a tick waiting: the next
			// starts at once.
			<-tick.C
		}
		r.CPUPercent = 100 * (processCPU() - cpu0).Seconds() / time.Since(wall0).Seconds()
		r.ScanNS = int64(percentile(ts, 0.5))
		return true, nil
	case "sbs-offline":
		return true, timed(func() error { return ghostScan(ctx, cl, r) })
	}
	return false, nil
}

// cpuProfile starts the CPU profile GHOSTWATCH_BENCH_CPUPROFILE names, if
// any, of a child's measured part; stop ends it.
func cpuProfile() (stop func(), err error) {
	profile := os.Getenv("GHOSTWATCH_BENCH_CPUPROFILE")
	if profile == "" {
		return func() {}, nil
	}
	f, err := os.Create(profile)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// sbsAudit runs the agent's sources (informers; the conntrack table with
// events and its index) and times reps full audits with the node's rules,
// the first of which seeds the index.
func sbsAudit(ctx context.Context, cl *Cluster, reps int, r *childReport) error {
	conn, sub, err := openTableHere()
	if err != nil {
		return err
	}
	defer conn.Close()
	defer sub.Close()
	rules := nodeRules()
	sources := []source.Source{clusterSource(cl), &conntrack.Watch{Table: conn, Events: sub}}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for _, s := range sources {
		if l, ok := s.(source.Live); ok {
			if err := l.Start(ctx); err != nil {
				return err
			}
		}
	}
	deadline := time.Now().Add(time.Minute)
	for _, s := range sources {
		l := s.(source.Live)
		for l.Ready(time.Now()) != nil {
			if time.Now().After(deadline) {
				return fmt.Errorf("%s not ready in a minute: %w", l.Name(), l.Ready(time.Now()))
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	var ts []time.Duration
	for range reps {
		for _, s := range sources {
			if f, ok := s.(source.Focuser); ok {
				f.Focus(source.Changes{}, true)
			}
		}
		start := time.Now()
		res := audit.Run(ctx, audit.Config{NodeName: labNode, Sources: sources, Rules: rules})
		ts = append(ts, time.Since(start))
		if err := res.Incomplete(); err != nil {
			return err
		}
		r.Findings, r.Seen, r.Flows = len(res.Findings), res.Snapshot.Conntrack.Seen, heldFlows(res)
	}
	r.ScanNS = int64(percentile(ts, 0.5))
	return nil
}

// countOnlyDump dumps the calling thread's conntrack table (both families)
// over a netlink socket of its own and counts the entries, parsing nothing
// but the netlink headers: the floor under any reader of the whole table.
func countOnlyDump() (int, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_NETFILTER)
	if err != nil {
		return 0, err
	}
	defer unix.Close(fd)
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return 0, err
	}
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 4<<20)
	const (
		ctnetlink = 1 // NFNL_SUBSYS_CTNETLINK
		ctGet     = 1 // IPCTNL_MSG_CT_GET
		ctNew     = ctnetlink<<8 | 0
	)
	req := make([]byte, unix.NLMSG_HDRLEN+4)
	ne := binary.NativeEndian
	ne.PutUint32(req[0:], uint32(len(req)))
	ne.PutUint16(req[4:], ctnetlink<<8|ctGet)
	ne.PutUint16(req[6:], unix.NLM_F_REQUEST|unix.NLM_F_DUMP)
	ne.PutUint32(req[8:], 1)
	req[16] = unix.AF_UNSPEC
	if err := unix.Sendto(fd, req, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK}); err != nil {
		return 0, err
	}
	buf := make([]byte, 64<<10)
	n := 0
	for {
		m, _, err := unix.Recvfrom(fd, buf, 0)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return n, err
		}
		for b := buf[:m]; len(b) >= unix.NLMSG_HDRLEN; {
			l, typ := ne.Uint32(b), ne.Uint16(b[4:])
			if l < unix.NLMSG_HDRLEN || int(l) > len(b) {
				return n, errors.New("truncated netlink message")
			}
			switch typ {
			case unix.NLMSG_DONE:
				return n, nil
			case unix.NLMSG_ERROR:
				if e := int32(ne.Uint32(b[unix.NLMSG_HDRLEN:])); e != 0 {
					return n, unix.Errno(-e)
				}
				return n, nil
			case ctNew:
				n++
			}
			b = b[min(len(b), int(l+3)&^3):]
		}
	}
}

// kubeProxyList reads the table as kube-proxy's conntrack reconciler does
// (vishvananda/netlink ConntrackTableList, one family at a time, every
// entry decoded into a ConntrackFlow) and filters the entries a cleaner
// would delete: those whose reply comes from a deleted backend.
func kubeProxyList() (seen, stale int, err error) {
	for _, fam := range []netlink.InetFamily{unix.AF_INET, unix.AF_INET6} {
		flows, err := netlink.ConntrackTableList(netlink.ConntrackTable, fam)
		if err != nil {
			return 0, 0, err
		}
		seen += len(flows)
		for _, f := range flows {
			if a, ok := netip.AddrFromSlice(f.Reverse.SrcIP); ok && !f.Forward.DstIP.Equal(f.Reverse.SrcIP) && sbsDead(a.Unmap()) {
				stale++
			}
		}
	}
	return seen, stale, nil
}

// sbsAgent runs the agent (informers, conntrack events and index, every
// node rule, no remedy) in a process of its own and measures it over
// window once its first full audit is done; rate > 0 creates and destroys
// that many flows a second each in the meantime, to live backends.
func sbsAgent(b *testing.B, node *netbed.Node, n int, window time.Duration, rate int) *childReport {
	ready := filepath.Join(b.TempDir(), "ready")
	done := make(chan *childReport, 1)
	go func() {
		done <- benchChild(b, node, "agent", "GHOSTWATCH_BENCH_AUDIT_INTERVAL=2m", "GHOSTWATCH_BENCH_IDLE="+window.String(),
			"GHOSTWATCH_BENCH_READY="+ready)
	}()
	if rate == 0 {
		return <-done
	}
	poll.Until(b, 5*time.Minute, "the agent's first full audit", func() bool {
		_, err := os.Stat(ready)
		return err == nil
	})
	var stop atomic.Bool
	var wg sync.WaitGroup
	var churnErr error
	wg.Add(1)
	go func() {
		defer wg.Done()
		churnErr = node.Do(func() error {
			c, err := conntrack.Open()
			if err != nil {
				return err
			}
			defer c.Close()
			tick := time.NewTicker(10 * time.Millisecond)
			defer tick.Stop()
			per := max(rate/100, 1)
			var live []snapshot.Flow
			for i := 0; !stop.Load(); <-tick.C {
				for range per {
					// New flows beyond the table, to live backends.
					f := sbsFlow(n + 1 + i)
					f.Orig.SrcPort, f.Reply.DstPort = uint16(61024+i%4000), uint16(61024+i%4000)
					if f.Reply.Src != f.Orig.Dst && sbsDead(f.Reply.Src) {
						i++
						continue
					}
					i++
					if err := c.Create(&f); err != nil && !errors.Is(err, unix.EEXIST) {
						return err
					}
					live = append(live, f)
					if len(live) > 2*per {
						old := live[0]
						live = live[1:]
						if err := c.Delete(&old); err != nil && !errors.Is(err, unix.ENOENT) {
							return err
						}
					}
				}
			}
			for i := range live {
				if err := c.Delete(&live[i]); err != nil && !errors.Is(err, unix.ENOENT) {
					return err
				}
			}
			return nil
		})
	}()
	r := <-done
	stop.Store(true)
	wg.Wait()
	if churnErr != nil {
		b.Fatal(churnErr)
	}
	return r
}

// sbsShellLoop runs the seeds' loop in the node: `conntrack -L | grep` for
// the deleted backends, then one `conntrack -D` per line, and checks that
// it deleted the stale flows.
func sbsShellLoop(b *testing.B, node *netbed.Node, stale int) time.Duration {
	script := `conntrack -L 2>/dev/null | grep -E 'src=(10\.244\.[0-9]+\.9|fd00:244::[0-9a-f]+:9) ' |
while read -r proto _ rest; do
  s= d= sp= dp=
  for kv in $rest; do
    case $kv in
      src=*) [ -n "$s" ] || s=${kv#src=} ;;
      dst=*) [ -n "$d" ] || d=${kv#dst=} ;;
      sport=*) [ -n "$sp" ] || sp=${kv#sport=} ;;
      dport=*) [ -n "$dp" ] || dp=${kv#dport=} ;;
    esac
  done
  conntrack -D -p "$proto" -s "$s" -d "$d" --sport "$sp" --dport "$dp" >/dev/null 2>&1 || true
done`
	start := time.Now()
	if out, err := exec.Command("ip", "netns", "exec", node.Name(), "bash", "-c", script).CombinedOutput(); err != nil {
		b.Fatalf("shell loop: %v: %s", err, out)
	}
	d := time.Since(start)
	left := 0
	if err := node.Do(func() error {
		c, err := conntrack.Open()
		if err != nil {
			return err
		}
		defer c.Close()
		_, err = c.Dump(context.Background(), func(f *snapshot.Flow) error {
			if f.DNAT() && sbsDead(f.Reply.Src) {
				left++
			}
			return nil
		})
		return err
	}); err != nil {
		b.Fatal(err)
	}
	if left != 0 {
		b.Fatalf("the shell loop left %d of %d stale flows", left, stale)
	}
	return d
}

// sbsOpsFlows is how many entries sbsKernelOps reads back and deletes: a
// dead backend's flows in a table of a million.
const sbsOpsFlows = 2666

// sbsOps is what one read-back and one delete cost an entry, in µs.
type sbsOps struct{ get, del float64 }

// How sbsKernelOps reads back and deletes.
const (
	// opsOne: one system call an entry, by original tuple.
	opsOne = iota
	// opsBatched: many entries a system call, by original tuple.
	opsBatched
	// opsJudged: deleted as the agent's remedy does, many a system call
	// by reply tuple, zone and ID, while a subscriber reads the table's
	// events as the agent does (the kernel then reports each delete).
	opsJudged
)

// sbsKernelOps adds sbsOpsFlows entries to the node's table (to a backend
// of their own, beyond the table's flows), reads each back and deletes
// them as how says, and returns what each cost an entry.
func sbsKernelOps(b *testing.B, node *netbed.Node, n int, how int) sbsOps {
	var ops sbsOps
	batched := how != opsOne
	err := node.Do(func() error {
		c, err := conntrack.Open()
		if err != nil {
			return err
		}
		defer c.Close()
		if how == opsJudged {
			sub, err := conntrack.Subscribe()
			if err != nil {
				return err
			}
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() {
				defer close(done)
				sub.Run(ctx, func(conntrack.Event) error { return nil })
			}()
			defer func() { cancel(); <-done; sub.Close() }()
		}
		fs := make([]snapshot.Flow, sbsOpsFlows)
		for i := range fs {
			f := sbsFlow(n + 1000000 + i)
			f.Proto, f.State = snapshot.ProtoTCP, "ESTABLISHED"
			f.Reply.Src = netip.AddrFrom4([4]byte{10, 250, 0, 1})
			f.Orig.Src, f.Reply.Dst = netip.AddrFrom4([4]byte{10, 251, byte(i >> 8), byte(i)}), netip.AddrFrom4([4]byte{10, 251, byte(i >> 8), byte(i)})
			f.Orig.Dst = svcIP(0)
			f.Orig.DstPort, f.Reply.SrcPort = 80, 8080
			if err := c.Create(&f); err != nil {
				return err
			}
			got, err := c.Get(&f)
			if err != nil {
				return err
			}
			fs[i] = got
		}
		var failed error
		note := func(err error) {
			if err != nil && failed == nil {
				failed = err
			}
		}
		start := time.Now()
		if batched {
			note(c.GetEach(fs, func(_ int, _ snapshot.Flow, err error) { note(err) }))
		} else {
			for i := range fs {
				_, err := c.Get(&fs[i])
				note(err)
			}
		}
		ops.get = float64(time.Since(start).Microseconds()) / sbsOpsFlows
		start = time.Now()
		switch how {
		case opsJudged:
			note(c.DeleteJudgedEach(fs, func(_ int, err error) { note(err) }))
		case opsBatched:
			note(c.DeleteEach(fs, func(_ int, err error) { note(err) }))
		default:
			for i := range fs {
				note(c.Delete(&fs[i]))
			}
		}
		ops.del = float64(time.Since(start).Microseconds()) / sbsOpsFlows
		return failed
	})
	if err != nil {
		b.Fatal(err)
	}
	return ops
}

// sbsBackendDeath runs the agent with every shipped default but the
// remedy's being on (grace, debounce, budget, audit interval) and kills
// kills backend pods 500ms apart, returning for each the time from its
// deletion in the API to its last flow deleted. The flows to backends
// deleted before the agent started are removed first, so that they do not
// take the budget.
func sbsBackendDeath(b *testing.B, node *netbed.Node, cl *Cluster, n, kills int) []time.Duration {
	var conn *conntrack.Conn
	if err := node.Do(func() (err error) { conn, err = conntrack.Open(); return err }); err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	var dead []snapshot.Flow
	if _, err := conn.Dump(context.Background(), func(f *snapshot.Flow) error {
		if f.DNAT() && sbsDead(f.Reply.Src) {
			dead = append(dead, *f)
		}
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	for i := range dead {
		if err := conn.Delete(&dead[i]); err != nil && !errors.Is(err, unix.ENOENT) {
			b.Fatal(err)
		}
	}
	del := newTimedDeleter(conn)
	a, _ := sbsDefaultAgent(b, node, cl, del)
	poll.Until(b, 5*time.Minute, "the agent's first complete audit", func() bool {
		st := a.Status()
		return !st.LastAudit.IsZero() && st.Degraded == ""
	})
	type victim struct {
		s, p         int
		killed       time.Time
		want4, want6 int
	}
	var vs []*victim
	for k := 0; k < kills; k++ {
		s, p := k%benchServices, 1+(k/benchServices)%3
		v := &victim{s: s, p: p}
		v.want4, v.want6 = sbsPerPod(n, s, p)
		vs = append(vs, v)
	}
	ctx := context.Background()
	errs := make(chan error, 1)
	go func() {
		defer close(errs)
		for i, v := range vs {
			if i > 0 {
				time.Sleep(500 * time.Millisecond) // the cadence of the kills
			}
			v.killed = time.Now()
			if err := cl.DeletePod(ctx, fmt.Sprintf("ns%d", v.s), fmt.Sprintf("svc-%d", v.p)); err != nil {
				errs <- err
				return
			}
		}
	}()
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
	var whole []time.Duration
	for _, v := range vs {
		_, ok4 := del.waitFor(podIP(v.s, v.p), v.want4, time.Minute)
		_, ok6 := del.waitFor(podIP6(v.s, v.p), v.want6, time.Minute)
		if !ok4 || !ok6 {
			b.Fatalf("the flows of pod %d of Service %d were not all deleted within a minute", v.p, v.s)
		}
		last := del.lastAt(podIP(v.s, v.p))
		if l6 := del.lastAt(podIP6(v.s, v.p)); l6.After(last) {
			last = l6
		}
		whole = append(whole, last.Sub(v.killed))
	}
	return whole
}

// sbsDefaultAgent is benchAgent with the shipped settings: the agent's
// default debounce and audit interval, the remedy's default grace, budget
// and cap.
func sbsDefaultAgent(b *testing.B, node *netbed.Node, cl *Cluster, del *timedDeleter) (*agent.Agent, *conntrack.Metrics) {
	return benchAgentWith(b, node, cl, agent.Config{}, del, remedy.Settings{
		Grace: remedy.DefaultGrace, Budget: remedy.DefaultBudget, BudgetInterval: remedy.DefaultBudgetInterval,
		MaxPerGroup: remedy.DefaultMaxPerGroup})
}
