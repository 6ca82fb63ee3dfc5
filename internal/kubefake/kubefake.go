// Package kubefake is client-go's fake clientset with the field selectors
// ghostwatch sends honoured as the API server honours them: a Pod's
// spec.nodeName and status.podIP (its first address only), and every
// object's metadata.name and metadata.namespace. client-go's fake ignores
// field selectors, so a test of what a node agent asks for, or of the pods
// it looks up, would otherwise see the whole cluster. It is for tests only.
package kubefake

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
)

// NewClientset returns a fake clientset holding objs whose lists and
// watches select by field as the API server does.
func NewClientset(objs ...runtime.Object) *fake.Clientset {
	c := fake.NewClientset(objs...)
	tracker := c.Tracker()
	c.PrependReactor("list", "*", func(action clienttesting.Action) (bool, runtime.Object, error) {
		la, ok := action.(clienttesting.ListActionImpl)
		if !ok || la.ListRestrictions.Fields == nil || la.ListRestrictions.Fields.Empty() {
			return false, nil, nil
		}
		obj, err := tracker.List(la.GetResource(), la.GetKind(), la.GetNamespace())
		if err != nil {
			return true, nil, err
		}
		items, err := meta.ExtractList(obj)
		if err != nil {
			return true, nil, err
		}
		var kept []runtime.Object
		for _, it := range items {
			if la.ListRestrictions.Fields.Matches(Fields(it)) {
				kept = append(kept, it)
			}
		}
		if err := meta.SetList(obj, kept); err != nil {
			return true, nil, err
		}
		return true, obj, nil
	})
	c.PrependWatchReactor("*", func(action clienttesting.Action) (bool, watch.Interface, error) {
		wa, ok := action.(clienttesting.WatchActionImpl)
		if !ok || wa.WatchRestrictions.Fields == nil || wa.WatchRestrictions.Fields.Empty() {
			return false, nil, nil
		}
		sel := wa.WatchRestrictions.Fields
		w, err := tracker.Watch(wa.GetResource(), wa.GetNamespace(), metav1.ListOptions{})
		if err != nil {
			return true, nil, err
		}
		return true, watch.Filter(w, func(e watch.Event) (watch.Event, bool) {
			return e, e.Object == nil || sel.Matches(Fields(e.Object))
		}), nil
	})
	return c
}

// Fields returns the fields of obj a field selector can name.
func Fields(obj runtime.Object) fields.Set {
	set := fields.Set{}
	if m, err := meta.Accessor(obj); err == nil {
		set["metadata.name"], set["metadata.namespace"] = m.GetName(), m.GetNamespace()
	}
	if p, ok := obj.(*corev1.Pod); ok {
		set["spec.nodeName"] = p.Spec.NodeName
		ip := ""
		if len(p.Status.PodIPs) > 0 {
			ip = p.Status.PodIPs[0].IP
		} else {
			ip = p.Status.PodIP
		}
		set["status.podIP"] = ip
		set["status.phase"] = string(p.Status.Phase)
	}
	return set
}
