package rule

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/ghostwatch/ghostwatch/snapshot"
)

// A node agent sees the pods of its own node only, and asks the API server
// which pods hold the addresses the rules name (snapshot.HolderReader). Its
// findings must be those of a process that sees every pod. This test holds
// the conntrack rules to it on random clusters: each is judged once with
// every pod, and once as the agent sees it (its node's pods and Node, the
// holders of the addresses the rules ask about looked up as the API server
// selects them: by a pod's first address), and the findings must agree.
//
// The endpoints are what the EndpointSlice controller makes: the pod a
// slice lists at an address holds it, or held it when the slice was last
// written; Since is when the agent first saw the address listed for that
// pod, never before the pod had it.
func TestPartialPodsJudgeAsEveryPod(t *testing.T) {
	// How many findings of each kind the cases compared hold: the test
	// must compare many of each.
	compared := map[string]int{}
	for seed := uint64(0); seed < 4000; seed++ {
		rng := rand.New(rand.NewPCG(seed, 11))
		k := randomCluster(rng)
		for i := range k.Pods {
			if rng.IntN(2) == 0 {
				k.Pods[i].Node = "node-b"
			}
		}
		listPods(rng, &k)
		// Pods in the order every source gives them: by namespace and
		// name.
		sort.SliceStable(k.Pods, func(i, j int) bool {
			a, b := k.Pods[i].Ref(), k.Pods[j].Ref()
			return a.Namespace < b.Namespace || a.Namespace == b.Namespace && a.Name < b.Name
		})
		flows := randomFlows(rng, k)
		for i := range flows {
			if flows[i].Start.IsZero() && rng.IntN(2) == 0 {
				flows[i].Seen = t0.Add(randomOffset(rng))
			}
		}
		// One case is judged apart: a backend at another node's address
		// (a hostNetwork pod there), listed not serving for a pod that
		// is gone, where no pod holds the address now. Seeing every
		// Node, a process cannot tell which hostNetwork pod a node
		// address is and leaves it be; the agent, which sees its own
		// Node only, finds no pod there and judges it as any backend
		// listed for a pod that is gone: stale (nothing listens there).
		var apart, dups []snapshot.Flow
		flows = slices.DeleteFunc(flows, func(f snapshot.Flow) bool {
			switch {
			case otherNodeListedDead(k, f):
				apart = append(apart, f)
			case duplicated(k, f.Reply.Src), lagging(k, f):
				// Two live pods hold the backend's address (the
				// controller's duplicate-pod-ip finds that), or a slice
				// still lists the address for a pod that no longer
				// holds it while another does. The agent judges a flow
				// to a listed address against the pod the slice lists:
				// it may miss a misdelivery to the other pod until the
				// slice changes, and must never call a flow stale that
				// is not.
				dups = append(dups, f)
			default:
				return false
			}
			return true
		})
		for _, f := range dups {
			all := judgeAll(snap(k), []snapshot.Flow{f}, nil)
			got := judgeAll(snap(agentView(k, "node-a")), []snapshot.Flow{f}, func(s *snapshot.Snapshot, addrs []netip.Addr) {
				resolveFrom(s, k, addrs)
			})
			if strings.Contains(got, StaleNATFlowID) && !strings.Contains(all, StaleNATFlowID) {
				t.Fatalf("seed %d: a flow to a duplicated address is stale as the agent sees it (%q), not with every pod (%q)", seed, got, all)
			}
		}
		full := judgeAll(snap(k), flows, nil)
		partial := judgeAll(snap(agentView(k, "node-a")), flows, func(s *snapshot.Snapshot, addrs []netip.Addr) {
			resolveFrom(s, k, addrs)
		})
		for _, f := range apart {
			got := judgeAll(snap(agentView(k, "node-a")), []snapshot.Flow{f}, func(s *snapshot.Snapshot, addrs []netip.Addr) {
				resolveFrom(s, k, addrs)
			})
			if want := "stale-nat-flow warning " + f.String() + " to " + f.Reply.Src.String(); got != want {
				t.Fatalf("seed %d: a flow to another node's address listed for a pod that is gone: %q, want %q", seed, got, want)
			}
		}
		for _, line := range strings.Split(full, "\n") {
			compared[strings.Join(strings.Fields(line + " x x")[:2], " ")]++
		}
		if full != partial {
			t.Fatalf("seed %d: with every pod:\n%s\nas the agent sees the cluster:\n%s\ncluster: %+v\nflows: %v", seed, full, partial, k, flows)
		}
	}
	for _, kind := range []string{"stale-nat-flow warning", "misdelivered-flow critical"} {
		if compared[kind] < 1000 {
			t.Errorf("only %d findings %q compared: the random clusters no longer exercise the rules", compared[kind], kind)
		}
	}
	t.Logf("findings compared: %v", compared)
}

