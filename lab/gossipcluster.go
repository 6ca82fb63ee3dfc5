package lab

import (
	"context"
	"crypto/sha1"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"runtime/debug"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/memberlist"

	"github.com/ghostwatch/ghostwatch/audit"
	"github.com/ghostwatch/ghostwatch/gossip"
	"github.com/ghostwatch/ghostwatch/internal/consultest"
	"github.com/ghostwatch/ghostwatch/internal/memberlisttest"
	"github.com/ghostwatch/ghostwatch/internal/serftest"
	"github.com/ghostwatch/ghostwatch/rule"
	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source"
	sourcegossip "github.com/ghostwatch/ghostwatch/source/gossip"
)

// gossipLab is the scenario as it plays.
type gossipLab struct {
	ctx context.Context
	tl  *timeline
	res *GossipReuseResult
	// all is every node started, to stop at the end.
	all []*gossipNode
	// consulBin is the directory of the consul binary; "" plays no
	// Consul act.
	consulBin string

	// The act playing: its result, its nodes (the first two are the
	// surviving members), the pods as the API server would list them,
	// and the member states last printed, by viewer (its pod's UID) and
	// member.
	act     *GossipAct
	nodes   []*gossipNode
	pods    []snapshot.Pod
	printed map[string]string
}

// gossipNode is one member: a memberlist member or a Serf agent, the pod
// it runs in, and how ghostwatch reads its list.
type gossipNode struct {
	name   string
	pod    snapshot.Pod
	ml     *memberlisttest.Member
	serf   *serftest.Agent
	consul *consultest.Agent
	reader sourcegossip.Agent
	// leaving is LeaveOnDone's result, when the node runs it; sigterm
	// ends its context.
	sigterm context.CancelFunc
	leaving chan error
	stopped bool
	// dir holds a Consul agent's data, removed when the lab ends.
	dir string
}

// gossipAddr is the address and port the node gossips on.
func (n *gossipNode) gossipAddr() netip.AddrPort {
	if n.serf != nil {
		return n.serf.Gossip
	}
	if n.consul != nil {
		return netip.AddrPortFrom(n.consul.Addr, consulLANPort)
	}
	return netip.MustParseAddrPort(n.ml.Address())
}

// stop stops the node without leaving, as a killed pod stops. A node
// still blocked in LeaveOnDone (the lab was interrupted before its
// SIGTERM) is shut down first: LeaveOnDone then returns without a leave,
// and without waiting out its timeout.
func (n *gossipNode) stop() error {
	if n.stopped {
		return nil
	}
	n.stopped = true
	if n.serf != nil {
		n.serf.Kill()
		return nil
	}
	if n.consul != nil {
		n.consul.Kill()
		return nil
	}
	err := n.ml.Stop()
	if n.sigterm != nil {
		n.sigterm()
		<-n.leaving // "shut down before it could leave"
	}
	return err
}

// logLines returns the node's log lines holding every one of words.
func (n *gossipNode) logLines(words ...string) []string {
	var lines []string
	switch {
	case n.ml != nil:
		return n.ml.Log.Lines(words...)
	case n.consul != nil:
		lines = strings.Split(n.consul.Log(), "\n")
	default:
		lines = n.serf.Log.Lines(0, words[0])
	}
	return slices.DeleteFunc(lines, func(l string) bool {
		return slices.ContainsFunc(words, func(w string) bool { return !strings.Contains(l, w) })
	})
}

