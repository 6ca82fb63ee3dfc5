// Package controller is ghostwatch's cluster-wide watcher: one leader,
// elected on a Lease, watches every Pod (and, as the cluster rules grow,
// the IPAM datastore) and runs the cluster rules continuously, reporting
// findings as metrics, logs and Events. Node agents never watch every Pod
// for this: their cost to the API server is kube-proxy's, the controller's
// is one watcher's.
//
// It is read-only: it writes nothing but its Lease and Events.
package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"

	"github.com/ghostwatch/ghostwatch/finding"
	"github.com/ghostwatch/ghostwatch/rule"
	"github.com/ghostwatch/ghostwatch/source/kube"
)

// Config is what the controller needs. Zero durations take the defaults
// below.
type Config struct {
	Client kubernetes.Interface
	// Identity names this process in the Lease (its pod name).
	Identity string
	// LeaseNamespace and LeaseName name the Lease the replicas elect a
	// leader on.
	LeaseNamespace, LeaseName string
	// LeaseDuration, RenewDeadline and RetryPeriod are client-go's leader
	// election timings. Defaults 15s, 10s, 2s.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// Rules are the cluster rules it runs. duplicate-pod-ip is judged from
	// an index of pod IPs kept current per event.
	Rules []rule.Rule
	// Debounce gathers a burst of pod events into one pass. Default 100ms.
	Debounce time.Duration
	// Metrics, when set, are updated after every pass.
	Metrics *Metrics
	// Events, when set, receives an Event on every object a finding
	// concerns, when the finding first appears.
	Events record.EventRecorder
	// Log receives structured logs; nil discards them.
	Log *slog.Logger
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Status is the controller's state for /readyz and logs.
type Status struct {
	// Leading is true while this replica holds the Lease; Leader names the
	// holder as last seen.
	Leading bool
	Leader  string
	// Synced is true once the leader's caches listed every Pod.
	Synced bool
	// LastPass is when the rules last ran; Findings how many they found.
	LastPass time.Time
	Findings int
}

// Controller is the cluster-wide watcher.
type Controller struct {
	cfg Config

	mu     sync.Mutex
	status Status
	// reported are the findings of the last pass, by key: a finding gets
	// its Events when it first appears, not at every pass.
	reported map[string]bool
}

// New returns a controller for cfg.
func New(cfg Config) *Controller {
	if cfg.LeaseDuration == 0 {
		cfg.LeaseDuration = 15 * time.Second
	}
	if cfg.RenewDeadline == 0 {
		cfg.RenewDeadline = 10 * time.Second
	}
	if cfg.RetryPeriod == 0 {
		cfg.RetryPeriod = 2 * time.Second
	}
	if cfg.Debounce == 0 {
		cfg.Debounce = 100 * time.Millisecond
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Controller{cfg: cfg, reported: map[string]bool{}}
}

// Status returns the controller's state.
func (c *Controller) Status() Status {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.status
}

// Judged are the IDs of the cluster rules the controller runs today; the
// others run in scan.
var Judged = []string{rule.DuplicatePodIPID}

// Rules returns the rules of rules the controller runs.
func Rules(rules []rule.Rule) []rule.Rule {
	var out []rule.Rule
	for _, r := range rules {
		for _, id := range Judged {
			if r.Info().ID == id {
				out = append(out, r)
			}
		}
	}
	return out
}

// ErrLostLease is returned by Run when this replica lost the Lease while
// leading: the process should exit, and its restart campaigns afresh with
// empty caches.
var ErrLostLease = errors.New("lost the leader Lease")

// Run campaigns for the Lease and, while it holds it, watches the cluster
// and runs the rules. It returns nil when ctx ends, ErrLostLease when the
// Lease was lost.
func (c *Controller) Run(ctx context.Context) error {
	cfg := c.cfg
	if cfg.Client == nil || cfg.Identity == "" || cfg.LeaseNamespace == "" || cfg.LeaseName == "" {
		return errors.New("controller: a client, an identity and a Lease namespace and name are required")
	}
	lost := false
	le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
		Lock: &resourcelock.LeaseLock{
			LeaseMeta:  metav1.ObjectMeta{Namespace: cfg.LeaseNamespace, Name: cfg.LeaseName},
			Client:     cfg.Client.CoordinationV1(),
			LockConfig: resourcelock.ResourceLockConfig{Identity: cfg.Identity},
		},
		LeaseDuration:   cfg.LeaseDuration,
		RenewDeadline:   cfg.RenewDeadline,
		RetryPeriod:     cfg.RetryPeriod,
		ReleaseOnCancel: true,
		Name:            cfg.LeaseName,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: func(ctx context.Context) {
				cfg.Log.Info("leading: watching the cluster", "identity", cfg.Identity, "lease", cfg.LeaseNamespace+"/"+cfg.LeaseName)
				c.setLeading(true)
				c.lead(ctx)
			},
			OnStoppedLeading: func() {
				if ctx.Err() == nil {
					lost = true
				}
				c.setLeading(false)
			},
			OnNewLeader: func(id string) {
				c.mu.Lock()
				c.status.Leader = id
				c.mu.Unlock()
				if id != cfg.Identity {
					cfg.Log.Info("standing by", "leader", id)
				}
			},
		},
	})
	if err != nil {
		return fmt.Errorf("controller: %w", err)
	}
	le.Run(ctx)
	if lost {
		return ErrLostLease
	}
	return nil
}

