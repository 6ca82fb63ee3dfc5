package sink

import (
	"errors"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/record"

	"github.com/ghostwatch/ghostwatch/finding"
	"github.com/ghostwatch/ghostwatch/internal/text"
	"github.com/ghostwatch/ghostwatch/remedy"
	"github.com/ghostwatch/ghostwatch/rule"
)

// Event reasons no single remedy owns.
const (
	// ReasonBudgetExceeded: a batch was refused whole because it would
	// exceed the remedy's budget.
	ReasonBudgetExceeded = "RemedyBudgetExceeded"
	// ReasonCapExceeded: a ghost IP was refused because it had more targets
	// than the cap per ghost IP.
	ReasonCapExceeded = "RemedyCapExceeded"
)

// Events records a Kubernetes Event for every remedy action taken or
// refused, on each object the finding concerns. Pending and gone targets
// make none: nothing happened. A message is for people (kubectl describe
// prints it as it is): what it quotes of a name or an error is escaped
// (text.Escape).
type Events struct {
	Recorder record.EventRecorder
	// Node is where the actions are taken; every message starts with it.
	// "" for a cluster-wide process (the controller), whose messages say
	// where they act themselves.
	Node string
}

// Action records the Events of one action of the remedy of rule info.
func (e *Events) Action(info rule.Info, a remedy.Action) {
	if e == nil || e.Recorder == nil || info.Remedy == nil {
		return
	}
	typ, reason := Reason(info, a)
	if reason == "" {
		return
	}
	msg := a.Reason
	if e.Node != "" {
		msg = fmt.Sprintf("node %s: %s", e.Node, a.Reason)
	}
	msg = text.Escape(msg)
	for _, o := range a.Finding.Concerns {
		ref := &corev1.ObjectReference{Kind: o.Kind, APIVersion: "v1", Namespace: o.Namespace, Name: o.Name, UID: types.UID(o.UID)}
		e.Recorder.Event(ref, typ, reason, msg)
	}
}

// Finding records the Event of a finding on each object it concerns: a
// Warning (Normal for an info finding) whose reason is the rule's
// (EventReason) and whose message is the finding's. A program records it
// when the finding first appears, not at every pass.
func (e *Events) Finding(f finding.Finding) {
	if e == nil || e.Recorder == nil {
		return
	}
	typ := corev1.EventTypeWarning
	if f.Severity == finding.Info {
		typ = corev1.EventTypeNormal
	}
	msg := f.Message
	if e.Node != "" {
		msg = fmt.Sprintf("node %s: %s", e.Node, f.Message)
	}
	msg = text.Escape(msg)
	reason := EventReason(f.Rule)
	for _, o := range f.Concerns {
		ref := &corev1.ObjectReference{Kind: o.Kind, APIVersion: "v1", Namespace: o.Namespace, Name: o.Name, UID: types.UID(o.UID)}
		e.Recorder.Event(ref, typ, reason, msg)
	}
}

// EventReason is the Event reason of a rule's findings: its ID in
// CamelCase, "IP" and "IPAM" kept upper case ("duplicate-pod-ip" is
// "DuplicatePodIP").
func EventReason(id string) string {
	var b strings.Builder
	for _, w := range strings.Split(id, "-") {
		switch w {
		case "ip", "ipam":
			b.WriteString(strings.ToUpper(w))
		default:
			if w != "" {
				b.WriteString(strings.ToUpper(w[:1]) + w[1:])
			}
		}
	}
	return b.String()
}

// Reason returns the Event type and reason of an action, or "" when it
// deserves no Event.
func Reason(info rule.Info, a remedy.Action) (typ, reason string) {
	ev := info.Remedy.Events
	var be *remedy.BudgetError
	var ce *remedy.CapError
	switch {
	case a.Result == remedy.Done:
		return corev1.EventTypeNormal, ev.Done
	case a.Result == remedy.DryRun:
		return corev1.EventTypeNormal, ev.DryRun
	case a.Result == remedy.Refused && errors.As(a.Limit, &be):
		return corev1.EventTypeWarning, ReasonBudgetExceeded
	case a.Result == remedy.Refused && errors.As(a.Limit, &ce):
		return corev1.EventTypeWarning, ReasonCapExceeded
	case a.Result == remedy.Refused:
		return corev1.EventTypeWarning, ev.Refused
	case a.Result == remedy.Failed:
		return corev1.EventTypeWarning, ev.Failed
	}
	return "", ""
}
