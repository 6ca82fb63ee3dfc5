package rule

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"runtime"
	"strings"
	"testing"

	"github.com/ghostwatch/ghostwatch/finding"
	"github.com/ghostwatch/ghostwatch/snapshot"
)

// deadBackend is ghost backend k of the crowd tests: 10.200.0.0 plus k.
func deadBackend(k int) netip.Addr {
	return netip.AddrFrom4([4]byte{10, byte(200 + k>>16), byte(k >> 8), byte(k)})
}

// deadTable keeps per flows to each of backends ghost backends through
// frontend, in dump order (a backend's flows are not listed together).
func deadTable(backends, per int, frontend string) *snapshot.Conntrack {
	c := &snapshot.Conntrack{}
	for i := range backends * per {
		k := i % backends
		f := flow(tcp, fmt.Sprintf("10.%d.%d.%d:%d", 100+i>>16, i>>8&255, i&255, 1024+i%60000), frontend, deadBackend(k).String()+":5432")
		f.ID = uint32(i + 1)
		c.Keep(&f)
	}
	c.Fit()
	c.Seen = c.Len()
	return c
}

// Past OneByOne ghost backends judged alike, the stale flows of a node
// whose workloads all died are one finding: it counts them, names the
// first, lists every flow, and is no target a remedy acts on. Fewer are a
// finding each, and so is every backend of another Service.
func TestManyGhostBackendsAreOneFinding(t *testing.T) {
	const many, per = 250, 3
	s := snap(base())
	s.Conntrack = deadTable(many, per, "10.96.100.50:5432")
	for i := range 5 {
		f := flow(tcp, fmt.Sprintf("10.244.1.50:%d", 40000+i), "10.96.0.80:80", fmt.Sprintf("10.244.9.%d:8080", i))
		s.Conntrack.Keep(&f)
	}
	fs := NewStaleNATFlow(ConntrackConfig{}).Evaluate(s)
	var crowds []finding.Finding
	var api int
	for _, f := range fs {
		switch {
		case f.Target.Kind() == finding.CrowdKind:
			crowds = append(crowds, f)
		case f.Subject.Service == "web/api":
			api++
		}
	}
	if len(crowds) != 1 || api != 5 || len(fs) != 6 {
		t.Fatalf("%d findings, %d of them crowds, %d of web/api; want 6, 1 and 5:%s", len(fs), len(crowds), api, describe(fs))
	}
	c := crowds[0]
	ct := c.Target.(*finding.CrowdTarget)
	if ct.Size() != many*per || len(ct.Backends()) != many || ct.Backends()[0] != deadBackend(0) || ct.Backends()[many-1] != deadBackend(many-1) {
		t.Errorf("the crowd holds %d flows of %d backends (%v...); want %d of %d", ct.Size(), len(ct.Backends()), ct.Backends()[:2], many*per, many)
	}
	listed := map[netip.Addr]int{}
	for e := range ct.Entries() {
		var entry struct{ Backend netip.AddrPort }
		if b, err := json.Marshal(e); err != nil || json.Unmarshal(b, &entry) != nil {
			t.Fatalf("entry %+v: %v", e, err)
		}
		listed[entry.Backend.Addr()]++
	}
	if len(listed) != many || listed[deadBackend(7)] != per {
		t.Errorf("the crowd lists the flows of %d backends, %d of backend 7; want %d and %d", len(listed), listed[deadBackend(7)], many, per)
	}
	if c.Evidence["ghost_backends"] != many || c.Evidence["flows"] != many*per || len(c.Evidence["backends"].([]string)) != maxBackendsNamed+1 ||
		c.Evidence["client_count"] != many*per || c.Subject.IP != "" || c.Subject.Service != "db/postgres" {
		t.Errorf("the crowd's subject %+v, evidence %v", c.Subject, c.Evidence)
	}
	for _, w := range []string{"750 tcp flows to ClusterIP db/postgres still go to 250 addresses which are no longer backends and which no pod holds (10.200.0.0:5432, 10.200.0.1:5432, 10.200.0.2:5432 and 247 more)",
		"reported together, as more than 100 ghost backends judged alike are: no remedy acts on so many at once"} {
		if !strings.Contains(c.Message, w) {
			t.Errorf("message %q\nwant it to say %q", c.Message, w)
		}
	}
	if d := staleDetail(c); d != "250 backends gone" {
		t.Errorf("detail %q", d)
	}
	// The remedy's budget is what OneByOne gives way to: raised to it,
	// every ghost backend is a finding of its own again.
	fs = NewStaleNATFlow(ConntrackConfig{OneByOne: many}).Evaluate(s)
	if len(fs) != many+5 {
		t.Errorf("OneByOne %d: %d findings, want %d", many, len(fs), many+5)
	}
	for _, f := range fs {
		if f.Target.Kind() != finding.FlowKind {
			t.Errorf("OneByOne %d: a finding of kind %s", many, f.Target.Kind())
		}
	}
}

// What the findings of a node whose workloads all died keep beyond the
// table grows with the table, not with a finding per ghost backend: on
// 2f36acc, 20,000 ghost backends of 10 flows each held 3 KB each.
func TestGhostBackendsCostLittleBeyondTheTable(t *testing.T) {
	if testing.Short() {
		t.Skip("judges 200,000 flows")
	}
	const backends, per = 20000, 10
	k := base()
	for i := range 100 {
		k.Services = append(k.Services, svc(fmt.Sprintf("ns%d", i), "svc", fmt.Sprintf("10.96.1.%d", i), tcp, 80, 0))
	}
	s := snap(k)
	c := &snapshot.Conntrack{}
	for i := range backends * per {
		b := i % backends
		f := flow(tcp, fmt.Sprintf("10.%d.%d.%d:%d", 100+i>>16, i>>8&255, i&255, 1024+i%60000), fmt.Sprintf("10.96.1.%d:80", b%100), deadBackend(b).String()+":8080")
		c.Keep(&f)
	}
	c.Fit()
	s.Conntrack = c
	before := heapInUse()
	fs := NewStaleNATFlow(ConntrackConfig{}).Evaluate(s)
	held := int64(heapInUse()) - int64(before)
	flows := 0
	for _, f := range fs {
		flows += f.Target.Size()
	}
	if flows != backends*per || len(fs) != 100 {
		t.Fatalf("%d findings of %d flows, want 100 of %d", len(fs), flows, backends*per)
	}
	if each := held / backends; each > 200 {
		t.Errorf("the findings of %d ghost backends hold %d bytes each beyond the table, want at most 200", backends, each)
	}
	runtime.KeepAlive(fs)
}
