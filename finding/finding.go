package finding

import (
	"cmp"
	"fmt"
	"iter"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/ghostwatch/ghostwatch/snapshot"
)

// Severity orders findings; higher is worse.
type Severity int

// Severities, from least to most severe.
const (
	Info Severity = iota + 1
	Warning
	Critical
)

// String returns "info", "warning" or "critical".
func (s Severity) String() string {
	switch s {
	case Info:
		return "info"
	case Warning:
		return "warning"
	case Critical:
		return "critical"
	}
	return fmt.Sprintf("severity(%d)", int(s))
}

// ParseSeverity accepts the names String returns.
func ParseSeverity(s string) (Severity, error) {
	switch strings.ToLower(s) {
	case "info":
		return Info, nil
	case "warning":
		return Warning, nil
	case "critical":
		return Critical, nil
	}
	return 0, fmt.Errorf("unknown severity %q (want info, warning or critical)", s)
}

// MarshalText encodes the severity by name.
func (s Severity) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText decodes a severity name.
func (s *Severity) UnmarshalText(b []byte) error {
	v, err := ParseSeverity(string(b))
	if err != nil {
		return err
	}
	*s = v
	return nil
}

// Subject names what a finding is about. IP is the ghost IP: the address
// whose binding outlived its owner.
type Subject struct {
	IP        string `json:"ip,omitempty"`
	Service   string `json:"service,omitempty"`
	Namespace string `json:"namespace,omitempty"`
	Pod       string `json:"pod,omitempty"`
	Node      string `json:"node,omitempty"`
	Flow      string `json:"flow,omitempty"`
}

// Field returns the subject field named as in JSON ("ip", "service",
// "namespace", "pod", "node", "flow"), or "" for another name.
func (s Subject) Field(name string) string {
	switch name {
	case "ip":
		return s.IP
	case "service":
		return s.Service
	case "namespace":
		return s.Namespace
	case "pod":
		return s.Pod
	case "node":
		return s.Node
	case "flow":
		return s.Flow
	}
	return ""
}

// Finding is one ghost a rule found.
type Finding struct {
	Rule     string         `json:"rule"`
	Severity Severity       `json:"severity"`
	Message  string         `json:"message"`
	Subject  Subject        `json:"subject"`
	Evidence map[string]any `json:"evidence,omitempty"`
	// Remove is the command a person can copy to remove what the finding
	// names, and nothing else, by hand; empty when there is none.
	Remove string `json:"remove,omitempty"`

	// Concerns are the Kubernetes objects an Event about this finding, or
	// about an action on it, belongs on. The rule names only objects it has
	// proven to be concerned: a client pod only when the pod that holds the
	// client address provably opened the flow.
	Concerns []ObjectRef `json:"-"`
	// Target is the one thing a remedy may act on for this finding; nil
	// when none may.
	Target Target `json:"-"`
}

// ObjectRef names a Kubernetes object for Events.
type ObjectRef struct {
	Kind      string
	Namespace string
	Name      string
	// UID, when known, ties the Event to this incarnation of the object.
	UID string
}

// Target is what a remedy acts on: an exact conntrack entry, a host-local
// reservation, a gossip member. Remedies type-switch on it; the methods are
// what the remedy framework needs to run any of them under the same safety
// invariants.
type Target interface {
	// Kind names the type of target ("conntrack-flow"); a remedy acts only
	// on the kind its actuator handles.
	Kind() string
	// Key identifies the target across passes: the same ghost seen twice
	// has the same key, so that its grace period can run. It is
	// comparable.
	Key() any
	// Group is the unit budgets count and act on together: the ghost IP
	// for the flows of one dead backend.
	Group() string
	// Size is how many entries the target holds: the flows of a
	// FlowTarget, 1 for the others. A cap on the entries acted on
	// together counts them.
	Size() int
	// String describes the target for Events and logs.
	String() string
}

// Listed is a target that stands for many entries of one kind, a ghost
// backend's conntrack flows: a report counts them ("1 finding (12
// flows)") and lists each under the finding, streamed one by one, so that
// a finding of a million entries costs no memory to write.
type Listed interface {
	Target
	// Noun names one entry and more: "flow", "flows". The plural also
	// names the list in a report.
	Noun() (one, many string)
	// Entries yields each entry as a report lists it (a value that
	// marshals to JSON) and the command that removes it by hand.
	Entries() iter.Seq2[any, string]
}

