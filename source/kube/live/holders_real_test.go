package live

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"

	"github.com/ghostwatch/ghostwatch/internal/poll"
	"github.com/ghostwatch/ghostwatch/internal/testenv"
	"github.com/ghostwatch/ghostwatch/lab/controlplane"
	"github.com/ghostwatch/ghostwatch/snapshot"
)

// startAPIServer runs the real control plane of the end-to-end tests, or
// stops the test as internal/testenv says.
func startAPIServer(tb testing.TB) (context.Context, *controlplane.ControlPlane) {
	tb.Helper()
	bin, err := controlplane.FindBinaries()
	if errors.Is(err, controlplane.ErrNoBinaries) {
		testenv.Unavailable(tb, err.Error())
	}
	if err != nil {
		tb.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	tb.Cleanup(cancel)
	cp, err := controlplane.Start(ctx, controlplane.Options{Bin: bin})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(cp.Stop)
	return ctx, cp
}

// heldAddr is the address of pod i of the lookup tests: 10.250.x.y.
func heldAddr(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, 250, byte(i >> 8), byte(i)}) }

// deadAddr is suspect address i that no pod holds: 10.251.0.0 plus i.
func deadAddr(i int) netip.Addr {
	return netip.AddrFrom4([4]byte{10, byte(251 + i>>16), byte(i >> 8), byte(i)})
}

// runPod creates a running pod on node at ip.
func runPod(ctx context.Context, api kubernetes.Interface, name, node string, ip netip.Addr) error {
	p, err := api.CoreV1().Pods("default").Create(ctx, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "c", Image: "c:1"}}}}, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	p.Status.Phase, p.Status.PodIP, p.Status.PodIPs = corev1.PodRunning, ip.String(), []corev1.PodIP{{IP: ip.String()}}
	p.Status.StartTime = &metav1.Time{Time: p.CreationTimestamp.Time}
	_, err = api.CoreV1().Pods("default").UpdateStatus(ctx, p, metav1.UpdateOptions{})
	return err
}

// runPods creates n running pods on node-b, pod i at heldAddr(i), eight
// at a time.
func runPods(tb testing.TB, ctx context.Context, api kubernetes.Interface, n int) {
	tb.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += 8 {
				if err := runPod(ctx, api, fmt.Sprintf("held-%d", i), "node-b", heldAddr(i)); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		tb.Fatal(err)
	}
}

// countingLimiter is a client's rate limiter that counts the requests
// that waited on it.
type countingLimiter struct {
	flowcontrol.RateLimiter
	waits atomic.Int64
}

func (l *countingLimiter) Wait(ctx context.Context) error {
	l.waits.Add(1)
	return l.RateLimiter.Wait(ctx)
}

// lookupTap counts the lookups' requests, and holds every page of a list
// after the first until it is let go.
type lookupTap struct {
	next            http.RoundTripper
	pages, byAddr   atomic.Int64
	firstPage, gate chan struct{}
	once            sync.Once
}

func (t *lookupTap) RoundTrip(r *http.Request) (*http.Response, error) {
	q := r.URL.Query()
	switch {
	case r.URL.Path != "/api/v1/pods":
	case strings.HasPrefix(q.Get("fieldSelector"), "status.podIP="):
		t.byAddr.Add(1)
	case q.Get("limit") != "":
		t.pages.Add(1)
		if q.Get("continue") != "" {
			t.once.Do(func() { close(t.firstPage) })
			select {
			case <-t.gate:
			case <-r.Context().Done():
				return nil, r.Context().Err()
			}
		}
	}
	return t.next.RoundTrip(r)
}

