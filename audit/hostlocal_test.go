package audit

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ghostwatch/ghostwatch/rule"
	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source"
	"github.com/ghostwatch/ghostwatch/source/hostlocal"
)

// A store host-local cannot be read from is not judged: a named pipe in
// place of a running pod's reservation leaves ipam-unbooked-ip out of the
// audit, with the file named, where it was skipped and the pod's address
// read as free (a false ipam-unbooked-ip). A store whose file is truly
// missing is judged, as the control.
func TestUnreadableReservationIsNotJudged(t *testing.T) {
	const kindnet = `{"name":"kindnet","plugins":[{"type":"ptp","ipam":{"type":"host-local","ranges":[[{"subnet":"10.244.2.0/24"}]]}}]}`
	start := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	kube := &fakeSource{name: "kube", fill: func(s *snapshot.Snapshot) {
		s.Kube = &snapshot.Kube{
			Nodes: []snapshot.Node{{Name: "worker-3", PodCIDRs: []netip.Prefix{netip.MustParsePrefix("10.244.2.0/24")}}},
			Pods: []snapshot.Pod{{UID: "u1", Namespace: "default", Name: "web-0", Node: "worker-3", Phase: snapshot.PodRunning,
				IPs: []netip.Addr{netip.MustParseAddr("10.244.2.2")}, Created: start, StartTime: start}},
		}
	}}
	root := func(t *testing.T, fifo bool) string {
		r := t.TempDir()
		for p, content := range map[string]string{"etc/cni/net.d/10-kindnet.conflist": kindnet, "var/lib/cni/networks/kindnet/lock": ""} {
			os.MkdirAll(filepath.Dir(filepath.Join(r, p)), 0o755)
			if err := os.WriteFile(filepath.Join(r, p), []byte(content), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		if fifo {
			if err := syscall.Mkfifo(filepath.Join(r, "var/lib/cni/networks/kindnet/10.244.2.2"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		return r
	}
	run := func(r string) *Result {
		return Run(context.Background(), Config{NodeName: "worker-3", Sources: []source.Source{kube, &hostlocal.Source{Root: r}},
			Rules: []rule.Rule{&rule.IPAMUnbookedIP{}}, Now: func() time.Time { return start.Add(time.Hour) }})
	}

	if res := run(root(t, false)); len(res.Findings) != 1 || res.Findings[0].Rule != rule.IPAMUnbookedIPID {
		t.Fatalf("a reservation truly missing: findings %+v, skipped %+v; want ipam-unbooked-ip", res.Findings, res.Skipped)
	}
	res := run(root(t, true))
	if len(res.Findings) != 0 {
		t.Errorf("a named pipe in place of the reservation: findings %+v; want none", res.Findings)
	}
	if len(res.Skipped) != 1 || res.Skipped[0].Rule != rule.IPAMUnbookedIPID ||
		!strings.Contains(res.Skipped[0].Reason, "reservation /var/lib/cni/networks/kindnet/10.244.2.2 is a named pipe") {
		t.Errorf("skipped %+v; want ipam-unbooked-ip not judged, the pipe named", res.Skipped)
	}
}