// Ordered is a target that orders the findings it belongs to among those
// of the same rule, severity and Service.
type Ordered interface {
	Target
	// Compare is negative when the target's finding comes before the
	// one of other, positive after, 0 when they tie or other is of
	// another type.
	Compare(other Target) int
}

// FlowKind is the Kind of a FlowTarget.
const FlowKind = "conntrack-flow"

// FlowTarget is the conntrack entries one finding is about: flows to one
// ghost backend that its rule judged alike (through one Service, for one
// reason), each an exact entry (original tuple, zone and, when the kernel
// gave it, ID). A dead backend with a million flows is one target: its
// flows stay in the snapshot's table, where the target names them.
type FlowTarget struct {
	Flows *snapshot.FlowSelection
	// Name is what the rule judged alike, to tell this target from the
	// same backend's others and to know it again in the next pass (its
	// grace period runs across passes): "ns/svc stale", say.
	Name string
}

// NewFlowTarget returns the target of flows, all to one backend, named
// name, holding copies of them of its own.
func NewFlowTarget(name string, flows ...snapshot.Flow) *FlowTarget {
	c := snapshot.NewConntrack(len(flows), flows...)
	t := &FlowTarget{Flows: &snapshot.FlowSelection{}, Name: name}
	for ref := range c.Refs() {
		t.Flows.Add(c, ref)
	}
	return t
}

// Kind returns FlowKind.
func (t *FlowTarget) Kind() string { return FlowKind }

// Key identifies the target across passes: its backend and what its rule
// judged alike. A flow that comes to a ghost backend already reported joins
// its target, and the grace period that runs: the backend has been gone
// that long.
func (t *FlowTarget) Key() any { return [2]string{t.Flows.Backend().String(), t.Name} }

// Group is the backend address, the ghost IP.
func (t *FlowTarget) Group() string { return t.Flows.Backend().Unmap().String() }

// Size is how many flows the target holds.
func (t *FlowTarget) Size() int { return t.Flows.Len() }

// String renders "tcp 10.244.1.50:45678 -> 10.96.100.50:5432 (DNAT to
// 10.244.3.47:5432, conntrack id 7)" for one flow, "2,666 flows to
// 10.244.3.47 (e.g. tcp ... (DNAT to ..., conntrack id 7))" for more.
func (t *FlowTarget) String() string {
	f := t.Flows.First()
	one := f.String() + " (DNAT to " + f.Backend().String()
	if f.ID != 0 {
		one += fmt.Sprintf(", conntrack id %d", f.ID)
	}
	one += ")"
	if n := t.Flows.Len(); n > 1 {
		return fmt.Sprintf("%d flows to %s (e.g. %s)", n, t.Flows.Backend().Unmap(), one)
	}
	return one
}

// Noun returns "flow", "flows".
func (t *FlowTarget) Noun() (one, many string) { return "flow", "flows" }

// Entries yields each flow as a report lists it, with the command that
// deletes it.
func (t *FlowTarget) Entries() iter.Seq2[any, string] {
	return func(yield func(any, string) bool) {
		for f := range t.Flows.All() {
			e := newFlowEntry(f)
			if !yield(e, e.Remove) {
				return
			}
		}
	}
}

// Compare orders flow targets by their first flow's addresses as the
// kernel holds them: the backend (the ghost IP), then the original tuple.
func (t *FlowTarget) Compare(other Target) int {
	o, ok := other.(*FlowTarget)
	if !ok {
		return 0
	}
	x, y := t.Flows.First(), o.Flows.First()
	return cmp.Or(x.Reply.Src.Unmap().Compare(y.Reply.Src.Unmap()),
		x.Orig.Src.Compare(y.Orig.Src), cmp.Compare(x.Orig.SrcPort, y.Orig.SrcPort),
		x.Orig.Dst.Compare(y.Orig.Dst), cmp.Compare(x.Orig.DstPort, y.Orig.DstPort))
}

// CrowdKind is the Kind of a CrowdTarget.
const CrowdKind = "conntrack-flows-of-many-backends"

// CrowdTarget is the conntrack entries of many ghost backends that a rule
// judged alike (through one Service, for one reason), reported together
// when a node holds more of them than are reported one by one: a node
// whose workloads all died. Each backend's flows stay where the snapshot
// keeps them. No remedy acts on it: a remedy's budget counts ghost IPs one
// by one, and refuses a batch of this many whole.
type CrowdTarget struct {
	// Flows are the flows of each ghost backend, a backend's together.
	Flows []snapshot.FlowSelection
	// Name is what the rule judged alike ("ns/svc gone").
	Name string
}