// On the real API server, a node agent judges 20,000 suspect addresses in
// one pass: one paged list of every pod answers them all, at a handful of
// requests, with the pods that hold some of them; its lookups have a rate
// limit of their own, so that none of them waits on the informers' (on
// 2f36acc, every lookup was a request of its own through the informers'
// client: 20,000 of them at its 5 a second, over an hour); while the list
// is held, the informers' watches still bring news of the node, and the
// lookup says how far it got.
func TestRealLookupOfTwentyThousandSuspects(t *testing.T) {
	const suspects, held, page = 20000, 300, 100
	ctx, cp := startAPIServer(t)
	runPods(t, ctx, cp.Admin, held)

	cfg := cp.Config(controlplane.UserAdmin)
	// As `ghostwatch agent` runs: client-go's rate limit for the
	// informers, and the lookups' client of their own.
	cfg.QPS, cfg.Burst = 0, 0
	informersLimit := &countingLimiter{RateLimiter: flowcontrol.NewTokenBucketRateLimiter(rest.DefaultQPS, rest.DefaultBurst)}
	icfg := rest.CopyConfig(cfg)
	icfg.RateLimiter = informersLimit
	informers, err := kubernetes.NewForConfig(icfg)
	if err != nil {
		t.Fatal(err)
	}
	tap := &lookupTap{firstPage: make(chan struct{}), gate: make(chan struct{})}
	lcfg := rest.CopyConfig(cfg)
	lcfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { tap.next = rt; return tap }
	lookups, err := LookupClient(lcfg)
	if err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewRegistry()
	w := &Watch{Informers: NewInformers(informers, InformerOptions{Node: "node-a"}),
		Holders: &Holders{Client: lookups, Page: page, Metrics: NewHolderMetrics(reg, "ghostwatch")}, Client: informers}
	if err := w.Start(ctx); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, poll.Patience, "the informers to list", func() bool { return w.Ready(time.Now()) == nil })
	w.Changes()

	ask := make(holderReader, 0, suspects)
	for i := range held {
		ask = append(ask, heldAddr(i))
	}
	for i := range suspects - held {
		ask = append(ask, deadAddr(i))
	}
	w.Narrow([]any{ask})
	s := &snapshot.Snapshot{NodeName: "node-a"}
	if err := w.Collect(ctx, s); err != nil {
		t.Fatal(err)
	}
	resolved := make(chan error, 1)
	go func() { resolved <- w.Resolve(ctx, s) }()

	<-tap.firstPage
	// The list is held after its first page: a pod that comes to the
	// node meanwhile reaches the informers.
	newcomer := netip.MustParseAddr("10.244.0.77")
	if err := runPod(ctx, cp.Admin, "newcomer", "node-a", newcomer); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, poll.Patience, "the node's new pod to reach the informers while the lookup is held", func() bool {
		_, ok := w.Changes().Addrs[newcomer]
		return ok
	})
	if p := w.Progress(); !strings.HasPrefix(p, "looking up the pods at 20000 addresses in one list of every pod: 100 pods read in ") {
		t.Errorf("progress while held: %q", p)
	}
	if v := testutil.ToFloat64(w.Holders.Metrics.Pending); v != suspects {
		t.Errorf("holder_lookups_pending = %v while held, want %d", v, suspects)
	}
	close(tap.gate)
	if err := <-resolved; err != nil {
		t.Fatal(err)
	}

	if n := len(s.Kube.Looked); n != suspects {
		t.Errorf("%d of %d addresses looked up in the pass", n, suspects)
	}
	found := map[netip.Addr]string{}
	for _, p := range s.Kube.Pods {
		for _, a := range p.IPs {
			found[a] = p.Name
		}
	}
	for _, i := range []int{0, 7, held - 1} {
		if got := found[heldAddr(i)]; got != fmt.Sprintf("held-%d", i) {
			t.Errorf("the pod at %s: %q, want held-%d", heldAddr(i), got, i)
		}
	}
	if !s.Kube.KnowsHolders(deadAddr(123)) || found[deadAddr(123)] != "" {
		t.Errorf("a dead address: known %t, held by %q", s.Kube.KnowsHolders(deadAddr(123)), found[deadAddr(123)])
	}
	// The pods' list, in pages: at most one more than the cluster's pods
	// fill (held, the newcomer), and no single read.
	if pages, one := tap.pages.Load(), tap.byAddr.Load(); one != 0 || pages > int64((held+1)/page+2) {
		t.Errorf("the lookup made %d page requests and %d by address; want at most %d pages and none by address", pages, one, (held+1)/page+2)
	}
	if waits := informersLimit.waits.Load(); waits > 50 {
		t.Errorf("%d requests waited on the informers' rate limit: the lookups share it", waits)
	}
	if v := testutil.ToFloat64(w.Holders.Metrics.Addresses.WithLabelValues(lookupAllPods)); v != suspects {
		t.Errorf("holder_lookups_total{how=all-pods} = %v, want %d", v, suspects)
	}
	if p := w.Progress(); p != "" {
		t.Errorf("progress after the lookup: %q", p)
	}
}

// BenchmarkRealLookup is what judging a node whose workloads all died
// asks of the real API server: a pass that looks up the holders of
// GHOSTWATCH_BENCH_SUSPECTS addresses (default 20,000), none of them
// held, in a cluster of GHOSTWATCH_BENCH_HOLDER_PODS pods (default
// 5,000), through the lookups' own client as `ghostwatch agent` makes it
// (LookupClient), its answers cold: the time of the pass's lookup and
// how many requests it made.
func BenchmarkRealLookup(b *testing.B) {
	suspects := benchEnv(b, "GHOSTWATCH_BENCH_SUSPECTS", 20000)
	pods := benchEnv(b, "GHOSTWATCH_BENCH_HOLDER_PODS", 5000)
	ctx, cp := startAPIServer(b)
	runPods(b, ctx, cp.Admin, pods)
	cfg := cp.Config(controlplane.UserAdmin)
	cfg.QPS, cfg.Burst = 0, 0
	tap := &lookupTap{firstPage: make(chan struct{}), gate: make(chan struct{})}
	close(tap.gate)
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { tap.next = rt; return tap }
	lookups, err := LookupClient(cfg)
	if err != nil {
		b.Fatal(err)
	}
	ask := make([]netip.Addr, suspects)
	for i := range ask {
		ask[i] = deadAddr(i)
	}
	var took time.Duration
	for b.Loop() {
		h := &Holders{Client: lookups}
		start := time.Now()
		found, err := h.lookup(ctx, ask)
		took += time.Since(start)
		if err != nil || len(found) != suspects {
			b.Fatalf("%d answers: %v", len(found), err)
		}
	}
	b.ReportMetric(took.Seconds()/float64(b.N), "lookup-s")
	b.ReportMetric(float64(tap.pages.Load())/float64(b.N), "requests")
	b.ReportMetric(float64(suspects), "suspects")
	b.ReportMetric(float64(pods), "pods")
}

func benchEnv(b *testing.B, name string, def int) int {
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
