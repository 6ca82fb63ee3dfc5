package rule

import (
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/ghostwatch/ghostwatch/snapshot"
)

// The conntrack rules promise (snapshot.BackendLocal) that their verdict on
// a flow depends only on the Services, the Nodes, and the objects that
// mention the flow's backend address. The agent relies on it to judge, after
// a change, only the flows whose backend the change mentions. This test
// holds the rules' own judgement to the promise: it changes one object of a
// random cluster at a time, and every flow whose verdict changed must have a
// backend the change mentions, or the change must be to a Service or Node.
func TestConntrackRulesAreBackendLocal(t *testing.T) {
	for _, r := range All(Config{}) {
		if _, ok := r.(snapshot.FlowReader); ok {
			if _, ok := r.(snapshot.BackendLocal); !ok {
				t.Errorf("%s reads flows but does not promise backend-local verdicts", r.Info().ID)
			}
		}
	}
	for seed := uint64(0); seed < 3000; seed++ {
		rng := rand.New(rand.NewPCG(seed, 7))
		k := randomCluster(rng)
		flows := randomFlows(rng, k)
		k2, mentioned, frontends, what := mutate(rng, k)
		before := verdicts(k, flows)
		after := verdicts(k2, flows)
		for i := range flows {
			if before[i] == after[i] || frontends {
				continue
			}
			if !mentioned[flows[i].Reply.Src.Unmap()] {
				t.Fatalf("seed %d: %s changed the verdict on %s (backend %s) from %q to %q, but does not mention the backend",
					seed, what, flows[i].String(), flows[i].Backend(), before[i], after[i])
			}
		}
	}
}

// verdicts returns, for each flow, what the conntrack rules make of it: kept
// by the filter or not, and the findings of each rule with their severity.
func verdicts(k snapshot.Kube, flows []snapshot.Flow) []string {
	out := make([]string, len(flows))
	rules := All(Config{})
	for i := range flows {
		s := snap(k, flows[i])
		v := ""
		for _, r := range rules {
			fr, ok := r.(snapshot.FlowReader)
			if !ok {
				continue
			}
			v += fmt.Sprintf("%s keep=%t", r.Info().ID, fr.FlowFilter(s).Keep(&flows[i]))
			for _, f := range r.Evaluate(s) {
				v += " " + f.Severity.String()
			}
			v += "; "
		}
		out[i] = v
	}
	return out
}

var (
	poolIPs  = []string{"10.244.0.1", "10.244.0.2", "10.244.0.3", "10.244.0.4", "10.244.0.5", "10.244.0.6"}
	nodeIPs  = []string{"192.168.1.10", "192.168.1.11"}
	svcNames = []string{"a", "b", "c"}
)

func pick[T any](rng *rand.Rand, s []T) T { return s[rng.IntN(len(s))] }

func randomPod(rng *rand.Rand, n int) snapshot.Pod {
	p := pod(pick(rng, []string{"ns", "other"}), fmt.Sprintf("p%d", n), fmt.Sprintf("uid-%d-%d", n, rng.IntN(1000)),
		pick(rng, poolIPs), t0.Add(randomOffset(rng)))
	switch rng.IntN(6) {
	case 0:
		p = deleting(p)
	case 1:
		p = phase(p, snapshot.PodSucceeded)
	case 2:
		p.HostNetwork, p.IPs = true, ips(pick(rng, nodeIPs))
	}
	return p
}

func randomEndpoint(rng *rand.Rand) snapshot.Endpoint {
	addr := pick(rng, poolIPs)
	if rng.IntN(5) == 0 {
		addr = pick(rng, nodeIPs)
	}
	return ep("ns", pick(rng, svcNames), fmt.Sprintf("slice-%d", rng.IntN(2)), addr, rng.IntN(3) != 0, rng.IntN(4) == 0)
}

func randomOffset(rng *rand.Rand) time.Duration {
	return time.Duration(rng.IntN(7)-3) * time.Minute
}

func randomCluster(rng *rand.Rand) snapshot.Kube {
	k := snapshot.Kube{Nodes: []snapshot.Node{node("node-a", nodeIPs[0]), node("node-b", nodeIPs[1])}}
	for i, name := range svcNames {
		k.Services = append(k.Services, svc("ns", name, fmt.Sprintf("10.96.0.%d", 10+i), tcp, 80, uint16(30080+i)))
	}
	for i := range 1 + rng.IntN(6) {
		k.Pods = append(k.Pods, randomPod(rng, i))
	}
	for range rng.IntN(6) {
		k.Endpoints = append(k.Endpoints, randomEndpoint(rng))
	}
	return k
}

