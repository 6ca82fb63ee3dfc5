package sink

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
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
