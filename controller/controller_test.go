package controller

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	fakediscovery "k8s.io/client-go/discovery/fake"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"

	"github.com/ghostwatch/ghostwatch/internal/eventstest"
	"github.com/ghostwatch/ghostwatch/internal/poll"
	"github.com/ghostwatch/ghostwatch/remedy"
	"github.com/ghostwatch/ghostwatch/rule"
	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source"
	"github.com/ghostwatch/ghostwatch/source/calico"
	sourcegossip "github.com/ghostwatch/ghostwatch/source/gossip"
	"github.com/ghostwatch/ghostwatch/source/kube/live"
)

type replica struct {
	c      *Controller
	m      *Metrics
	ev     *eventstest.Recorder
	cancel context.CancelFunc
	done   chan error
}

// setup is how a test replica reads the cluster and what it acts on.
type setup struct {
	// dyn serves Calico's ledger; none (noCalico) by default.
	dyn dynamic.Interface
	// gossipInterval is how often the gossip clusters are read; 100ms by
	// default.
	gossipInterval time.Duration
	// agent returns a gossip member's agent; the real ones by default.
	agent func(sourcegossip.Member) (sourcegossip.Agent, error)
	// remedies are turned on under settings.
	remedies []string
	settings remedy.Settings
	// apiClock is the API server's clock as the replica measures it; by
	// default that of the fake clientsets the tests use, which answer
	// in this process, on its clock.
	apiClock func() snapshot.Clock
}

// inProcess is the clock of an API server that answers in this process.
func inProcess() snapshot.Clock {
	return snapshot.Clock{Name: "the fake API server's", Measured: true, By: "it answers in this process"}
}

func startReplica(t *testing.T, client kubernetes.Interface, id string) *replica {
	t.Helper()
	return startReplicaWith(t, client, id, setup{})
}

// clusterRules are the cluster rules whose sources the controller's test
// replicas read, as the CLI chooses them.
func clusterRules() []rule.Rule {
	var out []rule.Rule
	for _, r := range rule.InScope(rule.All(rule.Config{}), rule.ScopeCluster) {
		if !slices.ContainsFunc(r.Info().Sources, func(s string) bool { return !slices.Contains([]string{"kube", "calico", "gossip"}, s) }) {
			out = append(out, r)
		}
	}
	return out
}

// startReplicaWith runs a replica of the controller with every cluster
// rule, reading the cluster's Pods and Nodes, Calico's ledger and the
// gossip clusters as the CLI wires them, until the test ends.
func startReplicaWith(t *testing.T, client kubernetes.Interface, id string, s setup) *replica {
	t.Helper()
	if s.dyn == nil {
		s.dyn = noCalico()
	}
	if s.gossipInterval == 0 {
		s.gossipInterval = 100 * time.Millisecond
	}
	rules := clusterRules()
	if s.apiClock == nil {
		s.apiClock = inProcess
	}
	pods := &live.ClusterWatch{Client: client, KeepAnnotations: []string{sourcegossip.AnnotationPrefix}, APIClock: s.apiClock}
	// The clusters the tests' pods are annotated as members of, declared
	// as an operator would.
	decl := &sourcegossip.Declarations{}
	for _, sys := range []string{"consul", "serf", "memberlist"} {
		decl.Clusters = append(decl.Clusters, sourcegossip.Declared{System: sys, Namespace: "shop"})
	}
	views := &sourcegossip.Watch{Pods: pods, Interval: s.gossipInterval, Agent: s.agent, Clusters: decl}
	sources := []source.Source{pods, &calico.Watch{Discovery: client.Discovery(), Dynamic: s.dyn}, views}
	rems, err := remedy.Build(rules, s.remedies, s.settings, &remedy.Members{Clusters: views})
	if err != nil {
		t.Fatal(err)
	}
	r := &replica{m: NewMetrics(prometheus.NewRegistry(), rules), ev: &eventstest.Recorder{}, done: make(chan error, 1)}
	r.c = New(Config{Client: client, Identity: id, LeaseNamespace: "ghostwatch", LeaseName: "ghostwatch-controller",
		LeaseDuration: 1500 * time.Millisecond, RenewDeadline: time.Second, RetryPeriod: 100 * time.Millisecond,
		Sources: sources, Rules: rules, Remedies: rems, Metrics: r.m, Events: r.ev, Debounce: 10 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() { r.done <- r.c.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-r.done
	})
	return r
}

func (r *replica) duplicates() float64 {
	return testutil.ToFloat64(r.m.Findings.WithLabelValues(rule.DuplicatePodIPID, "critical"))
}

func podWithIP(name, uid, node, ip string, start time.Time) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, UID: types.UID("uid-" + uid)},
		Spec:   corev1.PodSpec{NodeName: node},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}, StartTime: &metav1.Time{Time: start}}}
}

