package rule

import (
	"strings"
	"testing"
	"time"

	"github.com/ghostwatch/ghostwatch/finding"
	"github.com/ghostwatch/ghostwatch/snapshot"
)

func TestMisdeliveredFlow(t *testing.T) {
	const client = "10.244.1.50:45678"
	old := "10.244.3.47"
	reuse := func(ns, name string, since time.Time, backend bool) func(k *snapshot.Kube) {
		return func(k *snapshot.Kube) {
			k.Pods = append(k.Pods, pod(ns, name, "uid-"+name, old, since))
			if backend {
				k.Endpoints = append(k.Endpoints, ep("db", "postgres", "postgres-abc", old, true, false))
			}
		}
	}
	runCases(t, []ruleCase{
		{
			name:  "IP reused by the new replica of the same service: the flow is older than the pod",
			kube:  reuse("db", "postgres-next", t0.Add(time.Minute), true),
			flows: []snapshot.Flow{started(flow(tcp, client, "10.96.100.50:5432", old+":5432"), t0)},
			want:  []want{{MisdeliveredFlowID, old, finding.Critical}},
		},
		{
			name:  "IP reused by a pod of another namespace, flow start unknown: the Service could never have picked it",
			kube:  reuse("payments", "ledger", t0.Add(time.Minute), false),
			flows: []snapshot.Flow{flow(tcp, client, "10.96.100.50:5432", old+":5432")},
			want:  []want{{MisdeliveredFlowID, old, finding.Critical}},
		},
		{
			name:  "blue/green switch: the pod still runs in the Service's namespace but is no longer selected, flow start unknown",
			kube:  reuse("db", "postgres-blue", t0, false),
			flows: []snapshot.Flow{flow(tcp, client, "10.96.100.50:5432", old+":5432")},
		},
		{
			name:  "blue/green switch with a start time after the pod's: the flow was opened to it",
			kube:  reuse("db", "postgres-blue", t0, false),
			flows: []snapshot.Flow{started(flow(tcp, client, "10.96.100.50:5432", old+":5432"), t0.Add(time.Hour))},
		},
		{
			name: "a Service without a selector (hand-made slices) may point anywhere: another namespace proves nothing",
			kube: func(k *snapshot.Kube) {
				k.Services[0].HasSelector = false
				reuse("payments", "ledger", t0.Add(time.Minute), false)(k)
			},
			flows: []snapshot.Flow{flow(tcp, client, "10.96.100.50:5432", old+":5432")},
		},
		{
			name:  "IP reused by another workload, flow older than it",
			kube:  reuse("payments", "ledger", t0.Add(time.Minute), false),
			flows: []snapshot.Flow{started(flow(tcp, client, "10.96.100.50:5432", old+":5432"), t0)},
			want:  []want{{MisdeliveredFlowID, old, finding.Critical}},
		},
		{
			name:  "pod left the service but the flow was opened to it: not a ghost",
			kube:  reuse("db", "postgres-relabelled", t0, false),
			flows: []snapshot.Flow{started(flow(tcp, client, "10.96.100.50:5432", old+":5432"), t0.Add(time.Minute))},
		},
		{
			name:  "holder is a backend and the flow start is unknown: nothing is proven",
			kube:  reuse("db", "postgres-next", t0.Add(time.Minute), true),
			flows: []snapshot.Flow{flow(tcp, client, "10.96.100.50:5432", old+":5432")},
		},
		{
			name:  "IP reused by the new replica, no kernel start time, but the agent saw the flow before the pod existed",
			kube:  reuse("db", "postgres-next", t0.Add(time.Minute), true),
			flows: []snapshot.Flow{seen(flow(tcp, client, "10.96.100.50:5432", old+":5432"), t0)},
			want:  []want{{MisdeliveredFlowID, old, finding.Critical}},
		},
		{
			name:  "blue/green switch: the agent first saw the flow after the pod started",
			kube:  reuse("db", "postgres-blue", t0, false),
			flows: []snapshot.Flow{seen(flow(tcp, client, "10.96.100.50:5432", old+":5432"), t0.Add(time.Hour))},
		},
		{
			name:  "the agent saw the flow within the clock skew of the holder's start: nothing is proven",
			kube:  reuse("db", "postgres-next", t0.Add(time.Second), true),
			flows: []snapshot.Flow{seen(flow(tcp, client, "10.96.100.50:5432", old+":5432"), t0)},
		},
		{
			name: "a kernel start time after the holder's wins over an earlier sighting",
			kube: reuse("db", "postgres-blue", t0, false),
			flows: []snapshot.Flow{func() snapshot.Flow {
				f := started(flow(tcp, client, "10.96.100.50:5432", old+":5432"), t0.Add(time.Minute))
				f.Seen = t0.Add(-time.Hour)
				return f
			}()},
		},
		{
			name:  "within the clock skew nothing is proven",
			kube:  reuse("db", "postgres-next", t0.Add(time.Second), true),
			flows: []snapshot.Flow{started(flow(tcp, client, "10.96.100.50:5432", old+":5432"), t0)},
		},
		{
			name:  "a larger configured skew hides a 30s gap",
			cfg:   ConntrackConfig{ClockSkew: time.Minute},
			kube:  reuse("db", "postgres-next", t0.Add(30*time.Second), true),
			flows: []snapshot.Flow{started(flow(tcp, client, "10.96.100.50:5432", old+":5432"), t0)},
		},
		{
			name: "IP reused by a terminating pod of another workload, flow start unknown: draining, not misdelivered",
			kube: func(k *snapshot.Kube) {
				k.Pods = append(k.Pods, deleting(pod("payments", "ledger", "uid-l", old, t0)))
			},
			flows: []snapshot.Flow{flow(tcp, client, "10.96.100.50:5432", old+":5432")},
		},
		{
			name: "duplicate IP: judged against the newest holder",
			kube: func(k *snapshot.Kube) {
				k.Pods = append(k.Pods, pod("db", "postgres-old", "uid-a", old, t0.Add(-time.Hour)))
				k.Pods = append(k.Pods, pod("payments", "ledger", "uid-b", old, t0.Add(time.Minute)))
				k.Endpoints = append(k.Endpoints, ep("db", "postgres", "postgres-abc", old, true, false))
			},
			flows: []snapshot.Flow{started(flow(tcp, client, "10.96.100.50:5432", old+":5432"), t0)},
			want:  []want{{MisdeliveredFlowID, old, finding.Critical}},
		},
		{
			name: "hostNetwork holders are never misdelivered",
			kube: func(k *snapshot.Kube) {
				k.Pods = append(k.Pods, hostNet(pod("kube-system", "agent", "uid-h", "192.168.1.11", t0.Add(time.Hour))))
				k.Endpoints = append(k.Endpoints, ep("web", "api", "api-xyz", "192.168.1.11", true, false))
			},
			flows: []snapshot.Flow{started(flow(tcp, client, "10.96.0.80:80", "192.168.1.11:8080"), t0)},
		},
	})
}

