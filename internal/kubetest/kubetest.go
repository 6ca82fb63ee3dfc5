// Package kubetest builds the Kubernetes API objects that the tests of
// source/kube and of the packages under it share. It is for tests only.
package kubetest

import (
	"time"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// Created and Started are FullPod's creation and start times; it has been
// deleting since Started.
var (
	Created = time.Date(2026, 11, 22, 14, 0, 5, 0, time.UTC)
	Started = Created.Add(3 * time.Second)
)

// FullPod returns pod web/api-1 (uid u1) as the API server serves it, with
// all that trimming must drop: labels, annotations (the gossip ones and
// kubectl's last-applied-configuration), owner references, managed
// fields, containers, volumes, conditions and container statuses. It is
// running on worker-1 in the host's network at 10.244.1.5, and being
// deleted.
func FullPod() *corev1.Pod {
	return &corev1.Pod{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"},
		ObjectMeta: metav1.ObjectMeta{
			UID: "u1", Namespace: "web", Name: "api-1", ResourceVersion: "4711",
			CreationTimestamp: metav1.NewTime(Created), DeletionTimestamp: ptr.To(metav1.NewTime(Started)),
			Labels: map[string]string{"app": "api"},
			Annotations: map[string]string{"kubectl.kubernetes.io/last-applied-configuration": "{...}",
				"ghostwatch.io/gossip": "consul", "ghostwatch.io/gossip-port": "8500"},
			OwnerReferences: []metav1.OwnerReference{{Kind: "ReplicaSet", Name: "api-7c9d"}},
			ManagedFields:   []metav1.ManagedFieldsEntry{{Manager: "kubelet"}},
		},
		Spec: corev1.PodSpec{
			NodeName: "worker-1", HostNetwork: true,
			Containers: []corev1.Container{{Name: "api", Image: "api:v2",
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}}}},
			Volumes: []corev1.Volume{{Name: "tmp"}},
		},
		Status: corev1.PodStatus{
			Phase: corev1.PodRunning, PodIP: "10.244.1.5", PodIPs: []corev1.PodIP{{IP: "10.244.1.5"}},
			StartTime:         ptr.To(metav1.NewTime(Started)),
			Conditions:        []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
			ContainerStatuses: []corev1.ContainerStatus{{Name: "api", Ready: true}},
		},
	}
}

// ServiceCIDR returns the ServiceCIDR called name, of cidrs.
func ServiceCIDR(name string, cidrs ...string) *networkingv1.ServiceCIDR {
	return &networkingv1.ServiceCIDR{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: networkingv1.ServiceCIDRSpec{CIDRs: cidrs}}
}
