package lab

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ghostwatch/ghostwatch/audit"
	"github.com/ghostwatch/ghostwatch/finding"
	"github.com/ghostwatch/ghostwatch/lab/calico"
	"github.com/ghostwatch/ghostwatch/lab/controlplane"
	"github.com/ghostwatch/ghostwatch/rule"
	"github.com/ghostwatch/ghostwatch/source"
	calicosrc "github.com/ghostwatch/ghostwatch/source/calico"
	"github.com/ghostwatch/ghostwatch/source/caliconode"
	"github.com/ghostwatch/ghostwatch/source/kube/live"
)

// The calico-misbook scenario's leak grace periods. Calico's default is
// 15m, which would keep the lab running for half an hour.
const (
	// DefaultMisbookGrace is the lab's leakGracePeriod: the lab takes
	// about three of them.
	DefaultMisbookGrace = 20 * time.Second
	// MinMisbookGrace bounds it below: the lab's own steps between the
	// booking and the fix take a second or two, and must end well before
	// the collector can free the address, one grace after the booking.
	MinMisbookGrace = 5 * time.Second
)

// CalicoMisbookOptions tunes the calico-misbook scenario.
type CalicoMisbookOptions struct {
	// Out receives the timeline; nil discards it.
	Out io.Writer
	// KubeBin is the directory of etcd and kube-apiserver
	// (scripts/kube-binaries.sh); "" means $GHOSTWATCH_KUBE_BIN.
	KubeBin string
	// CalicoBin is the directory of calico-kube-controllers and
	// calico-ipam (scripts/calico-binaries.sh); "" means
	// $GHOSTWATCH_CALICO_BIN.
	CalicoBin string
	// LeakGracePeriod is calico-kube-controllers' leakGracePeriod in the
	// lab: DefaultMisbookGrace when zero, at least MinMisbookGrace.
	// Calico's default is 15m.
	LeakGracePeriod time.Duration
	// Inspect, when set, is called once ghostwatch has reported the
	// misbooked addresses, before anything is fixed or freed, with an
	// admin's kubeconfig of the lab's API server and each node's root (its
	// files): a look from outside.
	Inspect func(ctx context.Context, kubeconfig string, misbooked []netip.Addr, nodeRoots map[string]string) error
}

// CalicoMisbookResult is what the calico-misbook scenario measured. Times
// are seconds since the lab started, as on the timeline.
type CalicoMisbookResult struct {
	Scenario string `json:"scenario"`
	// LeakGracePeriod is the collector's in the lab (Calico's default is
	// 15m).
	LeakGracePeriod string `json:"leak_grace_period"`
	// Pods are every pod the lab ran, in order.
	Pods []MisbookPod `json:"pods"`
	// Findings are what ghostwatch reported once the re-imaged nodes had
	// booked their first pods, before anything was fixed or freed: each
	// node's stale-nodename-file, and the cluster's ipam-misbooked.
	Findings []finding.Finding `json:"findings"`
	Endings  []MisbookEnding   `json:"endings"`
}

// MisbookPod is one pod the lab ran.
type MisbookPod struct {
	Pod  string `json:"pod"`
	Node string `json:"node"`
	// BookedAs is the node name calico-ipam booked its address under.
	BookedAs string  `json:"booked_as"`
	IP       string  `json:"ip"`
	Started  float64 `json:"started_at_seconds"`
}

// MisbookEnding is one re-imaged node's ending: left alone, or fixed as
// ghostwatch says before the collector frees its pod's address.
type MisbookEnding struct {
	Fixed bool `json:"fixed"`
	// Node is the re-imaged node; BookedAs the stale name its nodename
	// file held, another node's.
	Node     string `json:"node"`
	BookedAs string `json:"booked_as"`
	// Pod got PodIP, booked under BookedAs, at BookedAt.
	Pod      string  `json:"pod"`
	PodIP    string  `json:"pod_ip"`
	BookedAt float64 `json:"booked_at_seconds"`
	// PredictedFreedFrom and PredictedFreedBy are the window
	// ipam-misbooked gave for the collector to free PodIP (its evidence
	// freed_from and freed_by), null when it gave none.
	PredictedFreedFrom *float64 `json:"predicted_freed_from_seconds"`
	PredictedFreedBy   *float64 `json:"predicted_freed_by_seconds"`
	// FixedAt is when the node's nodename file was corrected, before its
	// pod was re-created as RecreatedPod with RecreatedPodIP.
	FixedAt        *float64 `json:"fixed_at_seconds,omitempty"`
	RecreatedPod   string   `json:"recreated_pod,omitempty"`
	RecreatedPodIP string   `json:"recreated_pod_ip,omitempty"`
	// FreedAt is when calico-kube-controllers freed the address of the
	// ending's running pod (PodIP, or RecreatedPodIP once re-created), as
	// the datastore showed it; null when it did not.
	FreedAt       *float64 `json:"freed_at_seconds"`
	FreedInWindow bool     `json:"freed_in_window"`
	// NextPod is the next pod on BookedAs's node: it got NextPodIP, which
	// DuplicateOf still held if any pod did.
	NextPod     string `json:"next_pod,omitempty"`
	NextPodIP   string `json:"next_pod_ip,omitempty"`
	DuplicateOf string `json:"duplicate_of,omitempty"`
	// Findings are ghostwatch's findings about the ending's pods and
	// nodes once the next pod runs.
	Findings []finding.Finding `json:"findings"`
}