// stopAll stops every node still running.
func (g *gossipLab) stopAll() (int, error) {
	var errs []error
	for _, n := range g.all {
		if err := n.stop(); err != nil {
			errs = append(errs, fmt.Errorf("stopping member %s: %w", n.name, err))
		}
		if n.dir != "" {
			if err := os.RemoveAll(n.dir); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return len(g.all), errors.Join(errs...)
}

// podUID is a UID for the pod, the same on every run.
func podUID(act, ns, name string) string {
	h := sha1.Sum([]byte(act + "/" + ns + "/" + name))
	return fmt.Sprintf("%x-%x-%x-%x-%x", h[0:4], h[4:6], h[6:8], h[8:10], h[10:16])
}

// newPod is a pod of the act, running at addr since now.
func (g *gossipLab) newPod(ns, name, addr, node string) snapshot.Pod {
	now := time.Now()
	return snapshot.Pod{UID: podUID(g.act.ID, ns, name), Namespace: ns, Name: name, Node: node,
		Phase: snapshot.PodRunning, IPs: []netip.Addr{netip.MustParseAddr(addr)}, Created: now, StartTime: now}
}

// uidName is the member name the ghostwatch/gossip package gives the pod:
// $POD_NAME-$POD_UID.
func uidName(p snapshot.Pod) (string, error) {
	env := map[string]string{gossip.EnvPodName: p.Name, gossip.EnvPodUID: p.UID}
	n, err := gossip.Identity{Getenv: func(k string) string { return env[k] }}.MemberName()
	return n.Name, err
}

// ipName is a member name derived from the member's IP, as the seed's
// application made them.
func ipName(addr string) string { return "node-" + strings.ReplaceAll(addr, ".", "-") }

// beginAct starts an act.
func (g *gossipLab) beginAct(num, id, system, title string) {
	g.act = &GossipAct{Num: num, ID: id, System: system, Title: title, Addr: actAddrs[id][2],
		Measured: map[string]float64{}, Counts: map[string]int{}, Started: g.tl.since(time.Now())}
	g.nodes, g.pods, g.printed = nil, nil, map[string]string{}
	g.res.Acts = append(g.res.Acts, g.act)
	g.tl.section("act %s: %s", num, title)
}

// endAct stops the act's nodes.
func (g *gossipLab) endAct() error {
	var errs []error
	for _, n := range g.nodes {
		if err := n.stop(); err != nil {
			errs = append(errs, fmt.Errorf("stopping member %s: %w", n.name, err))
		}
	}
	g.act.Ended = g.tl.since(time.Now())
	g.tl.logf("lab", "act over in %.1fs; its members stopped", g.act.Ended-g.act.Started)
	return errors.Join(errs...)
}

// startMember starts a memberlist member named name in pod p, on the
// pod's address and port (0: any), with cfg, whose timings the caller
// shortened; its list is served by the ghostwatch/gossip package's View.
// With leave, it runs gossip.LeaveOnDone, as the package's example does.
func (g *gossipLab) startMember(cfg *memberlist.Config, p snapshot.Pod, port int, leave bool) (*gossipNode, error) {
	addr := p.IPs[0].String()
	cfg.BindAddr, cfg.BindPort, cfg.AdvertisePort = addr, port, port
	view := gossip.Watch(cfg)
	m, err := memberlisttest.Start(cfg, view.Handler)
	if err != nil {
		return nil, err
	}
	n := &gossipNode{name: cfg.Name, pod: p, ml: m,
		reader: &sourcegossip.Endpoint{URL: m.URL + gossip.Path, Client: &http.Client{Timeout: labPatience}}}
	if leave {
		var ctx context.Context
		ctx, n.sigterm = context.WithCancel(context.Background())
		n.leaving = make(chan error, 1)
		go func() { n.leaving <- gossip.LeaveOnDone(ctx, m.ML, gossip.DefaultLeaveTimeout) }()
	}
	g.all = append(g.all, n)
	g.nodes = append(g.nodes, n)
	return n, nil
}

// startAgent starts a Serf agent named name in pod p, gossiping on
// gossipAt (port 0: any), its RPC on the pod's address.
func (g *gossipLab) startAgent(name string, p snapshot.Pod, gossipAt netip.AddrPort) (*gossipNode, error) {
	a, err := serftest.Create(serftest.Config{Name: name, Gossip: gossipAt, RPC: netip.AddrPortFrom(p.IPs[0], 0)})
	if err != nil {
		return nil, err
	}
	n := &gossipNode{name: name, pod: p, serf: a, reader: &sourcegossip.Serf{Addr: a.RPC, Timeout: labPatience}}
	g.all = append(g.all, n)
	g.nodes = append(g.nodes, n)
	return n, nil
}

// consulLANPort is the port Consul agents gossip on (serf_lan).
const consulLANPort = 8301

// startConsul starts a Consul agent named name in pod p, on the pod's
// address (a server when server is set, else a client joining join), with
// ACLs on: its list is read through its HTTP API with the lab's token.
func (g *gossipLab) startConsul(name string, p snapshot.Pod, server bool, join netip.Addr) (*gossipNode, error) {
	dir, err := os.MkdirTemp("", "ghostwatch-lab-consul-")
	if err != nil {
		return nil, err
	}
	a, err := consultest.Create(g.consulBin, dir, consultest.Config{Name: name, Addr: p.IPs[0], Server: server, Join: join})
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	n := &gossipNode{name: name, pod: p, consul: a, dir: dir,
		reader: &sourcegossip.Consul{Addr: a.HTTP, Token: consultest.Token, AllowPlaintext: true}}
	g.all = append(g.all, n)
	g.nodes = append(g.nodes, n)
	return n, nil
}

// join joins n to the member to.
func (g *gossipLab) join(n, to *gossipNode) error {
	if n.consul != nil {
		return nil // joined by its configuration (retry_join)
	}
	if n.serf != nil {
		return n.serf.JoinCluster(to.gossipAddr())
	}
	if _, err := n.ml.ML.Join([]string{to.gossipAddr().String()}); err != nil {
		return fmt.Errorf("member %s joining %s: %w", n.name, to.gossipAddr(), err)
	}
	return nil
}

// live returns the act's nodes still running.
func (g *gossipLab) live() []*gossipNode {
	var out []*gossipNode
	for _, n := range g.nodes {
		if !n.stopped {
			out = append(out, n)
		}
	}
	return out
}

// addPod records a pod the API server now lists, and says so.
func (g *gossipLab) addPod(p snapshot.Pod, why string) {
	g.pods = append(g.pods, p)
	g.tl.logf("kube", "pod %s/%s (uid %s) %s at %s, started +%.2fs%s", p.Namespace, p.Name, p.UID, p.Phase, p.IPs[0], g.tl.since(p.StartTime), why)
}

// deletePod removes a pod from what the API server lists, and says why it
// went.
func (g *gossipLab) deletePod(p snapshot.Pod, why string) {
	g.pods = slices.DeleteFunc(g.pods, func(x snapshot.Pod) bool { return x.UID == p.UID })
	g.tl.logf("kube", "pod %s/%s gone (%s): %s is free, and the next pod may get it", p.Namespace, p.Name, why, p.IPs[0])
}

// showPods says which pods the API server lists.
func (g *gossipLab) showPods() {
	var s []string
	for _, p := range g.pods {
		s = append(s, fmt.Sprintf("%s/%s %s %s", p.Namespace, p.Name, p.IPs[0], p.Phase))
	}
	g.tl.logf("kube", "pods, as the API server would list them: %s", strings.Join(s, ", "))
}

// readList reads n's member list as ghostwatch does.
func (g *gossipLab) readList(n *gossipNode) (*snapshot.GossipView, error) {
	ctx, cancel := context.WithTimeout(g.ctx, labPatience)
	defer cancel()
	v, err := n.reader.Members(ctx)
	if err != nil {
		return nil, fmt.Errorf("reading the member list of %s (pod %s): %w", n.name, n.pod.Name, err)
	}
	return v, nil
}

// note records what viewer's list says of the watched members, printing
// each change, and the old member's states as the first survivor lists
// it.
func (g *gossipLab) note(viewer *gossipNode, v *snapshot.GossipView, watched []string) {
	for _, name := range watched {
		state := "forgotten"
		var at string
		for _, m := range v.Members {
			if m.Name == name {
				state, at = m.Status, netip.AddrPortFrom(m.Addr, m.Port).String()
			}
		}
		key := viewer.pod.UID + "\x00" + name
		last, seen := g.printed[key]
		if viewer == g.nodes[0] && name == g.act.Old && (len(g.act.OldStates) == 0 || g.act.OldStates[len(g.act.OldStates)-1] != state) && (seen || state != "forgotten") {
			g.act.OldStates = append(g.act.OldStates, state)
		}
		if last == state || (!seen && state == "forgotten") {
			continue
		}
		g.printed[key] = state
		if state == "forgotten" {
			g.tl.logf(podWho(viewer.pod), "no longer lists %s: forgotten", name)
		} else {
			g.tl.logf(podWho(viewer.pod), "lists %s %s at %s", name, state, at)
		}
	}
}

// waitLists polls the lists of viewers until cond holds for each, printing
// what changes for the watched members, and returns how long that took.
// It gives up only after labPatience: a hang, not a slow machine.
func (g *gossipLab) waitLists(what string, viewers []*gossipNode, watched []string, cond func(*snapshot.GossipView) bool) (time.Duration, error) {
	start := time.Now()
	deadline := start.Add(labPatience)
	for {
		var last string
		ok := true
		for _, n := range viewers {
			v, err := g.readList(n)
			if err != nil {
				return 0, err
			}
			g.note(n, v, watched)
			if !cond(v) {
				ok, last = false, fmt.Sprintf("%s lists %s", podWho(n.pod), listText(v))
				break
			}
		}
		if ok {
			return time.Since(start), nil
		}
		if time.Now().After(deadline) {
			return 0, fmt.Errorf("%s: not within %s (%s)", what, labPatience, last)
		}
		select {
		case <-g.ctx.Done():
			return 0, context.Cause(g.ctx)
		case <-time.After(gossipPollGap):
		}
	}
}

// waitLog polls n's log until it holds a line with every one of words,
// giving up only after labPatience.
func (g *gossipLab) waitLog(n *gossipNode, what string, words ...string) ([]string, error) {
	deadline := time.Now().Add(labPatience)
	for {
		if lines := n.logLines(words...); len(lines) > 0 {
			return lines, nil
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("%s: %s logged no line with %q within %s", what, n.name, words, labPatience)
		}
		select {
		case <-g.ctx.Done():
			return nil, context.Cause(g.ctx)
		case <-time.After(gossipPollGap):
		}
	}
}

// status returns the state name has in v, "" when v does not list it.
func status(v *snapshot.GossipView, name string) string {
	for _, m := range v.Members {
		if m.Name == name {
			return m.Status
		}
	}
	return ""
}

// sorted returns v's members by name.
func sorted(v *snapshot.GossipView) []snapshot.GossipMember {
	ms := slices.Clone(v.Members)
	slices.SortFunc(ms, func(a, b snapshot.GossipMember) int { return strings.Compare(a.Name, b.Name) })
	return ms
}

// listText shows a member list on one line, by name.
func listText(v *snapshot.GossipView) string {
	var s []string
	for _, m := range sorted(v) {
		s = append(s, fmt.Sprintf("%s %s %s", m.Name, m.Status, netip.AddrPortFrom(m.Addr, m.Port)))
	}
	return strings.Join(s, ", ")
}

// scan runs ghostwatch's gossip rules on every live member's list and the
// pods, as ghostwatch scan does, and prints what it read and found.
func (g *gossipLab) scan(step string) (*GossipScan, error) {
	live := g.live()
	agents := make([]sourcegossip.Agent, 0, len(live))
	for _, n := range live {
		agents = append(agents, n.reader)
	}
	r := audit.Run(g.ctx, audit.Config{
		Sources: []source.Source{fixedKube{snapshot.Kube{Pods: slices.Clone(g.pods)}}, &sourcegossip.LiveSource{Agents: agents}},
		Rules:   []rule.Rule{&rule.GossipGhostMember{}, &rule.GossipIPIdentity{}},
	})
	if err := r.Incomplete(); err != nil {
		return nil, fmt.Errorf("ghostwatch's scan (%s): %w", step, err)
	}
	sc := GossipScan{Step: step, At: g.tl.since(r.Snapshot.Taken), Findings: r.Findings}
	seenBy := map[string]string{}
	for i, v := range r.Snapshot.Gossip.Views {
		n := live[i]
		seenBy[v.From] = podWho(n.pod)
		l := GossipList{SeenBy: podWho(n.pod)}
		for _, m := range sorted(&v) {
			l.Members = append(l.Members, GossipListed{Name: m.Name, Addr: m.Addr.String(), Port: m.Port, State: m.Status})
		}
		sc.Lists = append(sc.Lists, l)
		g.tl.logf(podWho(n.pod), "lists %s", listText(&v))
	}
	g.act.Scans = append(g.act.Scans, sc)
	if len(r.Findings) == 0 {
		g.tl.logf("ghostwatch", "no finding")
		return &g.act.Scans[len(g.act.Scans)-1], nil
	}
	// One line per finding, the views that gave it named once.
	type line struct{ msg, by string }
	var lines []*line
	byMsg := map[string]*line{}
	for _, f := range r.Findings {
		msg := f.Message
		if i := strings.Index(msg, "): "); i >= 0 {
			msg = msg[i+3:] // "memberlist cluster (seen by ...): "
		}
		msg = fmt.Sprintf("%s %s: %s", f.Severity, f.Rule, msg)
		by := seenBy[fmt.Sprint(f.Evidence["view"])]
		if l, ok := byMsg[msg]; ok {
			l.by += ", " + by
			continue
		}
		l := &line{msg: msg, by: by}
		byMsg[msg] = l
		lines = append(lines, l)
	}
	for _, l := range lines {
		g.tl.logf("ghostwatch", "%s [in the list of %s]", l.msg, l.by)
	}
	return &g.act.Scans[len(g.act.Scans)-1], nil
}

// fmtDuration prints a setting: 200ms, 3s, 24h.
func fmtDuration(d time.Duration) string {
	switch {
	case d >= time.Hour && d%time.Hour == 0:
		return fmt.Sprintf("%dh", d/time.Hour)
	case d >= time.Second && d%time.Second == 0:
		return fmt.Sprintf("%ds", d/time.Second)
	}
	return d.String()
}

// settings lists the values of lab that differ from def's.
type settings []GossipSetting

func (s *settings) add(name string, lab, def any) {
	show := func(v any) string {
		if d, ok := v.(time.Duration); ok {
			return fmtDuration(d)
		}
		return fmt.Sprint(v)
	}
	if lab != def {
		*s = append(*s, GossipSetting{Name: name, Lab: show(lab), Default: show(def)})
	}
}

// memberlistSettings lists the memberlist timings lab changes from def.
func memberlistSettings(lab, def *memberlist.Config) settings {
	var s settings
	s.add("ProbeInterval", lab.ProbeInterval, def.ProbeInterval)
	s.add("ProbeTimeout", lab.ProbeTimeout, def.ProbeTimeout)
	s.add("SuspicionMult", lab.SuspicionMult, def.SuspicionMult)
	s.add("SuspicionMaxTimeoutMult", lab.SuspicionMaxTimeoutMult, def.SuspicionMaxTimeoutMult)
	s.add("GossipInterval", lab.GossipInterval, def.GossipInterval)
	s.add("GossipToTheDeadTime", lab.GossipToTheDeadTime, def.GossipToTheDeadTime)
	s.add("PushPullInterval", lab.PushPullInterval, def.PushPullInterval)
	s.add("TCPTimeout", lab.TCPTimeout, def.TCPTimeout)
	return s
}

// text says the settings on one line: "ProbeInterval 200ms (1s by
// default), ...".
func (s settings) text() string {
	var parts []string
	for _, x := range s {
		parts = append(parts, fmt.Sprintf("%s %s (%s by default)", x.Name, x.Lab, x.Default))
	}
	return strings.Join(parts, ", ")
}

// memberlistTimings says the settings of a memberlist act, and what they
// and the defaults give a cluster of 3 members, as memberlist computes it
// (gossip.TimingOf).
func (g *gossipLab) memberlistTimings(lab, def *memberlist.Config, defName string) {
	s := memberlistSettings(lab, def)
	g.act.Settings = s
	g.tl.logf("settings", "%s %s; every figure below is the lab's", defName, s.text())
	l, d := gossip.TimingOf(lab, 3), gossip.TimingOf(def, 3)
	g.tl.logf("settings", "a member that stops answering is suspect for %s here, %s with the defaults; then listed dead for %s to %s here, %s to %s with the defaults, then forgotten",
		fmtDuration(l.SuspectMax), fmtDuration(d.SuspectMax), fmtDuration(l.DeadMin), fmtDuration(l.DeadMax), fmtDuration(d.DeadMin), fmtDuration(d.DeadMax))
}

// startCluster starts the act's two surviving members and the one whose
// pod will go, joined, each in its pod: names gives each pod's member
// name, config each member's configuration.
func (g *gossipLab) startCluster(names func(snapshot.Pod) (string, error), config func(name string) *memberlist.Config, leave bool) (*gossipNode, error) {
	addrs := actAddrs[g.act.ID]
	for i, addr := range addrs {
		p := g.newPod(gossipNS, fmt.Sprintf("cache-%d", i+1), addr, fmt.Sprintf("worker-%d", i+1))
		name, err := names(p)
		if err != nil {
			return nil, err
		}
		n, err := g.startMember(config(name), p, 0, leave && i == 2)
		if err != nil {
			return nil, err
		}
		g.pods = append(g.pods, p)
		if i > 0 {
			if err := g.join(n, g.nodes[0]); err != nil {
				return nil, err
			}
		}
	}
	return g.settle()
}

// settle waits until every member lists every other alive, says so, and
// returns the member whose pod will go.
func (g *gossipLab) settle() (*gossipNode, error) {
	var names []string
	for _, n := range g.nodes {
		names = append(names, n.name)
	}
	if _, err := g.waitLists("every member alive in every list", g.nodes, nil, func(v *snapshot.GossipView) bool {
		for _, name := range names {
			if status(v, name) != snapshot.MemberAlive {
				return false
			}
		}
		return true
	}); err != nil {
		return nil, err
	}
	var ms []string
	for _, n := range g.nodes {
		ms = append(ms, fmt.Sprintf("%s in pod %s at %s", n.name, n.pod.Name, n.gossipAddr()))
	}
	g.tl.logf("cluster", "%d members, each alive in every list: %s", len(g.nodes), strings.Join(ms, ", "))
	g.showPods()
	a := g.nodes[2]
	g.act.Old = a.name
	g.act.OldStates = []string{snapshot.MemberAlive}
	for _, n := range g.nodes {
		g.printed[n.pod.UID+"\x00"+a.name] = snapshot.MemberAlive
	}
	return a, nil
}

// crash kills a's pod without a leave, as SIGKILL, an OOM or a lost node
// does, and waits until the surviving members list it gone (dead or
// failed), printing what they list of it.
func (g *gossipLab) crash(a *gossipNode) (time.Time, error) {
	crashed := time.Now()
	if err := a.stop(); err != nil {
		return crashed, err
	}
	g.tl.logf(a.pod.Name, "killed without a leave (SIGKILL, an OOM, its node lost): %s stops answering", a.name)
	g.deletePod(a.pod, "killed")
	survivors := g.nodes[:2]
	var suspect time.Duration
	if _, err := g.waitLists(a.name+" gone in every surviving list", survivors, []string{a.name}, func(v *snapshot.GossipView) bool {
		st := status(v, a.name)
		if st == snapshot.MemberSuspect && suspect == 0 {
			suspect = time.Since(crashed)
		}
		return st == snapshot.MemberDead || st == snapshot.MemberFailed
	}); err != nil {
		return crashed, err
	}
	gone := time.Since(crashed)
	if suspect > 0 {
		g.act.Measured["suspect"] = suspect.Seconds()
	}
	if g.act.System == "serf" || g.act.System == "consul" {
		g.act.Measured["failed"] = gone.Seconds()
	} else {
		g.act.Measured["dead"] = gone.Seconds()
	}
	return crashed, nil
}

// reissue starts the new pod on a's address, and its member, configured by
// start, at a's port; and joins it to the first surviving member.
func (g *gossipLab) reissue(a *gossipNode, p snapshot.Pod, start func(snapshot.Pod, int) (*gossipNode, error), why string, join bool) (*gossipNode, error) {
	g.addPod(p, why)
	b, err := start(p, int(a.gossipAddr().Port()))
	if err != nil {
		return nil, err
	}
	g.act.New = b.name
	if !join {
		g.tl.logf(podWho(p), "member %s starts on %s, where %s was", b.name, b.gossipAddr(), a.name)
		return b, nil
	}
	g.tl.logf(podWho(p), "member %s starts on %s, where %s was, and joins %s", b.name, b.gossipAddr(), a.name, g.nodes[0].name)
	if err := g.join(b, g.nodes[0]); err != nil {
		return nil, err
	}
	return b, nil
}

// waitForgotten waits until no surviving member lists a, and measures it
// from when a's pod went.
func (g *gossipLab) waitForgotten(a *gossipNode, since time.Time) error {
	if _, err := g.waitLists(a.name+" forgotten by every surviving member", g.nodes[:2], []string{a.name}, func(v *snapshot.GossipView) bool {
		return status(v, a.name) == ""
	}); err != nil {
		return err
	}
	g.act.Measured["forgotten"] = time.Since(since).Seconds()
	return nil
}

// seedConfig is the seed's application: memberlist's DefaultLANConfig,
// its member named after its IP, no label, no leave; timings shortened.
func seedConfig(name string) *memberlist.Config {
	c := memberlist.DefaultLANConfig()
	c.Name = name
	memberlisttest.Shorten(c)
	return c
}

// podConfig is the ghostwatch/gossip package's preset with label,
// timings shortened.
func podConfig(label string) func(string) *memberlist.Config {
	return func(name string) *memberlist.Config {
		c := gossip.DefaultPodConfig(name, label)
		memberlisttest.Shorten(c)
		return c
	}
}

// incarnation is name's incarnation in n's list, as ghostwatch reads it.
func (g *gossipLab) incarnation(n *gossipNode, name string) (uint32, error) {
	v, err := g.readList(n)
	if err != nil {
		return 0, err
	}
	for _, m := range v.Members {
		if m.Name == name {
			return m.Incarnation, nil
		}
	}
	return 0, fmt.Errorf("%s does not list %s", n.name, name)
}

// logText drops the date and time log.Logger puts in front of a line.
func logText(line string) string {
	if i := strings.Index(line, "["); i >= 0 {
		return line[i:]
	}
	return line
}

// podWho names a pod on the timeline: its name in the cluster's
// namespace, namespace/name in another.
func podWho(p snapshot.Pod) string {
	if p.Namespace == gossipNS {
		return p.Name
	}
	return p.Namespace + "/" + p.Name
}

// moduleVersion is the version of the module at path this binary was
// built with, e.g. "memberlist v0.5.4".
func moduleVersion(path string) string {
	name := path[strings.LastIndex(path, "/")+1:]
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == path {
				if d.Replace != nil {
					d = d.Replace
				}
				return name + " " + d.Version
			}
		}
	}
	return name
}
