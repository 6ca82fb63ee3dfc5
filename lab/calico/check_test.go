package calico

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/netip"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/ghostwatch/ghostwatch/audit"
	"github.com/ghostwatch/ghostwatch/rule"
	"github.com/ghostwatch/ghostwatch/snapshot"
)

// checkPool is one pool of /29 blocks for every node.
const checkPool = `apiVersion: projectcalico.org/v3
kind: IPPool
metadata:
  name: pods
spec:
  cidr: 10.244.0.0/26
  blockSize: 29
  ipipMode: Never
  vxlanMode: Never
  nodeSelector: all()
`

// TestIPAMCheckSideBySide sets up, with Calico's own components on the
// real API server, every problem calicoctl ipam check counts and every
// case it miscounts, runs calicoctl v3.30.1's check and ghostwatch's Calico
// rules on the same objects, and compares: every real problem calicoctl
// counts is a ghostwatch finding, and where calicoctl is wrong ghostwatch
// is not.
func TestIPAMCheckSideBySide(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.node(t, "node-a")
	e.node(t, "node-b")
	if err := e.c.Apply(ctx, checkPool); err != nil {
		t.Fatal(err)
	}
	// calicoctl ipam check reads the configuration kube-controllers makes
	// at its first start; Calico's default grace.
	if err := e.c.Configure(ctx, KubeControllersOptions{}); err != nil {
		t.Fatal(err)
	}

	// Booked and held: no problem for either.
	web := e.runPod(t, "web", "node-a", "node-a")
	// The last two addresses of node-a's block, which the pods below do
	// not reach, for the allocations written by hand.
	block := netip.PrefixFrom(web.IP, 29).Masked()
	last := snapshot.BlockAddr(block, 7)
	// A pod deleted without its CNI DEL: a leak for both.
	gone := e.runPod(t, "gone", "node-a", "node-a")
	e.deletePod(t, "gone")
	// Running, its allocation released by a DEL (a sandbox torn down
	// twice): in use with no allocation, for both.
	api := e.runPod(t, "api", "node-a", "node-a")
	if err := e.nodes["node-a"].ReleaseIP(ctx, api.Request); err != nil {
		t.Fatal(err)
	}
	// An address no pool holds (another IPAM's): in use outside any
	// active pool, for both; info for ghostwatch.
	other := e.podWithIP(t, "other", "node-b", "192.168.50.5")
	// A running pod booked under another existing node: ipam-misbooked,
	// which calicoctl never counts.
	misbooked := e.runPod(t, "misbooked", "node-b", "node-a")
	// A running pod whose address is booked for a pod that is gone (its
	// own booking lost): calicoctl sees an address in use and allocated;
	// the leak collector will free it under the pod.
	old := e.runPod(t, "cart-old", "node-a", "node-a")
	e.deletePod(t, "cart-old")
	cart := e.podWithIP(t, "cart", "node-a", old.IP.String())

	// What calicoctl counts as leaks and are none:
	// a Pending pod whose sandbox is being given its address;
	pending := e.pendingPod(t, "starting", "node-a")
	// an allocation without pod attributes, kept by the collector;
	manual := e.book(t, snapshot.BlockAddr(block, 6).String(), "manual-reservation", nil)
	// a deleted node's tunnel address, which the collector frees with the
	// node's other allocations.
	tunnel := e.book(t, last.String(), "ipip-tunnel-addr-node-gone", map[string]string{"node": "node-gone", "type": "ipipTunnelAddress"})
	// A handle with no address: a leaked handle for both.
	e.handle(t, "k8s-pod-network.lost")

	report, _, out, err := e.c.IPAMCheck(ctx)
	if err != nil {
		t.Fatalf("calicoctl ipam check: %v\n%s", err, out)
	}
	t.Logf("calicoctl ipam check:\n%s", out)
	var calicoLeaked []string
	for ip, allocs := range report.Allocations {
		inUse := false
		for _, a := range allocs {
			inUse = inUse || a.InUse
		}
		if !inUse {
			calicoLeaked = append(calicoLeaked, ip)
		}
	}
	sort.Strings(calicoLeaked)
	notAllocated := problemIPs(out, `(?m)^\s+(\S+) in use by .* and in active IPAM pool but has no IPAM allocation\.$`)
	notInPool := problemIPs(out, `(?m)^\s+(\S+) in use by .* is not in any active IP pool\.$`)
	var calicoHandles []string
	for _, h := range report.LeakedHandles {
		calicoHandles = append(calicoHandles, h.ID)
	}

	// What calicoctl counts, as the seeds and its sources say it does.
	wantLeaked := sorted(gone.IP.String(), pending.String(), manual.String(), tunnel.String())
	if !slices.Equal(calicoLeaked, wantLeaked) {
		t.Errorf("calicoctl leaked %v, want %v", calicoLeaked, wantLeaked)
	}
	if !slices.Equal(notAllocated, []string{api.IP.String()}) || !slices.Equal(notInPool, []string{other.String()}) {
		t.Errorf("calicoctl: in use with no allocation %v, outside active pools %v", notAllocated, notInPool)
	}
	if !slices.Contains(calicoHandles, "k8s-pod-network.lost") {
		t.Errorf("calicoctl leaked handles %v", calicoHandles)
	}
	if strings.Contains(out, misbooked.IP.String()) || strings.Contains(out, cart.String()+" in use") {
		t.Errorf("calicoctl reports the misbooking or the booking for a gone pod; it is not known to")
	}

	// ghostwatch on the same objects, judged as of when the leaks are
	// older than ipam-leaked-ip's minimum age.
	res := e.ghostwatch(t)
	if gc := res.Snapshot.Calico.LeakGC; gc != nil {
		t.Logf("leak collector: %s from %s", gc.GracePeriod, gc.From)
	}
	res.Snapshot.Taken = res.Snapshot.Taken.Add(rule.LeakMinAge + time.Second)
	rules := []rule.Rule{&rule.IPAMUnbookedIP{}, &rule.IPAMLeakedIP{}, &rule.IPAMMisbooked{}, &rule.IPAMLedgerCorrupt{}, &rule.DuplicatePodIP{}}
	judged := audit.Judge(res.Snapshot, rules)
	if len(judged.Skipped) > 0 {
		t.Fatalf("skipped: %+v", judged.Skipped)
	}
	got := map[string]string{}
	for _, f := range judged.Findings {
		k := f.Rule + " " + f.Subject.IP
		if f.Subject.IP == "" {
			k += f.Evidence["handle"].(string)
		}
		got[k] = f.Severity.String()
		t.Logf("ghostwatch: %s %s: %s", f.Severity, f.Rule, f.Message)
	}
	want := map[string]string{
		// Every real problem calicoctl counts.
		rule.IPAMLeakedIPID + " " + gone.IP.String():  "info",
		rule.IPAMUnbookedIPID + " " + api.IP.String(): "critical",
		rule.IPAMUnbookedIPID + " " + other.String():  "info",
		rule.IPAMLeakedIPID + " k8s-pod-network.lost": "info",
		// What it does not count.
		rule.IPAMMisbookedID + " " + misbooked.IP.String(): "critical",
		rule.IPAMUnbookedIPID + " " + cart.String():        "critical",
	}
	for k, sev := range want {
		if got[k] != sev {
			t.Errorf("ghostwatch: %s is %q, want %s", k, got[k], sev)
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			t.Errorf("ghostwatch: %s (%s) is no problem", k, got[k])
		}
	}
}