// The scenario's cluster: two re-imaged nodes whose nodename files name
// another existing node, each that node's block nearly full.
const (
	misbookNS     = "default"
	leftAloneNode = "node-a"
	leftAloneAs   = "node-b"
	fixedNode     = "node-c"
	fixedAs       = "node-d"
	// fillers run on each stale name's node before the re-imaged nodes
	// start: with the misbooked pod they fill its block, so that the
	// address the collector frees is the next it hands out.
	fillers = 3
)

// CalicoMisbook plays seed 002 (Calico issue #12257) on a real API server
// with Calico v3.30.1's own calico-ipam and calico-kube-controllers: two
// nodes re-imaged from another node's disk keep that node's name in
// /var/lib/calico/nodename, so calico-ipam books their first pods'
// addresses under it. ghostwatch reports the stale file on each node and
// the misbooked allocations with the window in which the collector frees
// them. One node is then fixed as ghostwatch says (the nodename file
// corrected, the pod re-created); the other is left alone: the collector
// frees its pod's address while it runs, and the next pod on the stale
// name's node gets it, a duplicate pod IP. The fixed node's pod keeps its
// address, and the next pod there gets a free one.
func CalicoMisbook(ctx context.Context, o CalicoMisbookOptions) (res *CalicoMisbookResult, err error) {
	if o.LeakGracePeriod == 0 {
		o.LeakGracePeriod = DefaultMisbookGrace
	}
	if o.LeakGracePeriod < MinMisbookGrace {
		return nil, fmt.Errorf("leak grace period %s: at least %s, so that the fix can be played before the collector frees the address", o.LeakGracePeriod, MinMisbookGrace)
	}
	kubeBin, calicoBin, err := misbookBinaries(o)
	if err != nil {
		return nil, err
	}
	// A timeline nobody reads any more ends the run through its cleanup.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	tl := newTimeline(o.Out, time.Now())
	tl.failed = func(err error) { cancel(fmt.Errorf("writing the timeline: %w", err)) }
	grace := o.LeakGracePeriod
	tl.section("ghostwatch-lab calico-misbook — seed 002: re-imaged nodes book their pods under another node's name (Calico v3.30.1, leakGracePeriod %s; Calico's default: 15m)", grace)

	m := &misbook{opts: o, tl: tl, grace: grace, res: &CalicoMisbookResult{Scenario: "calico-misbook", LeakGracePeriod: grace.String()}}
	start := time.Now()
	m.cp, err = controlplane.Start(ctx, controlplane.Options{Bin: kubeBin})
	if err != nil {
		return nil, err
	}
	var watching sync.WaitGroup
	stopWatching := func() {}
	defer func() {
		stopWatching()
		watching.Wait()
		if ctx.Err() != nil {
			// The timeline may be what failed: say here that the lab is gone.
			err = fmt.Errorf("lab calico-misbook interrupted: %w", context.Cause(ctx))
		}
		cerr := m.close()
		if cerr == nil && ctx.Err() != nil {
			err = fmt.Errorf("%w; stopped every process it started and removed its files", err)
		}
		if err = errors.Join(err, cerr); err != nil {
			res = nil
		}
	}()
	tl.logf("api", "etcd, kube-apiserver and kube-controller-manager running on 127.0.0.1 (%s)", time.Since(start).Round(100*time.Millisecond))
	if err := m.setup(ctx, calicoBin); err != nil {
		return nil, err
	}
	wctx, wcancel := context.WithCancel(ctx)
	stopWatching = wcancel
	watching.Go(func() { m.kcLog.run(wctx) })

	if err := m.book(ctx); err != nil {
		return nil, err
	}
	if err := m.fix(ctx); err != nil {
		return nil, err
	}
	if err := m.collect(ctx); err != nil {
		return nil, err
	}
	if err := m.nextPod(ctx, m.alone, "left alone"); err != nil {
		return nil, err
	}
	if err := m.windowEnds(ctx); err != nil {
		return nil, err
	}
	if err := m.nextPod(ctx, m.fixed, "fixed"); err != nil {
		return nil, err
	}
	m.summary()
	return m.res, nil
}