// One of two replicas leads and reports a duplicate pod IP as it appears:
// a metric and one Event on each pod, once; the finding goes when the
// duplicate does. When the leader stops, the other takes over and reports
// what is there.
func TestOneLeaderReportsDuplicates(t *testing.T) {
	client := fake.NewClientset(
		podWithIP("web-0", "0", "node-a", "10.244.2.2", time.Now().Add(-time.Hour)),
		podWithIP("web-1", "1", "node-a", "10.244.2.3", time.Now().Add(-time.Hour)),
	)
	a := startReplica(t, client, "replica-a")
	poll.Until(t, poll.Patience, "replica-a to lead and pass", func() bool { st := a.c.Status(); return st.Leading && !st.LastPass.IsZero() })
	b := startReplica(t, client, "replica-b")
	poll.Until(t, poll.Patience, "replica-b to see the leader", func() bool { return b.c.Status().Leader == "replica-a" })
	if b.c.Status().Leading {
		t.Fatal("two leaders")
	}
	srv := httptest.NewServer(b.c.Handler(prometheus.NewRegistry()))
	defer srv.Close()
	if body := get(t, srv.URL+"/readyz"); !strings.Contains(body, "standing by (leader: replica-a)") {
		t.Errorf("standby /readyz: %q", body)
	}

	ctx := context.Background()
	if _, err := client.CoreV1().Pods("default").Create(ctx, podWithIP("web-2", "2", "node-b", "10.244.2.2", time.Now()), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, poll.Patience, "the duplicate reported", func() bool { return a.duplicates() == 1 })
	if v := testutil.ToFloat64(a.m.RuleGauge(rule.DuplicatePodIPID).WithLabelValues("critical")); v != 1 {
		t.Errorf("ghostwatch_duplicate_pod_ips{severity=critical} = %v", v)
	}
	// Another pass (an unrelated change) reports nothing new.
	if _, err := client.CoreV1().Pods("default").Create(ctx, podWithIP("web-9", "9", "node-b", "10.244.2.9", time.Now()), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, poll.Patience, "the next pass", func() bool { return testutil.ToFloat64(a.m.Pods) == 4 })
	evs := a.ev.All()
	if len(evs) != 2 || !strings.Contains(evs[0], "Pod Warning default/web-0 DuplicatePodIP IP 10.244.2.2 is held by 2 pods on 2 nodes") ||
		!strings.HasPrefix(evs[1], "Pod Warning default/web-2 DuplicatePodIP") {
		t.Errorf("Events %q, want one on each holder, once", evs)
	}
	if got := b.ev.All(); len(got) != 0 || b.duplicates() != 0 {
		t.Errorf("the standby reported: %v", got)
	}

	if err := client.CoreV1().Pods("default").Delete(ctx, "web-2", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, poll.Patience, "the finding to go", func() bool { return a.duplicates() == 0 })
	if _, err := client.CoreV1().Pods("default").Create(ctx, podWithIP("web-3", "3", "node-b", "10.244.2.3", time.Now()), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, poll.Patience, "the second duplicate", func() bool { return a.duplicates() == 1 })

	// The leader stops: it gives the Lease up, and the standby takes over.
	a.cancel()
	if err := <-a.done; err != nil {
		t.Fatalf("the leader's Run on cancel: %v", err)
	}
	a.done <- nil // for the cleanup
	poll.Until(t, poll.Patience, "replica-b to lead", func() bool { return b.c.Status().Leading })
	poll.Until(t, poll.Patience, "replica-b to report the duplicate", func() bool { return b.duplicates() == 1 })
	if v := testutil.ToFloat64(b.m.Leader); v != 1 {
		t.Errorf("ghostwatch_controller_leader = %v on the new leader", v)
	}
}