// Kind returns CrowdKind.
func (t *CrowdTarget) Kind() string { return CrowdKind }

// Key identifies the crowd across passes: what its rule judged alike.
func (t *CrowdTarget) Key() any { return [2]string{"crowd", t.Name} }

// Group is what its rule judged alike: the crowd is one unit.
func (t *CrowdTarget) Group() string { return t.Name }

// Size is how many flows the crowd holds.
func (t *CrowdTarget) Size() int {
	n := 0
	for i := range t.Flows {
		n += t.Flows[i].Len()
	}
	return n
}

// String renders "2,666 flows to 1,000 ghost backends (e.g. tcp ...
// (DNAT to ..., conntrack id 7))".
func (t *CrowdTarget) String() string {
	if len(t.Flows) == 0 {
		return "no flows"
	}
	return fmt.Sprintf("%d flows to %d ghost backends (e.g. %s)", t.Size(), len(t.Flows), (&FlowTarget{Flows: &t.Flows[0]}).String())
}

// Noun returns "flow", "flows".
func (t *CrowdTarget) Noun() (one, many string) { return "flow", "flows" }

// Entries yields each flow of each backend as a report lists it, with the
// command that deletes it.
func (t *CrowdTarget) Entries() iter.Seq2[any, string] {
	return func(yield func(any, string) bool) {
		for i := range t.Flows {
			for f := range t.Flows[i].All() {
				e := newFlowEntry(f)
				if !yield(e, e.Remove) {
					return
				}
			}
		}
	}
}

