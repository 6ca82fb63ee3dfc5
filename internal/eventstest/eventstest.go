// Package eventstest records the Events a component emits, for tests: a
// record.EventRecorder that never blocks, keeping each Event as one line,
// "Kind Type namespace/name Reason message".
package eventstest

import (
	"fmt"
	"strings"
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// Recorder records Events. The zero value is ready.
type Recorder struct {
	mu   sync.Mutex
	list []string
}

// Event records one Event on obj, an *corev1.ObjectReference as the
// components pass.
func (r *Recorder) Event(obj runtime.Object, typ, reason, msg string) {
	line := fmt.Sprintf("%T %s %s %s", obj, typ, reason, msg)
	if ref, ok := obj.(*corev1.ObjectReference); ok {
		line = fmt.Sprintf("%s %s %s/%s %s %s", ref.Kind, typ, ref.Namespace, ref.Name, reason, msg)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.list = append(r.list, line)
}

// Eventf records an Event with a formatted message.
func (r *Recorder) Eventf(obj runtime.Object, typ, reason, format string, args ...any) {
	r.Event(obj, typ, reason, fmt.Sprintf(format, args...))
}

// AnnotatedEventf records an Event; the annotations are dropped.
func (r *Recorder) AnnotatedEventf(obj runtime.Object, _ map[string]string, typ, reason, format string, args ...any) {
	r.Eventf(obj, typ, reason, format, args...)
}

// All returns every Event recorded, in order.
func (r *Recorder) All() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.list...)
}

// With returns the Events whose line contains s.
func (r *Recorder) With(s string) []string {
	var out []string
	for _, ev := range r.All() {
		if strings.Contains(ev, s) {
			out = append(out, ev)
		}
	}
	return out
}
