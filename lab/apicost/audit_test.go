package apicost

import (
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/ghostwatch/ghostwatch/lab/controlplane"
	"github.com/ghostwatch/ghostwatch/source/kube/live"
)

// testdata/audit.log holds lines of a real run's audit log: the harness's
// own writes (admin), kube-proxy's and the agent's lists and watches, and a
// watch of kube-proxy's twice (when its answer started, and when it ended).
func TestParseAudit(t *testing.T) {
	f, err := os.Open("testdata/audit.log")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	reqs, err := ParseAudit(f, controlplane.UserKubeProxy, controlplane.UserAgent)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, r := range reqs {
		got = append(got, r.User+": "+r.Key())
	}
	want := []string{
		"system:kube-proxy: list nodes fieldSelector=metadata.name=node-0",
		"system:kube-proxy: watch nodes fieldSelector=metadata.name=node-0",
		"system:kube-proxy: create events.events.k8s.io",
		"system:serviceaccount:ghostwatch:ghostwatch-agent: list nodes",
		"system:serviceaccount:ghostwatch:ghostwatch-agent: list pods",
		"system:serviceaccount:ghostwatch:ghostwatch-agent: watch pods",
	}
	if !slices.Equal(got, want) {
		t.Errorf("requests:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
	w := reqs[1]
	if w.Name != "node-0" || w.Code != 200 || !strings.Contains(w.URI, "watch=true") || w.UserAgent == "" ||
		!w.Received.Equal(time.Date(2026, 11, 26, 8, 28, 47, 202266000, time.UTC)) {
		t.Errorf("kube-proxy's watch of its node: %+v", w)
	}

	// The harness's own requests, a path among them, when asked for.
	if _, err := f.Seek(0, 0); err != nil {
		t.Fatal(err)
	}
	admin, err := ParseAudit(f, controlplane.UserAdmin)
	if err != nil {
		t.Fatal(err)
	}
	got = nil
	for _, r := range admin {
		got = append(got, r.Key())
	}
	if want := []string{"get /readyz", "create pods", "update pods/status"}; !slices.Equal(got, want) {
		t.Errorf("admin's requests %q, want %q", got, want)
	}

	for _, bad := range []string{"not json\n", `{"kind":"Event","verb":"get"}` + "\n"} {
		if _, err := ParseAudit(strings.NewReader(bad), controlplane.UserAdmin); err == nil || !strings.Contains(err.Error(), "line 1") {
			t.Errorf("%q: %v, want an error naming line 1", bad, err)
		}
	}
}

func TestScopeViolations(t *testing.T) {
	req := func(verb, group, resource, fieldSelector string) AuditRequest {
		return AuditRequest{Request: Request{Verb: verb, APIGroup: group, Resource: resource, FieldSelector: fieldSelector}}
	}
	in := []AuditRequest{
		req("list", "", "pods", ""),                                               // every pod
		req("watch", "", "pods", ""),                                              // every pod
		req("list", "", "pods", "spec.nodeName=node-0"),                           // its own
		req("watch", "", "pods", "spec.nodeName=node-0"),                          // its own
		req("watch", "", "pods", "spec.nodeName!=node-0"),                         // every other node's
		req("list", "", "pods", "status.podIP=10.244.0.7"),                        // by address
		req("watch", "", "pods", "status.podIP=10.244.0.7"),                       // a watch by address is no look-up
		req("list", "", "pods", "status.phase=Running"),                           // every running pod
		req("list", "", "nodes", ""),                                              // every node
		req("watch", "", "nodes", "metadata.name=node-0"),                         // its own
		req("list", "", "nodes", "metadata.name=node-0,spec.unschedulable=false"), // its own
		req("get", "", "nodes", ""),                                               // a get names one node
		req("list", "", "services", ""),                                           // as kube-proxy
		req("list", "discovery.k8s.io", "endpointslices", ""),                     // as kube-proxy
		req("list", "metrics.k8s.io", "pods", ""),                                 // another group's pods
	}
	page := req("list", "", "pods", "")
	page.UserAgent, page.URI = live.LookupUserAgent, "/api/v1/pods?limit=500"
	other := page
	other.UserAgent = "kubectl"
	in = append(in, page, other) // a page of the look-ups' list of every pod; another's
	var got []string
	for _, r := range ScopeViolations(in) {
		got = append(got, r.Key())
	}
	want := []string{
		"list pods", "watch pods", "watch pods fieldSelector=spec.nodeName!=node-0",
		"watch pods fieldSelector=status.podIP=<ip>", "list pods fieldSelector=status.phase=Running", "list nodes", "list pods",
	}
	if !slices.Equal(got, want) {
		t.Errorf("violations %q, want %q", got, want)
	}
}
