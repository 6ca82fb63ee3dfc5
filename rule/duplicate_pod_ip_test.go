package rule

import (
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/ghostwatch/ghostwatch/finding"
	"github.com/ghostwatch/ghostwatch/snapshot"
)

func on(p snapshot.Pod, node string) snapshot.Pod { p.Node = node; return p }

func withIPs(p snapshot.Pod, addrs ...string) snapshot.Pod { p.IPs = ips(addrs...); return p }

func TestDuplicatePodIP(t *testing.T) {
	type dup struct {
		ip  string
		sev finding.Severity
		pod string
	}
	for _, c := range []struct {
		name string
		pods []snapshot.Pod
		want []dup
	}{
		{
			name: "seed 003: the host-local directory was wiped and the next pod got a running pod's IP",
			pods: []snapshot.Pod{
				on(pod("default", "debug-zgs7k", "u1", "10.244.2.10", t0), "kind-worker3"),
				on(pod("default", "debug-hkhx9", "u2", "10.244.2.10", t0.Add(11*time.Minute)), "kind-worker3"),
				on(pod("default", "debug-pwk9v", "u3", "10.244.2.2", t0), "kind-worker3"),
			},
			want: []dup{{"10.244.2.10", finding.Critical, "default/debug-hkhx9"}},
		},
		{
			name: "seed 002: Calico freed a running pod's IP and gave it to a pod on another node",
			pods: []snapshot.Pod{
				on(pod("calico-system", "csi-node-driver-rlfpx", "u1", "10.200.129.198", t0), "10-199-0-105"),
				on(pod("calico-system", "csi-node-driver-6bhc7", "u2", "10.200.129.198", t0.Add(20*time.Minute)), "10-199-1-92"),
			},
			want: []dup{{"10.200.129.198", finding.Critical, "calico-system/csi-node-driver-6bhc7"}},
		},
		{
			name: "three holders, IPs sorted as addresses",
			pods: []snapshot.Pod{
				pod("a", "x", "u1", "10.0.0.10", t0),
				pod("a", "y", "u2", "10.0.0.10", t0.Add(time.Minute)),
				pod("a", "z", "u3", "10.0.0.10", t0.Add(2*time.Minute)),
				pod("b", "p", "u4", "10.0.0.9", t0),
				pod("b", "q", "u5", "10.0.0.9", t0.Add(time.Minute)),
			},
			want: []dup{{"10.0.0.9", finding.Critical, "b/q"}, {"10.0.0.10", finding.Critical, "a/z"}},
		},
		{
			name: "the second family's IP (status.podIPs) is compared too",
			pods: []snapshot.Pod{
				withIPs(pod("a", "x", "u1", "10.9.9.9", t0), "10.0.0.1", "fd00::1"),
				withIPs(pod("a", "y", "u2", "10.9.9.9", t0.Add(time.Minute)), "10.0.0.2", "fd00::1"),
			},
			want: []dup{{"fd00::1", finding.Critical, "a/y"}},
		},
		{
			name: "hostNetwork pods share the node's address: no duplicate",
			pods: []snapshot.Pod{
				hostNet(pod("kube-system", "kube-proxy-1", "u1", "192.168.1.10", t0)),
				hostNet(pod("kube-system", "node-exporter-1", "u2", "192.168.1.10", t0)),
			},
		},
		{
			name: "a finished pod no longer holds its IP: its reuse is normal",
			pods: []snapshot.Pod{
				phase(pod("jobs", "batch-1", "u1", "10.0.0.5", t0), snapshot.PodSucceeded),
				phase(pod("jobs", "batch-2", "u2", "10.0.0.5", t0), snapshot.PodFailed),
				pod("web", "api", "u3", "10.0.0.5", t0.Add(time.Minute)),
			},
		},
		{
			name: "a terminating pod beside its IP's next holder: a warning that ends when it is gone",
			pods: []snapshot.Pod{
				deleting(pod("web", "api-old", "u1", "10.0.0.5", t0)),
				pod("web", "api-new", "u2", "10.0.0.5", t0.Add(time.Minute)),
			},
			want: []dup{{"10.0.0.5", finding.Warning, "web/api-new"}},
		},
		{
			name: "a pending pod that already has its IP counts",
			pods: []snapshot.Pod{
				pod("web", "api", "u1", "10.0.0.5", t0),
				phase(pod("web", "starting", "u2", "10.0.0.5", t0.Add(time.Minute)), snapshot.PodPending),
			},
			want: []dup{{"10.0.0.5", finding.Critical, "web/starting"}},
		},
		{
			name: "a pod listing one IP twice (IPv4-mapped and plain) is one holder",
			pods: []snapshot.Pod{
				withIPs(pod("a", "x", "u1", "10.9.9.9", t0), "10.0.0.1", "::ffff:10.0.0.1"),
			},
		},
		{
			name: "pods without IPs yet are no holders",
			pods: []snapshot.Pod{
				withIPs(phase(pod("a", "x", "u1", "10.9.9.9", t0), snapshot.PodPending)),
				withIPs(phase(pod("a", "y", "u2", "10.9.9.9", t0), snapshot.PodPending)),
			},
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			s := &snapshot.Snapshot{Kube: &snapshot.Kube{Pods: c.pods},
				Sources: []snapshot.SourceStatus{{Name: "kube", Status: snapshot.StatusOK}}}
			got := NewDuplicatePodIP().Evaluate(s)
			var have []dup
			for _, f := range got {
				have = append(have, dup{f.Subject.IP, f.Severity, f.Subject.Pod})
				if f.Rule != DuplicatePodIPID || len(f.Concerns) < 2 {
					t.Errorf("finding %+v: want the rule's ID and every holder concerned", f)
				}
			}
			if !reflect.DeepEqual(have, c.want) {
				t.Errorf("got %+v, want %+v", have, c.want)
			}
		})
	}
}

