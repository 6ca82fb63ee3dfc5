package rule

import (
	"github.com/ghostwatch/ghostwatch/finding"
	"github.com/ghostwatch/ghostwatch/snapshot"
)

// Rule judges one kind of ghost.
type Rule interface {
	// Info describes the rule: its stable ID, what it reads, and what
	// reports, metrics, Events and remedies need to know about it.
	Info() Info
	// Evaluate returns the rule's findings. It is only called when every
	// source in Info().Sources is ready in the snapshot, and it must not do
	// I/O.
	Evaluate(s *snapshot.Snapshot) []finding.Finding
}

// Rechecker is implemented by a rule whose findings a remedy may act on.
// Right before acting, the remedy reads the objects RecheckQuery names
// afresh from the API server (quorum reads, not the caches that produced
// the finding) and asks Recheck whether the findings still hold on them
// alone. A rule that does not implement it cannot be remedied.
type Rechecker interface {
	RecheckQuery(s *snapshot.Snapshot, f finding.Finding) snapshot.Query
	// Recheck returns, for each finding, nil when it still holds in fresh
	// and otherwise an error saying what changed.
	Recheck(fresh *snapshot.Snapshot, fs []finding.Finding) []error
}

// Scope says where a rule can run.
type Scope string

const (
	// ScopeNode rules judge the ledgers of one node (its conntrack table,
	// its host-local files) against the cluster: the node agent runs them,
	// and so does a scan on a node.
	ScopeNode Scope = "node"
	// ScopeCluster rules judge cluster-wide ledgers (every pod IP, Calico
	// blocks, gossip members): the controller runs them, and so does a
	// scan.
	ScopeCluster Scope = "cluster"
)

// Info describes a rule for reports, metrics, Events and remedies. Sinks
// and the agent know rules only through it.
type Info struct {
	// ID is stable: it names metrics, Events, remedies and runbook pages.
	ID string
	// Sources the rule reads; all must be ready for it to run, or it is
	// skipped with the reason in the report.
	Sources []string
	// Guards are sources the rule does not read that, when collected and
	// found unsupported, say the rule cannot see its ledger here (the
	// proxy source: Service NAT outside conntrack): it is then not
	// applicable, with the reason. Not collected, they change nothing.
	Guards []string
	// Scope says where the rule runs. A rule with Ledgers runs in the
	// scopes of its ledgers instead.
	Scope Scope
	// Ledgers, when set, are alternative ledgers the rule judges, each in
	// its own scope: the rule runs when Sources are ready and at least one
	// ledger is, and judges every ledger that is ready. ipam-unbooked-ip
	// judges host-local's store on a node (the agent) and Calico's
	// datastore cluster-wide (the controller) with one meaning: a running
	// pod's IP the IPAM ledger does not record.
	Ledgers []Ledger
	// Summary is a one-line "why this matters".
	Summary string
	// Fix is the one-line first fix from the runbook.
	Fix string
	// Runbook is the path of the rule's runbook in the repository docs.
	Runbook string
	// Columns names the Subject fields (as in JSON: "service", "flow",
	// "ip", "pod", "node", "namespace") a table shows for each finding,
	// between its severity and its detail.
	Columns []string
	// Detail, when set, is the short reason a table row shows for a
	// finding ("backend 10.244.3.47:8080 gone, ESTABLISHED"); the Message
	// otherwise. It is called only when a table is written: a long-running
	// process holding thousands of findings pays nothing for it.
	Detail func(f finding.Finding) string
	// Gauge, when set, is a gauge a metrics sink exports beside the count
	// of findings, counting the findings by its labels.
	Gauge *Gauge
	// Remedy, when set, is the remedy that may act on the rule's findings.
	Remedy *RemedyInfo
}

// Ledger is one of a rule's alternative ledgers: a source, and where it is
// read.
type Ledger struct {
	Source string
	Scope  Scope
}

// Reads returns every source the rule may read: its Sources, then its
// ledgers'.
func (i Info) Reads() []string {
	out := append([]string(nil), i.Sources...)
	for _, l := range i.Ledgers {
		out = append(out, l.Source)
	}
	return out
}

// RunsIn reports whether the rule runs in scope: its Scope's, or one of its
// ledgers'.
func (i Info) RunsIn(scope Scope) bool {
	if len(i.Ledgers) == 0 {
		return i.Scope == scope
	}
	for _, l := range i.Ledgers {
		if l.Scope == scope {
			return true
		}
	}
	return false
}

// Gauge describes a per-rule Prometheus gauge. Its label values must never
// be IPs or tuples: a series per ghost would grow without bound.
type Gauge struct {
	// Name without the ghostwatch_ prefix.
	Name string
	Help string
	// Labels are the label names; Values returns a finding's values, in
	// the same order.
	Labels []string
	Values func(f finding.Finding) []string
}

// RemedyInfo describes the remedy of a rule.
type RemedyInfo struct {
	// ID names the remedy in --remedy.
	ID string
	// Action says what it does, for help texts.
	Action string
	// Verb and Past say it of one target, in Events and logs: "delete",
	// "deleted" (followed by the target).
	Verb, Past string
	// Target is the finding.Target kind it acts on; an actuator for that
	// kind does the work.
	Target string
	// Ledger, for a rule with Ledgers, is the source its targets belong
	// to: it must be ready, besides the rule's Sources, for the remedy to
	// act.
	Ledger string
	// Events are the Event reasons, by outcome.
	Events RemedyEvents
	// Counter, when set, counts the targets acted on, by rule.
	Counter *Counter
}

// RemedyEvents are the CamelCase reasons of the Events a remedy emits.
type RemedyEvents struct {
	// Done: the action was taken. DryRun: it would have been.
	Done, DryRun string
	// Refused: a safety check said no. Failed: the ledger refused it.
	Refused, Failed string
}

// Counter describes a Prometheus counter.
type Counter struct {
	// Name without the ghostwatch_ prefix.
	Name string
	Help string
}