// misbookBinaries resolves the binaries' directories: the options', else
// the variables', each checked for every binary the lab runs.
func misbookBinaries(o CalicoMisbookOptions) (kubeBin, calicoBin string, err error) {
	kubeBin, calicoBin = o.KubeBin, o.CalicoBin
	if kubeBin == "" {
		if kubeBin, err = controlplane.FindBinaries(); err != nil {
			return "", "", fmt.Errorf("%w (or pass --kube-bin)", err)
		}
	} else if err := controlplane.CheckBinaries("--kube-bin "+kubeBin, kubeBin); err != nil {
		return "", "", err
	}
	if calicoBin == "" {
		if calicoBin, err = calico.FindBinaries(); err != nil {
			return "", "", fmt.Errorf("%w (or pass --calico-bin)", err)
		}
	} else if err := calico.CheckBinaries("--calico-bin "+calicoBin, calicoBin); err != nil {
		return "", "", err
	}
	return kubeBin, calicoBin, nil
}

// misbook is the scenario's state as it plays.
type misbook struct {
	opts  CalicoMisbookOptions
	tl    *timeline
	grace time.Duration
	res   *CalicoMisbookResult
	cp    *controlplane.ControlPlane
	c     *calico.Cluster
	nodes map[string]*calico.Node
	kcLog *collectorLog
	// calico reads Calico's ledger as ghostwatch scan does.
	calico *calicosrc.APISource
	// alone and fixed are the two endings as they play.
	alone, fixed *ending
}

// ending is one re-imaged node's pod and what became of it.
type ending struct {
	node, as  string
	pod       *calico.Pod
	recreated *calico.Pod
	next      *calico.Pod
	// from and by are ipam-misbooked's window for pod's address.
	from, by time.Time
	freed    time.Time
	result   *MisbookEnding
}

// close stops every process the lab started and removes its files.
func (m *misbook) close() error {
	dir := m.cp.Dir
	m.cp.Stop()
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("cleaning up the lab: %s is left: %v", dir, err)
	}
	m.tl.logf("lab", "stopped every process it started; removed %s", dir)
	return nil
}

// setup installs Calico, its pools and the nodes, starts the collector,
// and runs the pods the stale names' nodes already had.
func (m *misbook) setup(ctx context.Context, calicoBin string) (err error) {
	tl := m.tl
	if m.c, err = calico.Install(ctx, m.cp, calicoBin); err != nil {
		return err
	}
	if m.calico, err = calicosrc.NewAPISource(m.cp.Config(controlplane.UserAdmin)); err != nil {
		return err
	}
	tl.logf("calico", "Calico's CRDs installed: its datastore is the API server (DATASTORE_TYPE=kubernetes)")
	names := []string{leftAloneNode, leftAloneAs, fixedNode, fixedAs}
	m.nodes = map[string]*calico.Node{}
	for _, n := range names {
		if m.nodes[n], err = m.c.AddNode(ctx, n); err != nil {
			return err
		}
	}
	if err := m.c.Apply(ctx, calico.NodePools(names...)); err != nil {
		return err
	}
	var pools []string
	for i, n := range names {
		pools = append(pools, fmt.Sprintf("%s %s", n, calico.NodePoolCIDR(i)))
	}
	tl.logf("calico", "IP pools: one block of 4 addresses for each node (%s); Calico's default is blocks of 64, any node's", strings.Join(pools, ", "))
	kc, err := m.c.StartKubeControllers(ctx, calico.KubeControllersOptions{LeakGracePeriod: m.grace})
	if err != nil {
		return err
	}
	m.kcLog = &collectorLog{path: kc.Log(), tl: tl, pods: map[string]bool{}, said: map[string]bool{}}
	tl.logf("calico", "calico-kube-controllers running its node controller, whose leak collector scans every %s: leakGracePeriod %s (Calico's default: 15m)", m.grace/2, m.grace)

	for _, as := range []string{leftAloneAs, fixedAs} {
		var ips []string
		for i := range fillers {
			p, err := m.run(ctx, as, fmt.Sprintf("web-%s-%d", strings.TrimPrefix(as, "node-"), i))
			if err != nil {
				return err
			}
			ips = append(ips, fmt.Sprintf("%s %s", p.Name, p.IP))
		}
		tl.logf("kubelet", "%s runs %s, booked under %s", as, strings.Join(ips, ", "), as)
	}
	for _, e := range [][2]string{{leftAloneNode, leftAloneAs}, {fixedNode, fixedAs}} {
		if err := m.nodes[e[0]].SetNodename(e[1]); err != nil {
			return err
		}
		tl.logf("node", "%s joins, re-imaged from %s's disk: its %s still says %q, and its Calico CNI configuration names no node", e[0], e[1], calico.NodenameFile, e[1])
	}
	for _, n := range []string{leftAloneNode, fixedNode} {
		fs, err := m.scanNode(ctx, n)
		if err != nil {
			return err
		}
		m.res.Findings = append(m.res.Findings, fs...)
	}
	return nil
}

