package lab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/ghostwatch/ghostwatch/finding"
	"github.com/ghostwatch/ghostwatch/internal/testenv"
	"github.com/ghostwatch/ghostwatch/lab/calico"
	"github.com/ghostwatch/ghostwatch/lab/controlplane"
	"github.com/ghostwatch/ghostwatch/rule"
)

// The calico-misbook lab, as `ghostwatch-lab calico-misbook` runs it, on
// the real API server and Calico's own binaries: ghostwatch finds both
// misbookings before the collector frees anything, with a window the
// collector's free falls in; left alone, the next pod on the stale name's
// node gets the running pod's address; fixed as ghostwatch says, nothing is
// freed and the next pod there gets an address no running pod holds.
func TestCalicoMisbookScenario(t *testing.T) {
	for _, find := range []func() (string, error){controlplane.FindBinaries, calico.FindBinaries} {
		_, err := find()
		if errors.Is(err, controlplane.ErrNoBinaries) || errors.Is(err, calico.ErrNoBinaries) {
			testenv.Unavailable(t, err.Error())
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	// Built before the lab starts: the inspection below runs while the
	// collector's grace period runs, and a build there (tens of seconds on
	// a busy machine, with a cold cache) outlasts it.
	ghostwatchBinary(t)
	var out strings.Builder
	const grace = 10 * time.Second
	start := time.Now()
	// While the misbookings stand, ghostwatch ip shows each address's
	// booking and says what is wrong with it (no controller or agent runs
	// in this lab: they are named as not answering).
	var records []string
	var live, analyzed []string
	inspect := func(ctx context.Context, kubeconfig string, misbooked []netip.Addr, roots map[string]string) error {
		// On node-a, at this moment: a live scan of the cluster's and the
		// node's ledgers, and collect, then analyze of its bundle, find
		// the same.
		rules := "--rule=ipam-misbooked,ipam-unbooked-ip,ipam-leaked-ip,ipam-ledger-corrupt,stale-nodename-file,duplicate-pod-ip"
		var err error
		if live, analyzed, err = scanAndBundle(ctx, t, kubeconfig, "node-a", roots["node-a"], rules); err != nil {
			return err
		}
		for _, ip := range misbooked {
			out, _ := exec.CommandContext(ctx, ghostwatchBinary(t), "ip", ip.String(), "--kubeconfig="+kubeconfig, "-o", "json",
				"--history-url=http://127.0.0.1:1", "--flows-url=http://127.0.0.1:1").Output()
			var rep struct {
				Tenures []struct{ Pod, Node string }
				IPAM    struct{ BookedNode, BookedPod, Verdict string }
			}
			if err := json.Unmarshal(out, &rep); err != nil {
				return fmt.Errorf("ghostwatch ip %s -o json: %w: %s", ip, err, out)
			}
			records = append(records, fmt.Sprintf("%s %d pod(s): booked under %s: %s", ip, len(rep.Tenures), rep.IPAM.BookedNode, rep.IPAM.Verdict))
		}
		return nil
	}
	res, err := CalicoMisbook(context.Background(), CalicoMisbookOptions{Out: &out, LeakGracePeriod: grace, Inspect: inspect})
	t.Logf("%s in %s:\n%s", "lab calico-misbook", time.Since(start).Round(100*time.Millisecond), out.String())
	if err != nil {
		t.Fatal(err)
	}
	if res.LeakGracePeriod != "10s" || len(res.Endings) != 2 {
		t.Fatalf("result %+v", res)
	}
	alone, fixed := res.Endings[0], res.Endings[1]
	t.Logf("node-a, live scan and analyze of its bundle: %q", live)
	if len(live) == 0 || fmt.Sprint(live) != fmt.Sprint(analyzed) {
		t.Errorf("findings differ:\n live    %q\n analyze %q", live, analyzed)
	}
	if len(records) != 2 {
		t.Errorf("ghostwatch ip was asked of %d addresses, want 2", len(records))
	}
	for _, r := range records {
		if !strings.Contains(r, " 1 pod(s): booked under node-") || !strings.HasSuffix(r, "while the pod runs (ipam-misbooked)") {
			t.Errorf("ghostwatch ip: %s; want the pod, its booking under the other node, and ipam-misbooked", r)
		}
		t.Logf("ghostwatch ip %s", r)
	}

	// Before anything is fixed or freed: the stale files, and both
	// misbookings, critical, each with a window.
	var got []string
	for _, f := range res.Findings {
		got = append(got, f.Severity.String()+" "+f.Rule+" "+f.Subject.Node+" "+f.Subject.IP)
		if f.Rule == rule.IPAMMisbookedID && (f.Evidence["freed_from"] == nil || f.Evidence["freed_by"] == nil) {
			t.Errorf("%s: no window: %v", f.Subject.IP, f.Evidence)
		}
	}
	if want := []string{
		"critical stale-nodename-file node-a ", "critical stale-nodename-file node-c ",
		"critical ipam-misbooked node-a 10.244.0.7", "critical ipam-misbooked node-c 10.244.0.15",
	}; strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("findings before the fix and the collector:\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}

	// Left alone: booked under node-b, freed inside the window, then the
	// next pod on node-b gets it.
	if alone.Fixed || alone.Node != "node-a" || alone.BookedAs != "node-b" || alone.Pod != "default/csi-node-driver-a" || alone.PodIP != "10.244.0.7" {
		t.Errorf("left alone: %+v", alone)
	}
	if alone.PredictedFreedFrom == nil || alone.PredictedFreedBy == nil || alone.FreedAt == nil {
		t.Fatalf("left alone: window %v to %v, freed at %v", alone.PredictedFreedFrom, alone.PredictedFreedBy, alone.FreedAt)
	}
	// The collector never frees before the window ghostwatch gave opens:
	// that is what the warning rests on. That it freed before the window
	// closed (a scan interval on an idle machine) is logged, not held to:
	// a busy machine delays the collector's scans.
	from, by, freed := *alone.PredictedFreedFrom, *alone.PredictedFreedBy, *alone.FreedAt
	t.Logf("left alone: freed at +%.1fs, window +%.1fs to +%.1fs (in window: %v)", freed, from, by, alone.FreedInWindow)
	if freed < from || math.Abs(by-from-grace.Seconds()) > 0.001 {
		t.Errorf("left alone: freed at +%.1fs, window +%.1fs to +%.1fs: freed before the window opened, or a window not of the grace period (%s)", freed, from, by, grace)
	}
	if alone.NextPod != "default/web-b-3" || alone.NextPodIP != alone.PodIP || alone.DuplicateOf != alone.Pod {
		t.Errorf("left alone: the next pod %s got %s (duplicate of %q), want %s's %s", alone.NextPod, alone.NextPodIP, alone.DuplicateOf, alone.Pod, alone.PodIP)
	}
	if n := findingsOn(alone.Findings, rule.DuplicatePodIPID, alone.PodIP); n != 1 {
		t.Errorf("left alone: %d duplicate-pod-ip findings on %s, want 1: %+v", n, alone.PodIP, alone.Findings)
	}

	// Fixed before the window opened: nothing freed, no duplicate.
	if !fixed.Fixed || fixed.Node != "node-c" || fixed.BookedAs != "node-d" || fixed.PodIP != "10.244.0.15" ||
		fixed.RecreatedPodIP != "10.244.0.8" || fixed.FixedAt == nil || fixed.PredictedFreedFrom == nil || *fixed.FixedAt >= *fixed.PredictedFreedFrom {
		t.Errorf("fixed: %+v", fixed)
	}
	if fixed.FreedAt != nil || fixed.FreedInWindow || fixed.DuplicateOf != "" || fixed.NextPod != "default/web-d-3" || fixed.NextPodIP != "10.244.0.15" {
		t.Errorf("fixed: freed at %v, the next pod %s got %s (duplicate of %q)", fixed.FreedAt, fixed.NextPod, fixed.NextPodIP, fixed.DuplicateOf)
	}
	if len(fixed.Findings) != 0 {
		t.Errorf("fixed: findings %+v", fixed.Findings)
	}

	// The timeline says it in that order, in Calico's own words.
	tl := out.String()
	inOrder(t, tl,
		`calico-ipam: node-a's CNI log: Auto assigning IP Workload="node--b-k8s-csi--node--driver--a-eth0" Attrs node:"node-b" Hostname:"node-b"`,
		"ghostwatch: critical ipam-misbooked: pod default/csi-node-driver-a runs on node node-a and holds 10.244.0.7, but Calico booked it under node node-b",
		"operator: node-c: /var/lib/calico/nodename now says \"node-c\"",
		"kube-controllers: Garbage collecting leaked IP address ip=10.244.0.7",
		"ghostwatch: critical ipam-unbooked-ip: pod default/csi-node-driver-a on node node-a holds 10.244.0.7",
		"kubelet:  node-b: pod default/web-b-3: calico-ipam ADD -> 10.244.0.7, which pod default/csi-node-driver-a still holds on node-a",
		"ghostwatch: critical duplicate-pod-ip: IP 10.244.0.7 is held by 2 pods",
		"ledger:   10.244.0.8 still booked for default/csi-node-driver-c-2 under node-c",
		"kubelet:  node-d: pod default/web-d-3: calico-ipam ADD -> 10.244.0.15, which default/csi-node-driver-c had until it was deleted",
		"ghostwatch: fixed: nothing about the pods of node-c and node-d",
	)
	// The collector's own judgements, whenever its scans made them.
	inOrder(t, tl,
		"kube-controllers: Pod rescheduled on new node. Allocation no longer valid ip=10.244.0.7 pod=default/csi-node-driver-a node=node-b old=node-b new=node-a",
		"kube-controllers: Candidate IP leak ip=10.244.0.7",
		"kube-controllers: Confirmed IP leak after",
		"kube-controllers: Garbage collecting leaked IP address ip=10.244.0.7",
	)
	inOrder(t, tl,
		"kube-controllers: Candidate IP leak ip=10.244.0.15",
		"operator: node-c: /var/lib/calico/nodename now says \"node-c\"",
	)
	for _, never := range []string{"Confirmed IP leak after", "Garbage collecting leaked IP address"} {
		if strings.Contains(tl, never+" ip=10.244.0.15") || strings.Contains(tl, never+" ip=10.244.0.8") {
			t.Errorf("the collector took node-c's pods for leaks:\n%s", tl)
		}
	}
	// Every process stopped, every file removed.
	m := regexp.MustCompile(`lab: +stopped every process it started; removed (\S+)\n$`).FindStringSubmatch(tl)
	if m == nil {
		t.Fatalf("the timeline does not end with the cleanup:\n%s", tl)
	}
	if _, err := os.Stat(m[1]); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s left behind: %v", m[1], err)
	}
}

// findingsOn is how many findings of rule are about ip.
func findingsOn(fs []finding.Finding, rule, ip string) int {
	n := 0
	for _, f := range fs {
		if f.Rule == rule && f.Subject.IP == ip {
			n++
		}
	}
	return n
}

// inOrder fails unless text holds each of lines, in that order.
func inOrder(t *testing.T, text string, lines ...string) {
	t.Helper()
	rest := text
	for j, l := range lines {
		i := strings.Index(rest, l)
		if i < 0 {
			if strings.Contains(text, l) {
				t.Errorf("the timeline has %q, but not after %q", l, lines[j-1])
			} else {
				t.Errorf("the timeline lacks %q", l)
			}
			continue
		}
		rest = rest[i+len(l):]
	}
}
