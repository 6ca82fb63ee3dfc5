package lab

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/ghostwatch/ghostwatch/agent"
	"github.com/ghostwatch/ghostwatch/lab/netbed"
	"github.com/ghostwatch/ghostwatch/remedy"
	"github.com/ghostwatch/ghostwatch/rule"
	"github.com/ghostwatch/ghostwatch/snapshot"
	"github.com/ghostwatch/ghostwatch/source"
	"github.com/ghostwatch/ghostwatch/source/conntrack"
	"github.com/ghostwatch/ghostwatch/source/kube/live"
)

// startAgent runs the node agent against the lab: the same loop as
// `ghostwatch agent`, reading the in-memory API through informers and the
// node's conntrack table, deleting stale flows through a netlink socket
// opened inside the node, and telling actions of each action it takes. It
// returns a function that stops it; calling it again does nothing.
func (e *env) startAgent(ctx context.Context, o Options, actions *actionLog) (stop func(), err error) {
	conn, sub, err := openTable(e.node)
	if err != nil {
		return nil, err
	}
	rules := rule.InScope(rule.All(rule.Config{}), rule.ScopeNode)
	// The conntrack remedy, with the lab's grace period: the lab's node has
	// no host-local store.
	table := &conntrack.Watch{Table: conn, Events: sub}
	rems, err := remedy.Build(rules, []string{rule.StaleNATFlowID},
		remedy.Settings{Grace: o.Grace, Budget: 50, BudgetInterval: time.Minute},
		&remedy.Flows{Table: table, Nudge: nodeNudge{e.node, &remedy.SYNNudge{}}})
	if err != nil {
		sub.Close()
		conn.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	a := agent.New(agent.Config{
		NodeName: labNode,
		Sources: []source.Source{
			&live.Watch{
				Informers: live.NewInformers(e.kube(), live.InformerOptions{Node: labNode}),
				Holders:   &live.Holders{Client: e.kube()},
				Client:    e.kube(),
			},
			hostOf(e.node),
			table,
		},
		Rules:         rules,
		Remedies:      rems,
		AuditInterval: 10 * time.Second,
		Events:        timelineRecorder{e.tl},
		Actions:       actions.add,
	})
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := a.Run(ctx); err != nil {
			e.tl.logf("agent", "stopped: %v", err)
		}
	}()
	e.tl.logf("agent", "running: follows conntrack events, judges the flows of every backend that changes; grace %s (the lab's: the agent ships with %s and accepts no less than %s), budget 50 dead backends a minute",
		o.Grace, remedy.DefaultGrace, remedy.MinGrace)
	var once sync.Once
	return func() {
		once.Do(func() {
			cancel()
			<-done
			sub.Close()
			conn.Close()
		})
	}, nil
}

// AgentAction is what the agent did about one finding during a run: what
// its Events and its remedy_actions_total metric count.
type AgentAction struct {
	// AtSeconds is when, in seconds since the scenario started, as the
	// timeline stamps it.
	AtSeconds float64 `json:"at_seconds"`
	// Rule is the rule whose finding it is; Remedy the remedy that acted.
	Rule   string `json:"rule"`
	Remedy string `json:"remedy"`
	// Flow is the flow the finding names (its subject's flow).
	Flow string `json:"flow"`
	// Result is the remedy's: done, refused, failed, gone (the flow was
	// no longer there) or dry-run.
	Result remedy.Result `json:"result"`
	// Reason is what was done ("deleted tcp ..."), why it was refused, or
	// the error it failed with.
	Reason string `json:"reason"`
}

// actionLog keeps the agent's actions of one run, stamped on the
// timeline's clock.
type actionLog struct {
	tl *timeline

	mu      sync.Mutex
	actions []AgentAction
}

// add is the agent's Config.Actions.
func (l *actionLog) add(_ rule.Info, a remedy.Action) {
	at := l.tl.now().Sub(l.tl.start).Round(time.Millisecond).Seconds()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.actions = append(l.actions, AgentAction{AtSeconds: at, Rule: a.Rule, Remedy: a.Remedy,
		Flow: a.Finding.Subject.Flow, Result: a.Result, Reason: a.Reason})
}

// list returns the actions so far; an empty list, not nil, when there
// were none.
func (l *actionLog) list() []AgentAction {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]AgentAction{}, l.actions...)
}

// openTable opens a conntrack socket in node and subscribes to its events,
// before the agent's first dump, as the agent command does.
func openTable(node *netbed.Node) (conn *conntrack.Conn, sub *conntrack.Subscription, err error) {
	err = node.Do(func() (err error) {
		conn, sub, err = openTableHere()
		return err
	})
	return conn, sub, err
}

// openTableHere is openTable in the calling thread's namespace.
func openTableHere() (conn *conntrack.Conn, sub *conntrack.Subscription, err error) {
	if conn, err = conntrack.Open(); err != nil {
		return nil, nil, err
	}
	if sub, err = conntrack.Subscribe(); err != nil {
		conn.Close()
		return nil, nil, err
	}
	return conn, sub, nil
}

// timelineRecorder prints the agent's Kubernetes Events on the timeline.
type timelineRecorder struct{ tl *timeline }

func (r timelineRecorder) Event(obj runtime.Object, eventtype, reason, message string) {
	r.tl.logf("event", "%s %s on %s: %s", eventtype, reason, describeObject(obj), message)
}

func (r timelineRecorder) Eventf(obj runtime.Object, eventtype, reason, format string, args ...any) {
	r.Event(obj, eventtype, reason, fmt.Sprintf(format, args...))
}

func (r timelineRecorder) AnnotatedEventf(obj runtime.Object, _ map[string]string, eventtype, reason, format string, args ...any) {
	r.Eventf(obj, eventtype, reason, format, args...)
}

func describeObject(obj runtime.Object) string {
	if ref, ok := obj.(*corev1.ObjectReference); ok {
		return ref.Kind + " " + ref.Namespace + "/" + ref.Name
	}
	return fmt.Sprintf("%T", obj)
}

// nodeNudge nudges clients from inside the node, where the agent of a real
// node runs (hostNetwork).
type nodeNudge struct {
	node *netbed.Node
	n    *remedy.SYNNudge
}

func (n nodeNudge) Wants(f *snapshot.Flow) bool {
	var ok bool
	n.node.Do(func() error { ok = n.n.Wants(f); return nil })
	return ok
}

func (n nodeNudge) Nudge(f *snapshot.Flow) error {
	var err error
	if derr := n.node.Do(func() error { err = n.n.Nudge(f); return nil }); derr != nil {
		return derr
	}
	return err
}