func randomFlows(rng *rand.Rand, k snapshot.Kube) []snapshot.Flow {
	var out []snapshot.Flow
	for i := range 12 {
		backend := pick(rng, append(append([]string{}, poolIPs...), nodeIPs...))
		var fe string
		switch rng.IntN(3) {
		case 0:
			fe = fmt.Sprintf("10.96.0.%d:80", 10+rng.IntN(len(svcNames)))
		case 1:
			fe = fmt.Sprintf("%s:%d", nodeIPs[0], 30080+rng.IntN(len(svcNames)))
		default:
			fe = fmt.Sprintf("10.96.0.99:%d", 80+rng.IntN(2))
		}
		f := flow(tcp, fmt.Sprintf("10.244.9.%d:%d", 1+rng.IntN(3), 40000+i), fe, backend+":8080")
		if rng.IntN(2) == 0 {
			f = started(f, t0.Add(randomOffset(rng)))
		}
		out = append(out, f)
	}
	return out
}

// mutate changes one object and returns the new cluster, the addresses the
// change mentions (before and after), and whether it changed a Service or
// a Node.
func mutate(rng *rand.Rand, k snapshot.Kube) (snapshot.Kube, map[netip.Addr]bool, bool, string) {
	c := snapshot.Kube{
		Pods:      append([]snapshot.Pod(nil), k.Pods...),
		Services:  append([]snapshot.Service(nil), k.Services...),
		Endpoints: append([]snapshot.Endpoint(nil), k.Endpoints...),
		Nodes:     append([]snapshot.Node(nil), k.Nodes...),
	}
	m := map[netip.Addr]bool{}
	mentionPod := func(p snapshot.Pod) {
		for _, a := range p.IPs {
			m[a.Unmap()] = true
		}
	}
	switch rng.IntN(8) {
	case 0:
		p := randomPod(rng, 100)
		c.Pods = append(c.Pods, p)
		mentionPod(p)
		return c, m, false, "adding a pod"
	case 1:
		if len(c.Pods) > 0 {
			i := rng.IntN(len(c.Pods))
			mentionPod(c.Pods[i])
			c.Pods = append(c.Pods[:i], c.Pods[i+1:]...)
			return c, m, false, "deleting a pod"
		}
	case 2:
		if len(c.Pods) > 0 {
			i := rng.IntN(len(c.Pods))
			mentionPod(c.Pods[i])
			p := randomPod(rng, i)
			p.Namespace, p.Name = c.Pods[i].Namespace, c.Pods[i].Name
			c.Pods[i] = p
			mentionPod(p)
			return c, m, false, "changing a pod"
		}
	case 3:
		e := randomEndpoint(rng)
		c.Endpoints = append(c.Endpoints, e)
		m[e.Address] = true
		return c, m, false, "adding an endpoint"
	case 4:
		if len(c.Endpoints) > 0 {
			i := rng.IntN(len(c.Endpoints))
			m[c.Endpoints[i].Address] = true
			c.Endpoints = append(c.Endpoints[:i], c.Endpoints[i+1:]...)
			return c, m, false, "removing an endpoint"
		}
	case 5:
		if len(c.Endpoints) > 0 {
			i := rng.IntN(len(c.Endpoints))
			m[c.Endpoints[i].Address] = true
			e := randomEndpoint(rng)
			c.Endpoints[i] = e
			m[e.Address] = true
			return c, m, false, "changing an endpoint"
		}
	case 6:
		i := rng.IntN(len(c.Services))
		c.Services[i].Ports = []snapshot.ServicePort{{Protocol: tcp, Port: 80 + uint16(rng.IntN(2)), NodePort: 30080 + uint16(rng.IntN(4))}}
		return c, m, true, "changing a service"
	case 7:
		c.Nodes[0].Addresses = ips(pick(rng, append([]string{"192.168.1.12"}, nodeIPs...)))
		return c, m, true, "changing a node"
	}
	return c, m, false, "nothing"
}