// run runs a pod on a node and records it.
func (m *misbook) run(ctx context.Context, node, name string) (*calico.Pod, error) {
	p, err := m.nodes[node].RunPod(ctx, misbookNS, name)
	if err != nil {
		return nil, err
	}
	m.res.Pods = append(m.res.Pods, MisbookPod{Pod: p.Ref(), Node: p.Node, BookedAs: p.BookedAs, IP: p.IP.String(), Started: m.tl.since(p.Started)})
	return p, nil
}

// book starts the re-imaged nodes' first pods and reports what ghostwatch
// finds.
func (m *misbook) book(ctx context.Context) error {
	tl := m.tl
	tl.section("the re-imaged nodes start their first pods, before calico-node corrects their nodename files")
	m.alone = &ending{node: leftAloneNode, as: leftAloneAs, result: &MisbookEnding{}}
	m.fixed = &ending{node: fixedNode, as: fixedAs, result: &MisbookEnding{Fixed: true}}
	for _, e := range []*ending{m.alone, m.fixed} {
		name := "csi-node-driver-" + strings.TrimPrefix(e.node, "node-")
		// Before its ADD: the collector may judge it at once.
		m.kcLog.watch(misbookNS + "/" + name)
		p, err := m.run(ctx, e.node, name)
		if err != nil {
			return err
		}
		e.pod = p
		*e.result = MisbookEnding{Fixed: e.result.Fixed, Node: e.node, BookedAs: p.BookedAs, Pod: p.Ref(), PodIP: p.IP.String(), BookedAt: tl.since(p.Started)}
		tl.logf("kubelet", "%s: pod %s: calico-ipam ADD -> %s", e.node, p.Ref(), p.IP)
		if line := m.cniLog(e.node, p); line != "" {
			tl.logf("calico-ipam", "%s's CNI log: %s", e.node, line)
		}
		if err := m.ledger(ctx, p); err != nil {
			return err
		}
	}
	r, err := m.scan(ctx)
	if err != nil {
		return err
	}
	m.res.Findings = append(m.res.Findings, r.Findings...)
	for _, e := range []*ending{m.alone, m.fixed} {
		for _, f := range r.Findings {
			if f.Rule != rule.IPAMMisbookedID || f.Subject.IP != e.pod.IP.String() {
				continue
			}
			from, err1 := time.Parse(time.RFC3339, fmt.Sprint(f.Evidence["freed_from"]))
			by, err2 := time.Parse(time.RFC3339, fmt.Sprint(f.Evidence["freed_by"]))
			if err1 != nil || err2 != nil {
				tl.logf("ghostwatch", "gave no window for %s", e.pod.IP)
				continue
			}
			e.from, e.by = from, by
			e.result.PredictedFreedFrom, e.result.PredictedFreedBy = seconds(tl, from), seconds(tl, by)
			tl.logf("ghostwatch", "predicts the collector frees %s between +%.1fs and +%.1fs on this timeline: one to two leakGracePeriods (%s; Calico's default: 15m) after its booking, whose time it reads to the second",
				e.pod.IP, tl.since(from), tl.since(by), m.grace)
		}
	}
	if m.opts.Inspect != nil {
		kubeconfig, err := m.cp.WriteKubeconfig(controlplane.UserAdmin)
		if err != nil {
			return err
		}
		roots := map[string]string{}
		for name, n := range m.nodes {
			roots[name] = n.Root
		}
		if err := m.opts.Inspect(ctx, kubeconfig, []netip.Addr{m.alone.pod.IP, m.fixed.pod.IP}, roots); err != nil {
			return fmt.Errorf("inspecting the misbooked addresses: %w", err)
		}
	}
	return nil
}

