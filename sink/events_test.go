package sink

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/ghostwatch/ghostwatch/finding"
)

// fakeRecorder keeps Events as one line each.
type fakeRecorder struct{ events []string }

func (r *fakeRecorder) Event(obj runtime.Object, typ, reason, msg string) {
	ref := obj.(*corev1.ObjectReference)
	r.events = append(r.events, fmt.Sprintf("%s %s/%s %s %s %s", ref.Kind, ref.Namespace, ref.Name, typ, reason, msg))
}

func (r *fakeRecorder) Eventf(obj runtime.Object, typ, reason, format string, args ...any) {
	r.Event(obj, typ, reason, fmt.Sprintf(format, args...))
}

func (r *fakeRecorder) AnnotatedEventf(obj runtime.Object, _ map[string]string, typ, reason, format string, args ...any) {
	r.Eventf(obj, typ, reason, format, args...)
}

func TestEventReason(t *testing.T) {
	for id, want := range map[string]string{
		"duplicate-pod-ip":    "DuplicatePodIP",
		"ipam-misbooked":      "IPAMMisbooked",
		"stale-nodename-file": "StaleNodenameFile",
	} {
		if got := EventReason(id); got != want {
			t.Errorf("EventReason(%q) = %q, want %q", id, got, want)
		}
	}
}

// A finding's Event lands on every object it concerns, Normal for an info
// finding, the node named first by an agent.
func TestFindingEvents(t *testing.T) {
	rec := &fakeRecorder{}
	f := finding.Finding{Rule: "duplicate-pod-ip", Severity: finding.Critical, Message: "two pods hold 10.244.1.5",
		Concerns: []finding.ObjectRef{{Kind: "Pod", Namespace: "ns", Name: "a"}, {Kind: "Pod", Namespace: "ns", Name: "b"}}}
	(&Events{Recorder: rec}).Finding(f)
	f.Severity = finding.Info
	(&Events{Recorder: rec, Node: "node-a"}).Finding(f)
	var none *Events
	none.Finding(f)
	want := []string{
		"Pod ns/a Warning DuplicatePodIP two pods hold 10.244.1.5",
		"Pod ns/b Warning DuplicatePodIP two pods hold 10.244.1.5",
		"Pod ns/a Normal DuplicatePodIP node node-a: two pods hold 10.244.1.5",
		"Pod ns/b Normal DuplicatePodIP node node-a: two pods hold 10.244.1.5",
	}
	if !slices.Equal(rec.events, want) {
		t.Errorf("events:\n%s\nwant:\n%s", strings.Join(rec.events, "\n"), strings.Join(want, "\n"))
	}
}