// A flow to a current endpoint that cannot be older than its pod needs no
// lookup: the agent asks the API server only about suspect backends.
func TestPartialPodsLookUpOnlySuspects(t *testing.T) {
	pa := pod("ns", "a", "uid-a", "10.244.1.5", t0)
	pa.Node = "node-b"
	k := snapshot.Kube{
		Nodes:     []snapshot.Node{node("node-a", "192.168.1.10")},
		Services:  []snapshot.Service{svc("ns", "web", "10.96.0.10", tcp, 80, 0)},
		Pods:      []snapshot.Pod{pa},
		Endpoints: []snapshot.Endpoint{since(podUID(ep("ns", "web", "s1", "10.244.1.5", true, false), pa), t0.Add(time.Minute))},
	}
	live := seen(flow(tcp, "10.244.9.1:40000", "10.96.0.10:80", "10.244.1.5:8080"), t0.Add(2*time.Minute))
	older := seen(flow(tcp, "10.244.9.1:40001", "10.96.0.10:80", "10.244.1.5:8080"), t0.Add(-time.Hour))
	gone := seen(flow(tcp, "10.244.9.1:40002", "10.96.0.10:80", "10.244.1.99:8080"), t0.Add(2*time.Minute))
	for _, c := range []struct {
		name string
		f    snapshot.Flow
		want []netip.Addr
	}{
		{"a flow opened after its endpoint was listed", live, nil},
		{"a flow older than the endpoint's pod may be", older, ips("10.244.1.5")},
		{"a flow to an address no slice lists", gone, ips("10.244.1.99")},
	} {
		var asked []netip.Addr
		judgeAll(snap(agentView(k, "node-a")), []snapshot.Flow{c.f}, func(s *snapshot.Snapshot, addrs []netip.Addr) {
			asked = append(asked, addrs...)
			resolveFrom(s, k, addrs)
		})
		if !slices.Equal(asked, c.want) {
			t.Errorf("%s: looked up %v, want %v", c.name, asked, c.want)
		}
	}
}

// lagging reports whether f's Service lists f's backend for a pod that
// does not hold it, while another pod does.
func lagging(k snapshot.Kube, f snapshot.Flow) bool {
	b := f.Reply.Src.Unmap()
	fe, ok := NewFrontends(&k, "node-a", nil).Lookup(f.Proto, f.Orig.Dst, f.Orig.DstPort)
	if !ok || fe.Service == nil {
		return false
	}
	held := func(uid string) bool {
		for _, p := range k.Pods {
			if p.HasIP(b) && !p.Terminal() && (uid == "" || p.UID == uid) {
				return true
			}
		}
		return false
	}
	for _, e := range k.Endpoints {
		if e.Service == fe.Service.Ref() && e.Address == b && e.PodUID != "" && !held(e.PodUID) && held("") {
			return true
		}
	}
	return false
}

// duplicated reports whether two pods that have not finished hold a.
func duplicated(k snapshot.Kube, a netip.Addr) bool {
	n := 0
	for _, p := range k.Pods {
		if p.HasIP(a.Unmap()) && !p.Terminal() {
			n++
		}
	}
	return n > 1
}

// otherNodeListedDead reports the case TestPartialPodsJudgeAsEveryPod
// judges apart: f's backend is the address of a node other than node-a,
// the Service f addresses lists it not serving for a pod, and no pod holds
// it.
func otherNodeListedDead(k snapshot.Kube, f snapshot.Flow) bool {
	b := f.Reply.Src.Unmap()
	other := false
	for _, n := range k.Nodes {
		other = other || (n.Name != "node-a" && slices.Contains(n.Addresses, b))
	}
	if !other {
		return false
	}
	for _, p := range k.Pods {
		if p.HasIP(b) && !p.Terminal() {
			return false
		}
	}
	fe, ok := NewFrontends(&k, "node-a", nil).Lookup(f.Proto, f.Orig.Dst, f.Orig.DstPort)
	if !ok || fe.Service == nil {
		return false
	}
	for _, e := range k.Endpoints {
		if e.Service == fe.Service.Ref() && e.Address == b && e.Pod != nil && !e.Serving {
			return true
		}
	}
	return false
}

func podUID(e snapshot.Endpoint, p snapshot.Pod) snapshot.Endpoint {
	e.Pod, e.PodUID = &snapshot.ObjectRef{Namespace: p.Namespace, Name: p.Name}, p.UID
	return e
}

func since(e snapshot.Endpoint, at time.Time) snapshot.Endpoint { e.Since = at; return e }