// fix corrects the fixed node's nodename file and re-creates its pod, as
// ipam-misbooked says, before the collector frees the address.
func (m *misbook) fix(ctx context.Context) error {
	tl, e := m.tl, m.fixed
	tl.section("%s fixed as ghostwatch says, before the collector frees its pod's address; %s left alone", e.node, m.alone.node)
	// Once the collector holds the address for a leak too, as an
	// operator answering the finding would find it: at its first scan
	// after the booking, at most half a grace later (waited for up to
	// three quarters, still before the window opens).
	deadline := e.pod.Started.Add(m.grace * 3 / 4)
	for !m.kcLog.logged("Candidate IP leak", e.pod.Ref()) && time.Now().Before(deadline) {
		if err := m.tick(ctx); err != nil {
			return err
		}
		m.kcLog.poll()
	}
	n := m.nodes[e.node]
	if err := n.SetNodename(e.node); err != nil {
		return err
	}
	e.result.FixedAt = seconds(tl, time.Now())
	tl.logf("operator", "%s: %s now says %q, as calico-node writes it at its start", e.node, calico.NodenameFile, e.node)
	if _, err := m.scanNode(ctx, e.node); err != nil {
		return err
	}
	if err := n.DeletePod(ctx, e.pod); err != nil {
		return err
	}
	tl.logf("kubelet", "%s: pod %s deleted (kubectl delete pod, the finding's re_create): calico-ipam DEL released %s", e.node, e.pod.Ref(), e.pod.IP)
	if err := m.ledger(ctx, e.pod); err != nil {
		return err
	}
	m.kcLog.watch(e.pod.Ref() + "-2")
	p, err := m.run(ctx, e.node, e.pod.Name+"-2")
	if err != nil {
		return err
	}
	e.recreated = p
	e.result.RecreatedPod, e.result.RecreatedPodIP = p.Ref(), p.IP.String()
	tl.logf("kubelet", "%s: pod %s, re-created by its controller: calico-ipam ADD -> %s", e.node, p.Ref(), p.IP)
	if err := m.ledger(ctx, p); err != nil {
		return err
	}
	_, err = m.scan(ctx)
	return err
}

// collect waits for the collector to free the left-alone pod's address,
// up to labPatience past the window ghostwatch gave and a scan interval:
// a busy machine delays the collector's scans, and the timeline says
// whether the free came inside the window.
func (m *misbook) collect(ctx context.Context) error {
	tl, e := m.tl, m.alone
	tl.section("calico-kube-controllers' leak collector (leakGracePeriod %s; Calico's default: 15m)", m.grace)
	deadline := e.pod.Started.Add(2*m.grace + m.grace/2 + labPatience)
	if !e.by.IsZero() {
		deadline = e.by.Add(m.grace/2 + labPatience)
	}
	for {
		_, a, err := m.c.Booked(ctx, e.pod.IP)
		if err != nil {
			return err
		}
		if a == nil || a.HandleID == nil || *a.HandleID != e.pod.Request.HandleID() {
			e.freed = time.Now()
			break
		}
		if time.Now().After(deadline) {
			tl.logf("ledger", "%s is still booked for %s at +%.1fs: the collector did not free it", e.pod.IP, e.pod.Ref(), tl.since(time.Now()))
			return nil
		}
		if err := m.tick(ctx); err != nil {
			return err
		}
	}
	m.kcLog.poll()
	r := e.result
	r.FreedAt = seconds(tl, e.freed)
	r.FreedInWindow = !e.from.IsZero() && !e.freed.Before(e.from) && !e.freed.After(e.by)
	in := "no window was given"
	switch {
	case r.FreedInWindow:
		in = "inside the window ghostwatch gave"
	case !e.from.IsZero() && e.freed.Before(e.from):
		in = "before the window ghostwatch gave"
	case !e.from.IsZero():
		in = "after the window ghostwatch gave"
	}
	tl.logf("ledger", "%s freed at +%.1fs, %s after its booking: %s", e.pod.IP, tl.since(e.freed), e.freed.Sub(e.pod.Started).Round(100*time.Millisecond), in)
	if err := m.ledger(ctx, e.pod); err != nil {
		return err
	}
	_, err := m.scan(ctx)
	return err
}