// Backends returns the crowd's ghost backends, sorted: a slice of its own.
func (t *CrowdTarget) Backends() []netip.Addr {
	out := make([]netip.Addr, len(t.Flows))
	for i := range t.Flows {
		out[i] = t.Flows[i].Backend().Unmap()
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

// Compare orders crowds by their first flow, as FlowTarget does.
func (t *CrowdTarget) Compare(other Target) int {
	o, ok := other.(*CrowdTarget)
	if !ok || len(t.Flows) == 0 || len(o.Flows) == 0 {
		return 0
	}
	return (&FlowTarget{Flows: &t.Flows[0]}).Compare(&FlowTarget{Flows: &o.Flows[0]})
}

// flowEntry is a flow as a report lists it, on one line.
type flowEntry struct {
	Flow    string `json:"flow"`
	Backend string `json:"backend"`
	State   string `json:"state,omitempty"`
	ID      uint32 `json:"conntrack_id,omitempty"`
	Timeout uint32 `json:"timeout_seconds"`
	Started string `json:"started,omitempty"`
	Seen    string `json:"seen,omitempty"`
	Remove  string `json:"remove"`
}

func newFlowEntry(f *snapshot.Flow) flowEntry {
	l := flowEntry{Flow: f.String(), Backend: f.Backend().String(), State: f.State, ID: f.ID, Timeout: f.Timeout, Remove: f.DeleteCommand()}
	if !f.Start.IsZero() {
		l.Started = f.Start.UTC().Format(time.RFC3339)
	}
	if !f.Seen.IsZero() {
		l.Seen = f.Seen.UTC().Format(time.RFC3339)
	}
	return l
}

// ReservationKind is the Kind of a ReservationTarget.
const ReservationKind = "hostlocal-reservation"

// ReservationTarget is a reservation host-local's store lacks: the file
// named by IP in Store (the network's directory as the node sees it),
// holding ContainerID, "\r\n" and IfName, for the pod that holds IP.
type ReservationTarget struct {
	Store       string
	IP          netip.Addr
	ContainerID string
	IfName      string
	Pod         snapshot.ObjectRef
	PodUID      string
}

// Kind returns ReservationKind.
func (t *ReservationTarget) Kind() string { return ReservationKind }

// Key identifies the reservation by its file and what it would hold.
func (t *ReservationTarget) Key() any {
	return [4]string{t.Store, t.IP.String(), t.ContainerID, t.IfName}
}

// Group is the IP.
func (t *ReservationTarget) Group() string { return t.IP.String() }

// Size is 1: one file.
func (t *ReservationTarget) Size() int { return 1 }

// String renders "10.244.2.3 in /run/cni-ipam-state/kindnet for container
// 5f1b… (eth0) of pod default/web-0".
func (t *ReservationTarget) String() string {
	return fmt.Sprintf("%s in %s for container %s (%s) of pod %s", t.IP, t.Store, t.ContainerID, t.IfName, t.Pod)
}

// Skipped names a rule that did not run and why.
type Skipped struct {
	Rule   string `json:"rule"`
	Reason string `json:"reason"`
	// NotApplicable is true when every source the rule lacked does not
	// exist here (unsupported: no Calico in this cluster, no host-local on
	// this node): nothing was missed.
	NotApplicable bool `json:"not_applicable,omitempty"`
	// NotGiven is true when what the rule lacked was not given to a scan
	// of saved evidence: it is not judged, and no source failed.
	NotGiven bool `json:"not_given,omitempty"`
	// Blind is true when the rule cannot see its ledger on this host at
	// all (Service NAT outside conntrack): not a failure, but no verdict.
	Blind bool `json:"blind,omitempty"`
	// Causes are the reasons one by one, one per source not ready
	// ("kube: not given: ..."): rules skipped for the same cause are
	// said together.
	Causes []string `json:"-"`
}

// AtLeast reports whether any finding has a severity of min or worse.
func AtLeast(fs []Finding, min Severity) bool {
	for _, f := range fs {
		if f.Severity >= min {
			return true
		}
	}
	return false
}

// Report is the outcome of one audit: what was found and how each source
// fared. It is what `scan -o json` prints.
type Report struct {
	// Version is ghostwatch's version that wrote the report.
	Version string `json:"version,omitempty"`
	// Node is the node whose ledgers were read; empty for a cluster-wide
	// pass.
	Node string `json:"node,omitempty"`
	// CapturedAt is when the evidence was captured: read live, or, for a
	// saved conntrack listing, when it was saved (--captured-at, else
	// the file's modification time).
	CapturedAt time.Time `json:"captured_at,omitzero"`
	// Summary counts the findings by rule and severity, worst first within
	// a rule.
	Summary  []RuleCount             `json:"summary"`
	Findings []Finding               `json:"findings"`
	Sources  []snapshot.SourceStatus `json:"sources"`
	// Skipped are the rules that did not run because a source they read
	// was not complete; they claim nothing.
	Skipped []Skipped `json:"skipped,omitempty"`
}

// RuleCount is how many findings a rule made of one severity.
type RuleCount struct {
	Rule     string   `json:"rule"`
	Severity Severity `json:"severity"`
	Findings int      `json:"findings"`
}

// Summarize counts fs by rule, in the order the rules first appear, and
// by severity, worst first.
func Summarize(fs []Finding) []RuleCount {
	out := []RuleCount{}
	at := map[string]int{}
	for _, f := range fs {
		i, ok := at[f.Rule+"\x00"+f.Severity.String()]
		if !ok {
			i = len(out)
			at[f.Rule+"\x00"+f.Severity.String()] = i
			out = append(out, RuleCount{Rule: f.Rule, Severity: f.Severity})
		}
		out[i].Findings++
	}
	first := map[string]int{}
	for i, c := range out {
		if _, ok := first[c.Rule]; !ok {
			first[c.Rule] = i
		}
	}
	slices.SortStableFunc(out, func(a, b RuleCount) int {
		if c := first[a.Rule] - first[b.Rule]; c != 0 {
			return c
		}
		return int(b.Severity) - int(a.Severity)
	})
	return out
}

// MemberKind is the Kind of a MemberTarget.
const MemberKind = "gossip-member"

// MemberTarget is a gone member of one gossip cluster, to be forced out:
// Name, listed at Addr:Port, in the cluster Cluster of System (consul,
// serf), as the view read through From saw it.
type MemberTarget struct {
	System, Cluster, From string
	Name                  string
	Addr                  netip.Addr
	Port                  uint16
	// Status is the member's state when judged: failed, dead or left.
	Status string
}

// Kind returns MemberKind.
func (t *MemberTarget) Kind() string { return MemberKind }

// Key identifies the member by its cluster, name and address.
func (t *MemberTarget) Key() any {
	return [5]string{t.System, t.Cluster, t.Name, t.Addr.String(), fmt.Sprint(t.Port)}
}

// Group is the address the ghost haunts.
func (t *MemberTarget) Group() string { return t.Addr.String() }

// Size is 1: one member.
func (t *MemberTarget) Size() int { return 1 }

// String renders "member node-abc-old (failed, 10.0.1.50:8301) of serf
// cluster shop/serf".
func (t *MemberTarget) String() string {
	c := t.Cluster
	if c == "" {
		c = t.From
	}
	return fmt.Sprintf("member %s (%s, %s) of %s cluster %s", t.Name, t.Status, netip.AddrPortFrom(t.Addr, t.Port), t.System, c)
}