func TestDuplicatePodIPEvidence(t *testing.T) {
	k := &snapshot.Kube{Pods: []snapshot.Pod{
		on(pod("default", "debug-hkhx9", "u2", "10.244.2.10", t0.Add(11*time.Minute)), "kind-worker3"),
		on(pod("default", "debug-zgs7k", "u1", "10.244.2.10", t0), "kind-worker3"),
	}}
	got := NewDuplicatePodIP().Evaluate(&snapshot.Snapshot{Kube: k})
	if len(got) != 1 {
		t.Fatalf("got %d findings", len(got))
	}
	f := got[0]
	want := "IP 10.244.2.10 is held by 2 pods on one node: default/debug-zgs7k on kind-worker3 (started 2026-11-01T12:00:00Z), " +
		"default/debug-hkhx9 on kind-worker3 (started 2026-11-01T12:11:00Z); traffic for either may reach the other"
	if f.Message != want {
		t.Errorf("message:\n got %s\nwant %s", f.Message, want)
	}
	if f.Evidence["others"] != "default/debug-zgs7k" || f.Evidence["newest_uid"] != "u2" || f.Evidence["live"] != 2 ||
		f.Evidence["newest_since"] != "2026-11-01T12:11:00Z" || f.Subject.Node != "kind-worker3" {
		t.Errorf("evidence %v, subject %+v", f.Evidence, f.Subject)
	}
	if got := f.Concerns; len(got) != 2 || got[0].UID != "u1" || got[1].UID != "u2" {
		t.Errorf("concerns %+v: want both pods, oldest first", got)
	}
}

func BenchmarkDuplicatePodIP(b *testing.B) {
	const n = 150000
	pods := make([]snapshot.Pod, n)
	for i := range pods {
		a := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
		pods[i] = snapshot.Pod{UID: "u", Namespace: "ns", Name: "p", Node: "n", Phase: snapshot.PodRunning,
			IPs: []netip.Addr{a}, StartTime: t0}
	}
	// Ten duplicates.
	for i := 0; i < 10; i++ {
		pods[i].IPs = pods[n-1-i].IPs
	}
	s := &snapshot.Snapshot{Kube: &snapshot.Kube{Pods: pods}}
	r := NewDuplicatePodIP()
	b.ReportAllocs()
	for b.Loop() {
		if got := r.Evaluate(s); len(got) != 10 {
			b.Fatalf("%d findings", len(got))
		}
	}
}

// Two pods whose podIPs read differently, 10.0.0.5 and ::ffff:10.0.0.5,
// hold one address, as Kubernetes reads them: the finding is on 10.0.0.5
// and says which pod wrote it mapped, whether the pod's record keeps the
// mark (Mapped, as the kube source converts it) or the mapped address, and
// whether the rule reads the pods or the controller's index.
func TestDuplicatePodIPSaysWhichPodWroteItMapped(t *testing.T) {
	a := on(pod("ns", "a", "u1", "10.0.0.5", t0), "node-1")
	b := on(pod("ns", "b", "u2", "10.0.0.5", t0.Add(time.Minute)), "node-2")
	b.Mapped = 0b1
	kept := b
	kept.Mapped, kept.IPs = 0, ips("::ffff:10.0.0.5")
	for name, pods := range map[string][]snapshot.Pod{"marked": {a, b}, "kept mapped": {a, kept}} {
		index := snapshot.NewPodIndex()
		for i := range pods {
			index.Set(&pods[i])
		}
		for from, k := range map[string]*snapshot.Kube{"pods": {Pods: pods}, "index": {Index: index}} {
			got := NewDuplicatePodIP().Evaluate(&snapshot.Snapshot{Kube: k})
			if len(got) != 1 {
				t.Fatalf("%s, %s: %d findings, want one", name, from, len(got))
			}
			f := got[0]
			if want := "IP 10.0.0.5 (pod ns/b reports it as ::ffff:10.0.0.5) is held by 2 pods on 2 nodes: "; f.Subject.IP != "10.0.0.5" || !strings.HasPrefix(f.Message, want) {
				t.Errorf("%s, %s: subject %s, message %q; want it to start %q", name, from, f.Subject.IP, f.Message, want)
			}
			hs := f.Evidence["holders"].([]Holder)
			if hs[0].WrittenAs != "" || hs[1].WrittenAs != "::ffff:10.0.0.5" {
				t.Errorf("%s, %s: holders %+v", name, from, hs)
			}
			if d := NewDuplicatePodIP().Info().Detail(f); !strings.HasSuffix(d, "; pod ns/b reports it as ::ffff:10.0.0.5") {
				t.Errorf("%s, %s: detail %q", name, from, d)
			}
		}
	}
}