// windowEnds waits for the end of the window in which the collector would
// have freed the fixed node's first address, and says what it freed there.
func (m *misbook) windowEnds(ctx context.Context) error {
	tl, e := m.tl, m.fixed
	end := e.by
	if end.IsZero() {
		end = e.pod.Started.Add(2 * m.grace)
	}
	end = end.Add(time.Second) // freed_by is to the second
	tl.section("the end of %s's window (+%.1fs): what the collector freed there", e.node, tl.since(end))
	for time.Now().Before(end) {
		if err := m.tick(ctx); err != nil {
			return err
		}
	}
	m.kcLog.poll()
	_, a, err := m.c.Booked(ctx, e.recreated.IP)
	if err != nil {
		return err
	}
	if a == nil || a.HandleID == nil || *a.HandleID != e.recreated.Request.HandleID() {
		e.freed = time.Now()
		e.result.FreedAt = seconds(tl, e.freed)
		tl.logf("ledger", "%s is no longer booked for %s", e.recreated.IP, e.recreated.Ref())
	} else {
		tl.logf("ledger", "%s still booked for %s under %s, where it runs; nothing of %s's was freed under a running pod", e.recreated.IP, e.recreated.Ref(), a.Secondary["node"], e.node)
	}
	return nil
}

// nextPod starts the next pod on the ending's stale name's node and says
// whether it got an address a running pod holds.
func (m *misbook) nextPod(ctx context.Context, e *ending, what string) error {
	tl := m.tl
	if e == m.alone {
		tl.section("the next pod on %s", e.as)
		if e.freed.IsZero() {
			tl.logf("kubelet", "%s's block is full until the collector frees %s: no next pod", e.as, e.pod.IP)
			return nil
		}
	}
	p, err := m.run(ctx, e.as, fmt.Sprintf("web-%s-%d", strings.TrimPrefix(e.as, "node-"), fillers))
	if err != nil {
		return err
	}
	e.next = p
	e.result.NextPod, e.result.NextPodIP = p.Ref(), p.IP.String()
	// Who else holds the address, as the API server says.
	pods, err := m.cp.Admin.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "status.podIP=" + p.IP.String()})
	if err != nil {
		return err
	}
	for _, q := range pods.Items {
		if q.UID != p.UID && q.DeletionTimestamp == nil {
			e.result.DuplicateOf = q.Namespace + "/" + q.Name
			tl.logf("kubelet", "%s: pod %s: calico-ipam ADD -> %s, which pod %s still holds on %s", e.as, p.Ref(), p.IP, e.result.DuplicateOf, q.Spec.NodeName)
		}
	}
	switch {
	case e.result.DuplicateOf != "":
	case p.IP == e.pod.IP:
		tl.logf("kubelet", "%s: pod %s: calico-ipam ADD -> %s, which %s had until it was deleted: no running pod holds it", e.as, p.Ref(), p.IP, e.pod.Ref())
	default:
		tl.logf("kubelet", "%s: pod %s: calico-ipam ADD -> %s, which no running pod holds", e.as, p.Ref(), p.IP)
	}
	r, err := m.scan(ctx)
	if err != nil {
		return err
	}
	e.result.Findings = concerning(r.Findings, e)
	if len(e.result.Findings) == 0 {
		tl.logf("ghostwatch", "%s: nothing about the pods of %s and %s", what, e.node, e.as)
	}
	return nil
}

// concerning are the findings about e's pods' addresses or nodes.
func concerning(fs []finding.Finding, e *ending) []finding.Finding {
	ips := []string{e.pod.IP.String()}
	for _, p := range []*calico.Pod{e.recreated, e.next} {
		if p != nil {
			ips = append(ips, p.IP.String())
		}
	}
	out := []finding.Finding{}
	for _, f := range fs {
		if slices.Contains(ips, f.Subject.IP) || f.Subject.Node == e.node || f.Subject.Node == e.as {
			out = append(out, f)
		}
	}
	return out
}

