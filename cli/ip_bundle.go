package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/ghostwatch/ghostwatch/audit"
	"github.com/ghostwatch/ghostwatch/internal/cmdline"
	"github.com/ghostwatch/ghostwatch/sink"
	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source/calico"
	"github.com/ghostwatch/ghostwatch/source/conntrack"
	"github.com/ghostwatch/ghostwatch/source/hostlocal"
	"github.com/ghostwatch/ghostwatch/source/kube"
	"github.com/ghostwatch/ghostwatch/source/kube/history"
)

// fileTable is a conntrack listing as a Table, for FlowsAt.
type fileTable struct {
	path       string
	capturedAt time.Time
}

func (t fileTable) Dump(_ context.Context, fn func(*snapshot.Flow) error) (int, error) {
	f, err := os.Open(t.path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return conntrack.ParseText(f, t.path, t.capturedAt, fn)
}

func (fileTable) Get(*snapshot.Flow) (snapshot.Flow, error) {
	return snapshot.Flow{}, errors.New("a saved listing")
}
func (fileTable) Delete(*snapshot.Flow) error { return errors.New("a saved listing") }

// fromBundle tells the story of ip from a bundle, offline: its address
// history, the pods listed at it, the node's flows, its Calico booking,
// and every rule run on the bundle, as analyze runs them.
func (o *ipOptions) fromBundle(cmd *cobra.Command, streams genericiooptions.IOStreams, ip netip.Addr) error {
	dir, err := os.MkdirTemp("", "ghostwatch-ip-")
	if err != nil {
		return cmdline.WithCode(ExitError, err)
	}
	defer os.RemoveAll(dir)
	m, err := unpackBundle(o.bundle, dir)
	if err != nil {
		return cmdline.WithCode(ExitError, err)
	}
	file := func(name string) string { return filepath.Join(dir, filepath.FromSlash(name)) }
	rep := ipReport{IP: ip, NotRead: ipNotRead, Flows: []nodeFlows{}, Findings: []reportFinding{}, Members: []sink.MemberAt{}, Judged: true}

	// The pods the bundle lists at the address, and its Calico objects.
	var pods []corev1.Pod
	var blocks []snapshot.IPAMBlock
	for _, name := range []string{bundleObjects, bundleCalico} {
		b, err := os.ReadFile(file(name))
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return cmdline.WithCode(ExitError, err)
		}
		var l struct{ Items []map[string]any }
		if err := json.Unmarshal(b, &l); err != nil {
			return cmdline.WithCode(ExitError, fmt.Errorf("%s: %s: %w", o.bundle, name, err))
		}
		for _, it := range l.Items {
			apiVersion, _ := it["apiVersion"].(string)
			kind, _ := it["kind"].(string)
			switch {
			case apiVersion == "v1" && kind == "Pod":
				var p corev1.Pod
				if err := runtime.DefaultUnstructuredConverter.FromUnstructured(it, &p); err == nil && p.Status.PodIP == ip.String() {
					pods = append(pods, p)
				}
			case calico.Is(apiVersion, kind) && kind == calico.KindIPAMBlock:
				blocks = append(blocks, calico.Block(it))
			}
		}
	}
	var answers []history.Answer
	if b, err := os.ReadFile(file(bundleHistory)); err == nil {
		var a history.Answer
		if err := json.Unmarshal(b, &a); err != nil {
			return cmdline.WithCode(ExitError, fmt.Errorf("%s: %s: %w", o.bundle, bundleHistory, err))
		}
		rep.Histories = append(rep.Histories, historySource{Replica: a.Replica, Since: a.Since, NotReady: a.NotReady})
		var mine []history.Tenure
		for _, t := range a.Tenures {
			if t.IP == ip {
				mine = append(mine, t)
			}
		}
		a.Tenures = mine
		answers = append(answers, a)
	} else {
		rep.Unanswered = append(rep.Unanswered, unanswered{Replica: "the controller's address history", Error: "not in the bundle (its manifest says why)"})
	}
	rep.Tenures = mergeTenures(ip, answers, pods)

	if _, err := os.Stat(file(bundleConntrack)); err == nil {
		at, err := conntrack.FlowsAt(cmd.Context(), fileTable{file(bundleConntrack), m.CapturedAt}, ip)
		if err != nil {
			return cmdline.WithCode(ExitError, fmt.Errorf("%s: %s: %w", o.bundle, bundleConntrack, err))
		}
		at.Node, at.CapturedAt = m.Node, m.CapturedAt
		n := nodeFlows{Agent: "bundle", AtAddress: at}
		if hl, err := hostlocal.At(cmd.Context(), file(bundleHost), ip); err == nil {
			n.HostLocal = hl.Networks
		}
		rep.Flows = append(rep.Flows, n)
	} else {
		rep.Unanswered = append(rep.Unanswered, unanswered{Replica: "node " + m.Node, Error: "no conntrack table in the bundle (its manifest says why)"})
	}
	if len(blocks) > 0 {
		var holders []snapshot.Pod
		for i := range pods {
			if p := kube.Pod(&pods[i]); p.HoldsPodIP() {
				holders = append(holders, p)
			}
		}
		r := judgeCalico(blocks, ip, holders)
		rep.IPAM = &r
	} else {
		rep.IPAM = &ipamRecord{NotServed: "the bundle holds no Calico IPAM object"}
	}

	// Every rule on the bundle, as analyze runs them.
	so := &scanOptions{failOn: "none", output: "table"}
	if err := so.fromBundle(dir, m); err != nil {
		return cmdline.WithCode(ExitError, err)
	}
	p, err := so.plan(cmd, streams)
	if err != nil {
		return err
	}
	res := audit.Run(cmd.Context(), audit.Config{NodeName: p.node, Sources: p.sources, Rules: p.rules})
	at := sink.NewFindingsAt("bundle", true, p.rules, res.Findings, ip)
	for _, f := range at.Findings {
		rep.Findings = append(rep.Findings, reportFinding{From: "bundle of " + m.Node, FindingAt: f})
	}
	if res.Snapshot != nil && res.Snapshot.Gossip != nil {
		for _, v := range res.Snapshot.Gossip.Views {
			for _, mb := range v.Members {
				if mb.Addr.Unmap() == ip {
					rep.Members = append(rep.Members, sink.MemberAt{System: v.System, Cluster: v.Cluster, Name: mb.Name, Port: mb.Port, Status: mb.Status, Since: mb.Since})
				}
			}
		}
	}
	if err := printIP(streams.Out, o.output, rep); err != nil {
		return cmdline.WithCode(ExitError, err)
	}
	if len(rep.Unanswered) > 0 {
		return cmdline.WithCode(ExitError, fmt.Errorf("the bundle lacks %d of the ledgers ip reads", len(rep.Unanswered)))
	}
	return nil
}
