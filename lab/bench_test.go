package lab

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/ghostwatch/ghostwatch/audit"
	"github.com/ghostwatch/ghostwatch/internal/testenv"
	"github.com/ghostwatch/ghostwatch/lab/netbed"
	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source/conntrack"
)

// BenchmarkScan measures a whole scan (API objects through the informers,
// the conntrack dump over netlink, both rules) of a node whose table holds
// GHOSTWATCH_BENCH_FLOWS entries (default 100,000), against `conntrack -L`
// on the same table in the same run. 100 Services with 3 live backends
// each; 80% of the flows go through a ClusterIP, 1 in 50 of those to a
// deleted backend; 20% are not NATed.
func BenchmarkScan(b *testing.B) {
	testenv.RequireRoot(b, "needs root: builds a node namespace and fills its conntrack table")
	n := benchFlows(b)
	ctx := context.Background()
	node, cl := benchNode(b, n)

	scan := func() *audit.Result { return scanNode(ctx, cl.Client, node) }
	res := scan()
	if err := res.Incomplete(); err != nil {
		b.Fatal(err)
	}
	wantStale := 0
	for i := 0; i < n; i++ {
		if i%5 != 4 && (i/5)%50 == 0 {
			wantStale++
		}
	}
	if got := heldFlows(res); got != wantStale || res.Snapshot.Conntrack.Seen != n {
		b.Fatalf("scan saw %d entries and found %d stale flows (%d findings); want %d and %d", res.Snapshot.Conntrack.Seen, got, len(res.Findings), n, wantStale)
	}

	b.Run("ghostwatch-scan", func(b *testing.B) {
		for b.Loop() {
			if err := scan().Incomplete(); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(n), "flows")
	})
	// The same scan in a process of its own, as `ghostwatch scan` runs: its
	// peak memory is the scan's alone (the Go runtime and the cluster's
	// objects included).
	b.Run("ghostwatch-scan-process", func(b *testing.B) {
		var peak, base, anon int
		var scanNS int64
		for b.Loop() {
			r := benchChild(b, node, "scan")
			if r.Seen != n || r.Flows != wantStale {
				b.Fatalf("child scan saw %d entries and found %d stale flows (%d findings); want %d and %d", r.Seen, r.Flows, r.Findings, n, wantStale)
			}
			peak, base, anon = max(peak, r.HWMKiB), max(base, r.BaseKiB), max(anon, r.AnonKiB)
			scanNS += r.ScanNS
		}
		b.ReportMetric(float64(scanNS)/float64(b.N)/1e6, "scan-ms")
		b.ReportMetric(float64(peak)/1024, "peak-rss-MiB")
		b.ReportMetric(float64(base)/1024, "before-scan-rss-MiB")
		b.ReportMetric(float64(anon)/1024, "anon-rss-after-MiB")
	})
	b.Run("conntrack-L", func(b *testing.B) {
		if _, err := exec.LookPath("conntrack"); err != nil {
			testenv.Unavailable(b, "conntrack(8) not installed")
		}
		peak, measured := 0, false
		for b.Loop() {
			// ip netns exec: the whole process in the node, as the child above.
			cmd := exec.Command("ip", "netns", "exec", node.Name(), "conntrack", "-L")
			kib, ok, err := timedRSS(cmd)
			if err != nil {
				b.Fatal(err)
			}
			peak, measured = max(peak, kib), ok
		}
		b.ReportMetric(float64(n), "flows")
		if measured {
			b.ReportMetric(float64(peak)/1024, "peak-rss-MiB")
		}
	})
}

const benchServices = 100

// benchFlows reads GHOSTWATCH_BENCH_FLOWS (default 100,000).
func benchFlows(b *testing.B) int { return envInt(b, "GHOSTWATCH_BENCH_FLOWS", 100000) }

// benchNode builds a node namespace whose table holds n flows (benchFlow)
// and a cluster of benchServices Services with 3 live backends each. All
// of it is removed when the benchmark ends.
func benchNode(b *testing.B, n int) (*netbed.Node, *Cluster) {
	ctx := context.Background()
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
	cl, err := benchCluster(ctx)
	if err != nil {
		b.Fatal(err)
	}
	fill(b, node, n, func(i int) snapshot.Flow { return benchFlow(i, benchServices) })
	return node, cl
}