// listPods makes the random endpoints what a slice lists: the endpoint at
// an address a pod holds names that pod (most of the time; a slice may lag
// a reuse and name the one before), and each is dated from no earlier than
// its pod's start.
func listPods(rng *rand.Rand, k *snapshot.Kube) {
	for i := range k.Endpoints {
		e := &k.Endpoints[i]
		var holders []snapshot.Pod
		for _, p := range k.Pods {
			if p.HasIP(e.Address) && !p.HostNetwork && !p.Terminal() {
				holders = append(holders, p)
			}
		}
		at := t0.Add(randomOffset(rng))
		if len(holders) > 0 && rng.IntN(4) != 0 {
			p := holders[rng.IntN(len(holders))]
			*e = podUID(*e, p)
			if at.Before(p.Since()) {
				at = p.Since().Add(time.Duration(rng.IntN(3)) * time.Minute)
			}
		} else {
			if rng.IntN(3) == 0 {
				e.Pod, e.PodUID = &snapshot.ObjectRef{Namespace: "ns", Name: "gone"}, fmt.Sprintf("uid-gone-%d", i)
			}
			// A slice entry that names no pod (a selectorless Service's)
			// is judged as the slice's while listed: a pod that took its
			// address since it was first seen listed is not looked for.
			// The agent sees an entry no earlier than the pods there.
			for _, p := range holders {
				if at.Before(p.Since()) {
					at = p.Since()
				}
			}
		}
		e.Since = at
	}
}

// agentView is k as a node agent's informers hold it: its node's pods and
// Node only.
func agentView(k snapshot.Kube, nodeName string) snapshot.Kube {
	v := k
	v.Pods, v.Nodes = nil, nil
	for _, p := range k.Pods {
		if p.Node == nodeName {
			v.Pods = append(v.Pods, p)
		}
	}
	for _, n := range k.Nodes {
		if n.Name == nodeName {
			v.Nodes = append(v.Nodes, n)
		}
	}
	v.PodsPartial, v.PodNode = true, nodeName
	return v
}

// resolveFrom completes s's partial cluster objects with the pods of
// every that hold each of addrs, as the API server selects them (status.podIP:
// a pod's first address).
func resolveFrom(s *snapshot.Snapshot, every snapshot.Kube, addrs []netip.Addr) {
	k := *s.Kube
	k.Pods = slices.Clone(k.Pods)
	k.Looked = map[netip.Addr]bool{}
	for a := range s.Kube.Looked {
		k.Looked[a] = true
	}
	for _, a := range addrs {
		k.Looked[a] = true
		for _, p := range every.Pods {
			if len(p.IPs) > 0 && p.IPs[0] == a && !slices.ContainsFunc(k.Pods, func(q snapshot.Pod) bool { return q.UID == p.UID }) {
				k.Pods = append(k.Pods, p)
			}
		}
	}
	sort.SliceStable(k.Pods, func(i, j int) bool {
		a, b := k.Pods[i].Ref(), k.Pods[j].Ref()
		return a.Namespace < b.Namespace || a.Namespace == b.Namespace && a.Name < b.Name
	})
	s.Kube = &k
}

// judgeAll runs the conntrack rules on flows as a pass does: the flows
// their filter keeps, then, when resolve is set, the holders they ask
// about, then Evaluate. It returns the findings, one line each, sorted.
func judgeAll(s *snapshot.Snapshot, flows []snapshot.Flow, resolve func(*snapshot.Snapshot, []netip.Addr)) string {
	rules := All(Config{})
	var readers []Rule
	for _, r := range rules {
		if _, ok := r.(snapshot.FlowReader); ok {
			readers = append(readers, r)
		}
	}
	var kept []snapshot.Flow
	for i := range flows {
		for _, r := range readers {
			if r.(snapshot.FlowReader).FlowFilter(s).Keep(&flows[i]) {
				kept = append(kept, flows[i])
				break
			}
		}
	}
	s.Conntrack = snapshot.NewConntrack(len(flows), kept...)
	if resolve != nil {
		var addrs []netip.Addr
		for _, r := range readers {
			if hr, ok := r.(snapshot.HolderReader); ok {
				for _, a := range hr.HolderAddrs(s) {
					if !slices.Contains(addrs, a) {
						addrs = append(addrs, a)
					}
				}
			}
		}
		if len(addrs) > 0 {
			resolve(s, addrs)
		}
	}
	var lines []string
	for _, r := range readers {
		for _, f := range r.Evaluate(s) {
			lines = append(lines, fmt.Sprintf("%s %s %s to %s", f.Rule, f.Severity, f.Subject.Flow, f.Subject.IP))
		}
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}