// summary prints each ending in one line.
func (m *misbook) summary() {
	tl := m.tl
	tl.section("summary")
	for _, e := range []*ending{m.alone, m.fixed} {
		r := e.result
		window := "no window given"
		if r.PredictedFreedFrom != nil {
			window = fmt.Sprintf("ghostwatch's window +%.1fs to +%.1fs (one to two leakGracePeriods of %s after the booking; Calico's default: 15m)", *r.PredictedFreedFrom, *r.PredictedFreedBy, m.grace)
		}
		freed := "nothing freed under a running pod"
		if r.FreedAt != nil {
			freed = fmt.Sprintf("freed at +%.1fs, %s after the booking", *r.FreedAt, e.freed.Sub(e.pod.Started).Round(100*time.Millisecond))
			if r.FreedInWindow {
				freed += ", inside the window"
			} else {
				freed += ", outside the window"
			}
		}
		next := "no next pod"
		switch {
		case r.DuplicateOf != "":
			next = fmt.Sprintf("%s got %s, which %s holds: a duplicate pod IP", r.NextPod, r.NextPodIP, r.DuplicateOf)
		case r.NextPod != "":
			next = fmt.Sprintf("%s got %s: no duplicate", r.NextPod, r.NextPodIP)
		}
		if r.Fixed {
			tl.logf("result", "fixed (%s, booked under %s): %s at +%.1fs; fixed and re-created at +%.1fs (%s got %s); %s; %s; %s",
				r.Node, r.BookedAs, r.PodIP, r.BookedAt, *r.FixedAt, r.RecreatedPod, r.RecreatedPodIP, window, freed, next)
		} else {
			tl.logf("result", "left alone (%s, booked under %s): %s at +%.1fs; %s; %s; %s", r.Node, r.BookedAs, r.PodIP, r.BookedAt, window, freed, next)
		}
		m.res.Endings = append(m.res.Endings, *r)
	}
}

// tick waits a little, and fails when the context ends or the collector
// exited.
func (m *misbook) tick(ctx context.Context) error {
	select {
	case <-ctx.Done():
		return context.Cause(ctx)
	case <-time.After(100 * time.Millisecond):
	}
	return m.cp.Check()
}

// scan runs the cluster's rules as ghostwatch scan does: the Pods and
// Nodes and Calico's ledger read from the API server. It prints each
// finding.
func (m *misbook) scan(ctx context.Context) (*audit.Result, error) {
	r := audit.Run(ctx, audit.Config{
		Sources: []source.Source{&live.APISource{Client: m.cp.Admin, Timeout: 30 * time.Second}, m.calico},
		Rules:   rule.InScope(rule.All(rule.Config{}), rule.ScopeCluster),
	})
	if err := r.Incomplete(); err != nil {
		return nil, fmt.Errorf("ghostwatch's scan: %w", err)
	}
	if len(r.Findings) == 0 {
		m.tl.logf("ghostwatch", "no finding")
	}
	for _, f := range r.Findings {
		m.tl.logf("ghostwatch", "%s %s: %s", f.Severity, f.Rule, f.Message)
	}
	return r, nil
}

// scanNode runs stale-nodename-file on a node's files, as the agent on it
// does, and prints what it finds.
func (m *misbook) scanNode(ctx context.Context, node string) ([]finding.Finding, error) {
	r := audit.Run(ctx, audit.Config{
		NodeName: node,
		Sources:  []source.Source{&live.APISource{Client: m.cp.Admin, Timeout: 30 * time.Second}, &caliconode.Source{Root: m.nodes[node].Root}},
		Rules:    []rule.Rule{&rule.StaleNodenameFile{}},
	})
	if err := r.Incomplete(); err != nil {
		return nil, fmt.Errorf("ghostwatch on node %s: %w", node, err)
	}
	if len(r.Findings) == 0 {
		m.tl.logf("ghostwatch", "on %s's files: no finding", node)
	}
	for _, f := range r.Findings {
		m.tl.logf("ghostwatch", "on %s's files: %s %s: %s", node, f.Severity, f.Rule, f.Message)
	}
	return r.Findings, nil
}

// ledger says how Calico's datastore books p's address.
func (m *misbook) ledger(ctx context.Context, p *calico.Pod) error {
	b, a, err := m.c.Booked(ctx, p.IP)
	if err != nil {
		return err
	}
	if b == nil {
		m.tl.logf("ledger", "no block holds %s", p.IP)
		return nil
	}
	affinity := "no affinity"
	if b.Affinity != nil {
		affinity = "affinity " + *b.Affinity
	}
	switch {
	case a == nil:
		next := "the next address it hands out"
		if n := freeBefore(b, p.IP); n > 0 {
			next = fmt.Sprintf("handed out after %d other free addresses", n)
		}
		m.tl.logf("ledger", "block %s (%s) lists %s as free: %s", b.CIDR, affinity, p.IP, next)
	default:
		owner := "no pod"
		if a.Secondary["pod"] != "" {
			owner = "pod " + a.Secondary["namespace"] + "/" + a.Secondary["pod"]
		}
		m.tl.logf("ledger", "block %s (%s) books %s for %s with secondary.node %s", b.CIDR, affinity, p.IP, owner, a.Secondary["node"])
	}
	return nil
}