func TestMisdeliveredFlowNamesHolder(t *testing.T) {
	k := base()
	k.Pods = append(k.Pods, pod("payments", "ledger", "uid-ledger", "10.244.3.47", t0.Add(time.Minute)))
	f := started(flow(tcp, "10.244.1.50:45678", "10.96.100.50:5432", "10.244.3.47:5432"), t0)
	got := NewMisdeliveredFlow(ConntrackConfig{}).Evaluate(snap(k, f))
	if len(got) != 1 {
		t.Fatalf("got %d findings, want 1", len(got))
	}
	g := got[0]
	if g.Subject.Pod != "payments/ledger" || g.Evidence["holder_uid"] != "uid-ledger" ||
		g.Evidence["proof"] != "flow started before the holder existed" || g.Evidence["holder_is_backend"] != false {
		t.Errorf("finding = %+v", g)
	}
}

func TestMisdeliveredFlowProvenByTheAgentsSighting(t *testing.T) {
	k := base()
	k.Pods = append(k.Pods, pod("db", "postgres-next", "uid-next", "10.244.3.47", t0.Add(time.Minute)))
	f := seen(flow(tcp, "10.244.1.50:45678", "10.96.100.50:5432", "10.244.3.47:5432"), t0)
	got := NewMisdeliveredFlow(ConntrackConfig{}).Evaluate(snap(k, f))
	if len(got) != 1 {
		t.Fatalf("got %d findings, want 1", len(got))
	}
	g := got[0]
	if g.Evidence["proof"] != "agent saw the flow before the holder existed" ||
		g.Evidence["flow_seen"] != t0.UTC().Format(time.RFC3339) || g.Evidence["holder_uid"] != "uid-next" {
		t.Errorf("evidence = %v", g.Evidence)
	}
	if !strings.Contains(g.Message, "the agent saw the flow at") {
		t.Errorf("message = %q", g.Message)
	}
}

// seen sets the time the agent first saw f (no kernel start time).
func seen(f snapshot.Flow, at time.Time) snapshot.Flow {
	f.Seen = at
	return f
}