// Without its Lease it does not run; a missing setting is an error.
func TestRunNeedsItsSettings(t *testing.T) {
	err := New(Config{Client: fake.NewClientset()}).Run(context.Background())
	if err == nil || !strings.Contains(err.Error(), "a client, an identity and a Lease namespace and name are required") {
		t.Errorf("Run = %v", err)
	}
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A replica that cannot reach the API server at start stays up, not
// ready, saying why, and tries again; once the server answers it leads.
// (It used to exit 2, into a crash loop.)
func TestUnreachableAPIServerAtStartIsNotReadyThenLeads(t *testing.T) {
	client := fake.NewClientset(podWithIP("web-0", "0", "node-a", "10.244.2.2", time.Now().Add(-time.Hour)))
	var down atomic.Bool
	down.Store(true)
	client.Discovery().(*fakediscovery.FakeDiscovery).PrependReactor("get", "version", func(clienttesting.Action) (bool, kruntime.Object, error) {
		if down.Load() {
			return true, nil, errors.New("dial tcp 10.96.0.1:443: connect: connection refused")
		}
		return false, nil, nil
	})
	a := startReplica(t, client, "replica-a")
	srv := httptest.NewServer(a.c.Handler(prometheus.NewRegistry()))
	defer srv.Close()
	poll.Until(t, poll.Patience, "the replica to say the API server cannot be reached", func() bool {
		return strings.Contains(a.c.Status().Unreachable, "connection refused")
	})
	resp, err := http.Get(srv.URL + "/readyz")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "the API server cannot be reached: dial tcp 10.96.0.1:443: connect: connection refused; trying again in") {
		t.Errorf("/readyz: %d %q", resp.StatusCode, body)
	}
	select {
	case err := <-a.done:
		t.Fatalf("the replica exited: %v", err)
	default:
	}
	down.Store(false)
	poll.Until(t, poll.Patience, "the replica to lead and pass once the server answers", func() bool {
		st := a.c.Status()
		return st.Unreachable == "" && st.Leading && !st.LastPass.IsZero()
	})
}

// A leader whose API server stops answering without failing anything (its
// process stopped: connections stay open, nothing comes back) stays up,
// says it is not ready and why, and once the server answers again leads
// and is ready. (It used to exit 2 once the Lease could not be renewed,
// and said ready until then.)
func TestHungAPIServerIsNotReadyThenLeadsAgain(t *testing.T) {
	client := fake.NewClientset(podWithIP("web-0", "0", "node-a", "10.244.2.2", time.Now().Add(-time.Hour)))
	var mu sync.Mutex
	var hung chan struct{}
	react := func(clienttesting.Action) (bool, kruntime.Object, error) {
		mu.Lock()
		c := hung
		mu.Unlock()
		if c != nil {
			<-c
		}
		return false, nil, nil
	}
	client.PrependReactor("*", "*", react)
	client.Discovery().(*fakediscovery.FakeDiscovery).PrependReactor("*", "*", react)
	resume := func() {
		mu.Lock()
		defer mu.Unlock()
		if hung != nil {
			close(hung)
			hung = nil
		}
	}
	t.Cleanup(resume)
	a := startReplica(t, client, "replica-a")
	srv := httptest.NewServer(a.c.Handler(prometheus.NewRegistry()))
	defer srv.Close()
	readyz := func() (int, string) {
		resp, err := http.Get(srv.URL + "/readyz")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	poll.Until(t, poll.Patience, "the replica to lead, pass and be ready", func() bool {
		code, _ := readyz()
		return code == http.StatusOK && a.c.Status().Leading
	})

	mu.Lock()
	hung = make(chan struct{})
	mu.Unlock()
	var body string
	// Another reason may come first (a watch that ended, listing again):
	// the one waited for is the hang's.
	poll.Until(t, poll.Patience, "/readyz to say the API server does not answer", func() bool {
		var code int
		code, body = readyz()
		return code == http.StatusServiceUnavailable && strings.Contains(body, "the API server has not answered for")
	})
	select {
	case err := <-a.done:
		t.Fatalf("the replica exited while the API server hung: %v", err)
	default:
	}

	resume()
	poll.Until(t, poll.Patience, "the replica to lead and be ready again", func() bool {
		code, _ := readyz()
		return code == http.StatusOK && a.c.Status().Leading
	})
	select {
	case err := <-a.done:
		t.Fatalf("the replica exited: %v", err)
	default:
	}
}