// freeBefore counts the free addresses a block hands out before ip: its
// unallocated ordinals are a queue, and a freed one joins at the end.
func freeBefore(b *calico.IPAMBlock, ip netip.Addr) int {
	base := netip.MustParsePrefix(b.CIDR).Masked().Addr()
	n := 0
	for _, ord := range b.Unallocated {
		a := base
		for range ord {
			a = a.Next()
		}
		if a == ip {
			return n
		}
		n++
	}
	return n
}

// cniAssign is calico-ipam's log line for an ADD, with the node name it
// booked under.
var cniAssign = regexp.MustCompile(`Auto assigning IP .*(Workload="[^"]*").*"node":("[^"]*").*(Hostname:"[^"]*")`)

// cniLog is what calico-ipam logged on node when it booked p: the
// workload endpoint it named and the node it booked under, as in the
// seed's evidence; "" when the log has no such line.
func (m *misbook) cniLog(node string, p *calico.Pod) string {
	b, err := os.ReadFile(m.nodes[node].Path("/var/log/calico/cni/cni.log"))
	if err != nil {
		return ""
	}
	for _, line := range slices.Backward(strings.Split(string(b), "\n")) {
		if !strings.Contains(line, p.Request.ContainerID) {
			continue
		}
		if s := cniAssign.FindStringSubmatch(line); s != nil {
			return fmt.Sprintf("Auto assigning IP %s Attrs node:%s %s", s[1], s[2], s[3])
		}
	}
	return ""
}

func seconds(tl *timeline, t time.Time) *float64 {
	s := tl.since(t)
	return &s
}

// collectorLog prints kube-controllers' judgements of the watched pods'
// allocations as its log says them, once each: the judgement repeats at
// every scan.
type collectorLog struct {
	mu   sync.Mutex
	path string
	off  int64
	rest string
	tl   *timeline
	// pods are the watched pods (namespace/name), as the log names an
	// allocation's pod: known before the address is.
	pods map[string]bool
	// said holds what was printed, by words and pod.
	said map[string]bool
}

// collectorWords are the messages about one allocation the lab shows.
var collectorWords = []string{
	"Pod rescheduled on new node", "Candidate IP leak", "Confirmed IP leak", "Garbage collecting leaked IP address",
	"Leaked IP has been resurrected", "Confirmed valid IP",
}

// collectorLine is kube-controllers' log line: time, level, caller,
// message and key=value fields.
var collectorLine = regexp.MustCompile(`^\S+ \S+ \[\w+\]\[\d+\] \S+ \d+: (.*?)((?: \w+=(?:"[^"]*"|\S+))*)$`)

var collectorField = regexp.MustCompile(`(\w+)=("[^"]*"|\S+)`)

// watch has the lines about pod's allocations printed from the next poll.
func (l *collectorLog) watch(pod string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.pods[pod] = true
}

// logged reports whether the log said words (one of collectorWords) about
// pod's allocation.
func (l *collectorLog) logged(words, pod string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.said[words+" "+pod]
}

func (l *collectorLog) run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
		l.poll()
	}
}

// poll prints the lines written since the last poll.
func (l *collectorLog) poll() {
	l.mu.Lock()
	defer l.mu.Unlock()
	f, err := os.Open(l.path)
	if err != nil {
		return
	}
	defer f.Close()
	b, err := io.ReadAll(io.NewSectionReader(f, l.off, 1<<30))
	if err != nil {
		return
	}
	l.off += int64(len(b))
	lines := strings.Split(l.rest+string(b), "\n")
	l.rest = lines[len(lines)-1]
	for _, line := range lines[:len(lines)-1] {
		s := collectorLine.FindStringSubmatch(line)
		if s == nil {
			continue
		}
		msg, fields := s[1], map[string]string{}
		for _, kv := range collectorField.FindAllStringSubmatch(s[2], -1) {
			fields[kv[1]] = strings.Trim(kv[2], `"`)
		}
		if !l.pods[fields["pod"]] {
			continue
		}
		i := slices.IndexFunc(collectorWords, func(w string) bool { return strings.HasPrefix(msg, w) })
		if i < 0 || l.said[collectorWords[i]+" "+fields["pod"]] {
			continue
		}
		l.said[collectorWords[i]+" "+fields["pod"]] = true
		var kv []string
		for _, k := range []string{"ip", "pod", "node", "old", "new"} {
			if v, ok := fields[k]; ok {
				kv = append(kv, k+"="+v)
			}
		}
		l.tl.logf("kube-controllers", "%s %s", msg, strings.Join(kv, " "))
	}
}