func problemIPs(out, pattern string) []string {
	var ips []string
	for _, m := range regexp.MustCompile(pattern).FindAllStringSubmatch(out, -1) {
		ips = append(ips, m[1])
	}
	sort.Strings(ips)
	return ips
}

func sorted(s ...string) []string { sort.Strings(s); return s }

// deletePod deletes a pod object at once, as a force deletion does,
// without the CNI DEL that would release its address.
func (e *env) deletePod(t *testing.T, name string) {
	t.Helper()
	zero := int64(0)
	if err := e.api.CoreV1().Pods("default").Delete(context.Background(), name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
}

// podWithIP is a Running pod reporting ip, which no Calico call gave it.
func (e *env) podWithIP(t *testing.T, name, node, ip string) netip.Addr {
	t.Helper()
	ctx := context.Background()
	p, err := e.api.CoreV1().Pods("default").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "workload", Image: "lab"}}},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	now := metav1.Now()
	p.Status = corev1.PodStatus{Phase: corev1.PodRunning, StartTime: &now, PodIP: ip, PodIPs: []corev1.PodIP{{IP: ip}}}
	if _, err := e.api.CoreV1().Pods("default").UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	return netip.MustParseAddr(ip)
}

// pendingPod is a pod whose CNI ADD has returned but whose IP the kubelet
// has not reported yet.
func (e *env) pendingPod(t *testing.T, name, node string) netip.Addr {
	t.Helper()
	ctx := context.Background()
	if _, err := e.api.CoreV1().Pods("default").Create(ctx, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name},
		Spec:       corev1.PodSpec{NodeName: node, Containers: []corev1.Container{{Name: "workload", Image: "lab"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	sum := sha256.Sum256([]byte(name))
	ip, err := e.nodes[node].AssignIP(ctx, IPAMRequest{Namespace: "default", Pod: name, ContainerID: hex.EncodeToString(sum[:])})
	if err != nil {
		t.Fatal(err)
	}
	return ip
}

// book allocates ip in the block that holds it, as Calico stores an
// allocation (attribute, ordinal out of unallocated, handle), for
// allocations no tool here makes: a node's tunnel address, an address
// reserved by hand.
func (e *env) book(t *testing.T, ip, handle string, secondary map[string]string) netip.Addr {
	t.Helper()
	ctx := context.Background()
	a := netip.MustParseAddr(ip)
	blocks, err := e.c.List(ctx, IPAMBlocks)
	if err != nil {
		t.Fatal(err)
	}
	for i := range blocks {
		obj := &blocks[i]
		b, err := Spec[IPAMBlock](obj)
		if err != nil {
			t.Fatal(err)
		}
		p := netip.MustParsePrefix(b.CIDR)
		if !p.Contains(a) {
			continue
		}
		ord := snapshot.BlockOrdinal(p, a)
		if b.Allocations[ord] != nil || !slices.Contains(b.Unallocated, ord) {
			t.Fatalf("%s is allocated already", ip)
		}
		idx := len(b.Attributes)
		spec := obj.Object["spec"].(map[string]any)
		attr := map[string]any{"handle_id": handle}
		if secondary != nil {
			sec := map[string]any{}
			for k, v := range secondary {
				sec[k] = v
			}
			attr["secondary"] = sec
		}
		spec["attributes"] = append(spec["attributes"].([]any), attr)
		spec["allocations"].([]any)[ord] = int64(idx)
		var free []any
		for _, o := range b.Unallocated {
			if o != ord {
				free = append(free, int64(o))
			}
		}
		spec["unallocated"] = free
		if _, err := e.c.dyn.Resource(IPAMBlocks).Update(ctx, obj, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		e.handleIn(t, handle, b.CIDR)
		return a
	}
	t.Fatalf("no block holds %s", ip)
	return netip.Addr{}
}

// handle makes an IPAMHandle holding no address.
func (e *env) handle(t *testing.T, id string) { e.handleIn(t, id, "") }

func (e *env) handleIn(t *testing.T, id, cidr string) {
	t.Helper()
	blocks := map[string]any{}
	if cidr != "" {
		blocks[cidr] = int64(1)
	}
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "crd.projectcalico.org/v1", "kind": "IPAMHandle",
		"metadata": map[string]any{"name": HandleName(id)},
		"spec":     map[string]any{"handleID": id, "block": blocks, "deleted": false},
	}}
	if _, err := e.c.dyn.Resource(IPAMHandles).Create(context.Background(), obj, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}