func (c *Controller) setLeading(on bool) {
	c.mu.Lock()
	c.status.Leading = on
	if on {
		c.status.Leader = c.cfg.Identity
	} else {
		c.status.Synced = false
	}
	c.mu.Unlock()
	if m := c.cfg.Metrics; m != nil {
		v := 0.0
		if on {
			v = 1
		}
		m.Leader.Set(v)
	}
}

// lead watches every Pod into the index of pod IPs and runs the rules
// after each burst of changes, until ctx ends.
func (c *Controller) lead(ctx context.Context) {
	cfg := c.cfg
	factory := informers.NewSharedInformerFactoryWithOptions(cfg.Client, 0, informers.WithTransform(trimPod))
	pods := factory.Core().V1().Pods().Informer()
	var mu sync.Mutex
	idx := rule.NewPodIPs()
	changed := make(chan struct{}, 1)
	poke := func() {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	set := func(obj any) {
		if p, ok := obj.(*corev1.Pod); ok {
			sp := kube.Pod(p)
			mu.Lock()
			idx.Set(&sp)
			mu.Unlock()
			poke()
		}
	}
	if _, err := pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    set,
		UpdateFunc: func(_, obj any) { set(obj) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if p, ok := obj.(*corev1.Pod); ok {
				mu.Lock()
				idx.Delete(string(p.UID))
				mu.Unlock()
				poke()
			}
		},
	}); err != nil {
		cfg.Log.Error("watching pods", "err", err)
		return
	}
	_ = pods.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
		cfg.Log.Warn("the pod watch failed; client-go lists again", "err", err)
	})
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), pods.HasSynced) {
		return
	}
	c.mu.Lock()
	c.status.Synced = true
	c.mu.Unlock()
	cfg.Log.Info("pods listed", "pods", len(pods.GetStore().ListKeys()))
	for {
		mu.Lock()
		fs := idx.Duplicates()
		n := idx.Len()
		mu.Unlock()
		c.pass(fs, n)
		select {
		case <-ctx.Done():
			return
		case <-changed:
		}
		// Gather the rest of the burst.
		select {
		case <-ctx.Done():
			return
		case <-time.After(cfg.Debounce):
		}
	}
}

// pass publishes a pass's findings: metrics, and for each finding that was
// not in the last pass a log line and an Event on every object it
// concerns.
func (c *Controller) pass(fs []finding.Finding, pods int) {
	cfg := c.cfg
	if !c.runs(rule.DuplicatePodIPID) {
		fs = nil
	}
	if m := cfg.Metrics; m != nil {
		m.Publish(fs)
		m.Pods.Set(float64(pods))
		m.Passes.Inc()
	}
	now := map[string]bool{}
	for _, f := range fs {
		k := key(f)
		now[k] = true
		if c.reported[k] {
			continue
		}
		cfg.Log.Warn("finding", "rule", f.Rule, "severity", f.Severity.String(), "ip", f.Subject.IP, "message", f.Message)
		if cfg.Events != nil {
			reason := EventReason(f.Rule)
			typ := corev1.EventTypeWarning
			if f.Severity == finding.Info {
				typ = corev1.EventTypeNormal
			}
			for _, o := range f.Concerns {
				ref := &corev1.ObjectReference{Kind: o.Kind, APIVersion: "v1", Namespace: o.Namespace, Name: o.Name, UID: types.UID(o.UID)}
				cfg.Events.Event(ref, typ, reason, f.Message)
			}
		}
	}
	c.mu.Lock()
	c.reported = now
	c.status.LastPass, c.status.Findings = cfg.Now(), len(fs)
	c.mu.Unlock()
}

func (c *Controller) runs(id string) bool {
	for _, r := range c.cfg.Rules {
		if r.Info().ID == id {
			return true
		}
	}
	return false
}

// key identifies a finding across passes: its rule, subject and the
// objects it concerns.
func key(f finding.Finding) string {
	var b strings.Builder
	b.WriteString(f.Rule + "|" + f.Severity.String() + "|" + f.Subject.IP)
	var uids []string
	for _, o := range f.Concerns {
		uids = append(uids, o.Kind+"/"+o.Namespace+"/"+o.Name+"/"+o.UID)
	}
	sort.Strings(uids)
	b.WriteString("|" + strings.Join(uids, ","))
	return b.String()
}

// EventReason is a rule's Event reason: its ID in CamelCase, "IP" kept
// upper case ("duplicate-pod-ip" is "DuplicatePodIP").
func EventReason(id string) string {
	var b strings.Builder
	for _, w := range strings.Split(id, "-") {
		switch w {
		case "ip", "ipam":
			b.WriteString(strings.ToUpper(w))
		default:
			if w != "" {
				b.WriteString(strings.ToUpper(w[:1]) + w[1:])
			}
		}
	}
	return b.String()
}

// trimPod keeps of a Pod what the rules read: the cache of every Pod of a
// large cluster holds no spec beyond the node and hostNetwork, and no
// managed fields.
func trimPod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, UID: p.UID, ResourceVersion: p.ResourceVersion,
			CreationTimestamp: p.CreationTimestamp, DeletionTimestamp: p.DeletionTimestamp},
		Spec: corev1.PodSpec{NodeName: p.Spec.NodeName, HostNetwork: p.Spec.HostNetwork},
		Status: corev1.PodStatus{Phase: p.Status.Phase, PodIP: p.Status.PodIP, PodIPs: p.Status.PodIPs,
			StartTime: p.Status.StartTime},
	}, nil
}
