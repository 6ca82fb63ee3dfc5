package agent

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/ghostwatch/ghostwatch/internal/kubefake"
	"github.com/ghostwatch/ghostwatch/internal/poll"
	"github.com/ghostwatch/ghostwatch/rule"
	"github.com/ghostwatch/ghostwatch/source/kube/live"
)

// The agent watches its own node's pods only: a pod elsewhere that comes
// to hold a stale flow's backend address, with no EndpointSlice mentioning
// it, reaches no watch. The agent still finds it, within the longest time
// an answer of who holds an address is kept (here shortened to 300ms; the
// default is live.DefaultMaxHolderTTL): the flow, which a Service with a
// selector could never have sent to a pod of another namespace, is then
// misdelivered, not stale.
func TestAHolderElsewhereIsFoundWithoutAWatchedChange(t *testing.T) {
	objs := cluster()
	for _, o := range objs {
		if svc, ok := o.(*corev1.Service); ok {
			svc.Spec.Selector = map[string]string{"app": "svc"}
		}
	}
	client := kubefake.NewClientset(objs...)
	holders := &live.Holders{Client: client, TTL: 100 * time.Millisecond, MaxTTL: 300 * time.Millisecond}
	h := startWith(t, client, reportOnly, func(h *harness, c *Config) {
		c.Now, h.ct.Now, h.kube.Now = nil, nil, nil
		h.kube.Informers = live.NewInformers(client, live.InformerOptions{Node: "node-a", Silence: 24 * time.Hour})
		h.kube.Holders = holders
		// Only the holders' answers running out may bring the finding
		// to light: no scheduled audit in the test's time.
		c.AuditInterval = time.Hour
	}, staleFlow())
	findings := func(id, sev string) float64 {
		return testutil.ToFloat64(h.agent.cfg.Metrics.Findings.WithLabelValues(id, sev))
	}
	poll.Until(t, patience, "the stale flow's finding", func() bool { return findings(rule.StaleNATFlowID, "warning") == 1 })
	if n := holders.Lookups(); n == 0 {
		t.Fatal("the stale flow's backend was judged without asking who holds it")
	}
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "other", Name: "newcomer", UID: "u9"},
		Spec:   corev1.PodSpec{NodeName: "node-b"},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.244.0.9", PodIPs: []corev1.PodIP{{IP: "10.244.0.9"}}}}
	created, asked := time.Now(), holders.Lookups()
	if _, err := client.CoreV1().Pods("other").Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	poll.Until(t, patience, "the misdelivered flow's finding", func() bool { return findings(rule.MisdeliveredFlowID, "critical") == 1 })
	// Found by asking again once the answer "no holder" was too old, not
	// by waiting for something else: how soon (the longest answer time,
	// 300ms, and an audit) is logged, not held to a bound a busy machine
	// breaks.
	if holders.Lookups() <= asked {
		t.Errorf("found without asking again who holds the backend")
	}
	t.Logf("found %s after the pod was created", time.Since(created).Round(time.Millisecond))
	if findings(rule.StaleNATFlowID, "warning") != 0 {
		t.Error("the flow is still reported stale")
	}
	if _, ok := holders.Due(netip.MustParseAddr("10.244.0.9")); !ok {
		t.Error("the backend's answer is not kept")
	}
}
