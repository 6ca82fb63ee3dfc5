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
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/ghostwatch/ghostwatch/audit"
	"github.com/ghostwatch/ghostwatch/internal/cmdline"
	"github.com/ghostwatch/ghostwatch/sink"
	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source/conntrack"
	"github.com/ghostwatch/ghostwatch/source/hostlocal"
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

	// Every rule on the bundle, as analyze runs them; what they read is
	// what the rest of the story reads too.
	so := &scanOptions{failOn: "none", output: "table"}
	if err := so.fromBundle(dir, m); err != nil {
		return cmdline.WithCode(ExitError, err)
	}
	p, err := so.plan(cmd, streams)
	if err != nil {
		return err
	}
	res := audit.Run(cmd.Context(), audit.Config{NodeName: p.node, Sources: p.sources, Rules: p.rules})
	var pods []snapshot.Pod
	if res.Snapshot.Kube != nil {
		pods = res.Snapshot.Kube.Pods
	}
	for _, f := range sink.NewFindingsAt("bundle", true, p.rules, res.Findings, ip).Findings {
		rep.Findings = append(rep.Findings, reportFinding{From: "bundle of " + m.Node, FindingAt: f})
	}
	rep.Members = append(rep.Members, sink.MembersAt(res.Snapshot.Gossip, ip)...)

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
	if c := res.Snapshot.Calico; c != nil && len(c.Blocks) > 0 {
		r := judgeCalico(c.Blocks, ip, pods)
		rep.IPAM = &r
	} else {
		rep.IPAM = &ipamRecord{NotServed: "the bundle holds no Calico IPAM object"}
	}
	if err := printIP(streams.Out, o.output, rep); err != nil {
		return cmdline.WithCode(ExitError, err)
	}
	if len(rep.Unanswered) > 0 {
		return cmdline.WithCode(ExitError, fmt.Errorf("the bundle lacks %d of the ledgers ip reads", len(rep.Unanswered)))
	}
	return nil
}
