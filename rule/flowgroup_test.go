package rule

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/ghostwatch/ghostwatch/finding"
	"github.com/ghostwatch/ghostwatch/snapshot"
)

// The stale flows of one ghost backend, judged alike, are one finding that
// holds every one of them: counted, by state, with its first clients and
// a sample. What is judged otherwise (a flow closing anyway; another
// backend) is another finding.
func TestStaleFlowsOfOneBackendAreOneFinding(t *testing.T) {
	var flows []snapshot.Flow
	for i := range 5 {
		f := flow(tcp, fmt.Sprintf("10.244.1.%d:%d", 50+i%4, 40000+i), "10.96.100.50:5432", "10.244.3.47:5432")
		f.ID = uint32(i + 1)
		flows = append(flows, f)
	}
	closing := state(flow(tcp, "10.244.1.50:41000", "10.96.100.50:5432", "10.244.3.47:5432"), "TIME_WAIT")
	other := flow(tcp, "10.244.1.50:42000", "10.96.100.50:5432", "10.244.3.46:5432")
	fs := NewStaleNATFlow(ConntrackConfig{}).Evaluate(snap(base(), append(flows, closing, other)...))
	if len(fs) != 3 {
		t.Fatalf("%d findings, want 3:%s", len(fs), describe(fs))
	}
	g := fs[0]
	ft := g.Target.(*finding.FlowTarget)
	if ft.Size() != 5 || g.Subject.Flow != "5 flows (tcp)" || g.Severity != finding.Warning || g.Remove != "" {
		t.Errorf("the backend's finding: size %d, subject %q, severity %s, remove %q", ft.Size(), g.Subject.Flow, g.Severity, g.Remove)
	}
	if !strings.HasPrefix(g.Message, "5 tcp flows to ClusterIP db/postgres still go to 10.244.3.47:5432") {
		t.Errorf("message %q", g.Message)
	}
	if g.Evidence["flows"] != 5 || g.Evidence["client_count"] != 4 || g.Evidence["sample_flow"] != flows[0].String() ||
		fmt.Sprint(g.Evidence["clients"]) != "[10.244.1.50 10.244.1.51 10.244.1.52]" ||
		fmt.Sprint(g.Evidence["flows_by_state"]) != "map[tcp ESTABLISHED:5]" {
		t.Errorf("evidence %v", g.Evidence)
	}
	i := 0
	for f := range ft.Flows.All() {
		if *f != flows[i] {
			t.Errorf("flow %d of the finding: %v, want %v", i, f, flows[i])
		}
		i++
	}
	if fs[1].Severity != finding.Info || fs[1].Target.Size() != 1 || fs[1].Remove != closing.DeleteCommand() {
		t.Errorf("the closing flow's finding: %+v", fs[1])
	}
	if fs[2].Subject.IP != "10.244.3.46" || fs[2].Target.Size() != 1 {
		t.Errorf("the other backend's finding: %+v", fs[2])
	}
	// The grace period of a finding runs across passes: the next pass's
	// finding of the same flows has the same key.
	again := NewStaleNATFlow(ConntrackConfig{}).Evaluate(snap(base(), append(flows, closing, other)...))
	if again[0].Target.Key() != g.Target.Key() || again[0].Target.Key() == fs[1].Target.Key() {
		t.Errorf("keys %v, %v, %v", g.Target.Key(), again[0].Target.Key(), fs[1].Target.Key())
	}
}

// A million stale flows to one dead backend are one finding, and cost
// nothing beyond the table that holds them: the finding names them where
// the table keeps them.
func TestAMillionStaleFlowsAreOneFinding(t *testing.T) {
	if testing.Short() {
		t.Skip("judges a million flows")
	}
	const n = 1000000
	ct := &snapshot.Conntrack{Seen: n}
	f := flow(tcp, "10.244.1.50:1", "10.96.100.50:5432", "10.244.3.47:5432")
	for i := range n {
		f.Orig.Src = ip(fmt.Sprintf("10.%d.%d.%d", 100+i>>16, i>>8&255, i&255))
		f.Reply.Dst, f.ID = f.Orig.Src, uint32(i+1)
		ct.Keep(&f)
	}
	s := snap(base())
	s.Conntrack = ct
	before := heapInUse()
	fs := NewStaleNATFlow(ConntrackConfig{}).Evaluate(s)
	held := int64(heapInUse()) - int64(before)
	if len(fs) != 1 || fs[0].Target.Size() != n {
		t.Fatalf("%d findings", len(fs))
	}
	if held > 1<<20 {
		t.Errorf("the findings of a million flows hold %d bytes beyond the table, want under 1 MiB", held)
	}
	runtime.KeepAlive(fs)
}

func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}