// benchCluster is the cluster of the benchmarks: the node and benchServices
// dual-stack Services (TCP 80, UDP 53, SCTP 3868) with 3 live backends
// each.
func benchCluster(ctx context.Context) (*Cluster, error) {
	cl := NewCluster(time.Now)
	if err := cl.AddNode(ctx, labNode, nodeIP); err != nil {
		return nil, err
	}
	for s := 0; s < benchServices; s++ {
		ns := fmt.Sprintf("ns%d", s)
		if err := cl.AddService(ctx, ns, "svc", "svc", []netip.Addr{svcIP(s), svcIP6(s)},
			LabPort{Protocol: corev1.ProtocolTCP, Port: 80, TargetPort: 8080},
			LabPort{Protocol: corev1.ProtocolUDP, Port: 53, TargetPort: 5353},
			LabPort{Protocol: corev1.ProtocolSCTP, Port: 3868, TargetPort: 3868}); err != nil {
			return nil, err
		}
		for p := 1; p <= 3; p++ {
			if _, err := cl.AddPod(ctx, ns, fmt.Sprintf("svc-%d", p), "svc", labNode, podIP(s, p), podIP6(s, p)); err != nil {
				return nil, err
			}
		}
	}
	return cl, nil
}

func svcIP(s int) netip.Addr { return netip.AddrFrom4([4]byte{10, 96, byte(s / 256), byte(s % 256)}) }

func podIP(s, p int) netip.Addr { return netip.AddrFrom4([4]byte{10, 244, byte(s), byte(p)}) }

// svcIP6 and podIP6 are the IPv6 addresses of Service s and its pod p:
// fd00:96::S and fd00:244::S:P.
func svcIP6(s int) netip.Addr {
	return netip.AddrFrom16([16]byte{0: 0xfd, 2: 0x00, 3: 0x96, 14: byte(s >> 8), 15: byte(s)})
}

func podIP6(s, p int) netip.Addr {
	return netip.AddrFrom16([16]byte{0: 0xfd, 2: 0x02, 3: 0x44, 12: byte(s >> 8), 13: byte(s), 15: byte(p)})
}

// fill inserts flow(0) to flow(n-1) with two writers, each on a thread
// in the node.
func fill(b *testing.B, node *netbed.Node, n int, flow func(int) snapshot.Flow) {
	b.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	for w := 0; w < 2; w++ {
		wg.Add(1)
		go func(w int) {
			defer wg.Done()
			errs <- node.Do(func() error {
				c, err := conntrack.Open()
				if err != nil {
					return err
				}
				defer c.Close()
				for i := w; i < n; i += 2 {
					f := flow(i)
					if err := c.Create(&f); err != nil {
						return fmt.Errorf("creating flow %d: %w", i, err)
					}
				}
				return nil
			})
		}(w)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
}

// benchFlow i: a client pod (10.245.x.y:port) to a ClusterIP, or a plain
// flow between pods for one in five.
func benchFlow(i, services int) snapshot.Flow {
	client := netip.AddrFrom4([4]byte{10, 245, byte(i >> 16), byte(i >> 8)})
	sport := uint16(1024 + i%60000)
	f := snapshot.Flow{Proto: snapshot.ProtoTCP, State: "ESTABLISHED", Timeout: 3600,
		Status: snapshot.StatusAssured | snapshot.StatusSeenReply}
	if i%5 == 4 {
		dst := netip.AddrFrom4([4]byte{10, 246, byte(i >> 16), byte(i >> 8)})
		f.Orig = snapshot.Tuple{Src: client, Dst: dst, SrcPort: sport, DstPort: 9000}
		f.Reply = snapshot.Tuple{Src: dst, Dst: client, SrcPort: 9000, DstPort: sport}
		return f
	}
	s := (i / 5) % services
	backend := podIP(s, 1+i%3)
	if (i/5)%50 == 0 {
		backend = podIP(s, 9) // a deleted pod
	}
	f.Orig = snapshot.Tuple{Src: client, Dst: svcIP(s), SrcPort: sport, DstPort: 80}
	f.Reply = snapshot.Tuple{Src: backend, Dst: client, SrcPort: 8080, DstPort: sport}
	return f
}

// raiseConntrackMax makes room for n more entries (the limit is global) and
// returns a function that restores the old limit.
func raiseConntrackMax(b *testing.B, n int) func() {
	const p = "/proc/sys/net/netfilter/nf_conntrack_max"
	old, err := os.ReadFile(p)
	if err != nil {
		b.Fatalf("reading %s: %v", p, err)
	}
	cur, _ := strconv.Atoi(strings.TrimSpace(string(old)))
	if cur >= 2*n {
		return func() {}
	}
	if err := os.WriteFile(p, []byte(strconv.Itoa(2*n)), 0o644); err != nil {
		b.Fatalf("raising %s: %v", p, err)
	}
	return func() { os.WriteFile(p, old, 0o644) }
}
