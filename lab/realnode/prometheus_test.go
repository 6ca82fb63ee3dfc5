package realnode

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"

	"github.com/ghostwatch/ghostwatch/internal/poll"
	"github.com/ghostwatch/ghostwatch/internal/testenv"
	"github.com/ghostwatch/ghostwatch/lab/controlplane"
)

// monitoringValues turn on the chart's ServiceMonitors, scraped every
// second rather than every 30 (the lab's incidents last seconds), and its
// PrometheusRule.
const monitoringValues = "prometheus: {monitor: {enabled: true, interval: 1s}}\nprometheusRule: {enabled: true}\n"

var (
	serviceMonitors = schema.GroupVersionResource{Group: "monitoring.coreos.com", Version: "v1", Resource: "servicemonitors"}
	prometheusRules = schema.GroupVersionResource{Group: "monitoring.coreos.com", Version: "v1", Resource: "prometheusrules"}
)

// prometheus is Debian's Prometheus in node-1's network, configured from
// the chart's ServiceMonitors and PrometheusRule as the Prometheus
// Operator would, its discovery reading the API server.
type prometheus struct {
	l   *lab
	url string
}

// startPrometheus reads the ServiceMonitors and PrometheusRules of ns
// (the chart's, installed with monitoringValues), and runs Prometheus on
// them in node-1's network: each ServiceMonitor endpoint a job discovering
// its Service's EndpointSlices (the Operator's serviceDiscoveryRole
// EndpointSlice), each PrometheusRule's groups a rule file, evaluated every
// second. It returns once Prometheus is ready.
func (l *lab) startPrometheus(t *testing.T, ns string) *prometheus {
	t.Helper()
	binDir, err := FindPrometheus()
	if errors.Is(err, ErrNoPrometheus) {
		testenv.Unavailable(t, err.Error())
	}
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(binDir, Prometheus)
	ctx := context.Background()
	kubeconfig, err := l.cp.WriteKubeconfig(controlplane.UserAdmin)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(l.cp.Config(controlplane.UserAdmin))
	if err != nil {
		t.Fatal(err)
	}
	monitors, err := dyn.Resource(serviceMonitors).Namespace(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rules, err := dyn.Resource(prometheusRules).Namespace(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(monitors.Items) == 0 || len(rules.Items) == 0 {
		t.Fatalf("%d ServiceMonitors and %d PrometheusRules in %s: install the chart with monitoringValues", len(monitors.Items), len(rules.Items), ns)
	}
	dir := filepath.Join(l.cp.Dir, "prometheus")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	var ruleFiles []string
	for _, r := range rules.Items {
		groups, _, _ := unstructured.NestedSlice(r.Object, "spec", "groups")
		b, err := yaml.Marshal(map[string]any{"groups": groups})
		if err != nil {
			t.Fatal(err)
		}
		f := filepath.Join(dir, r.GetNamespace()+"-"+r.GetName()+".rules.yaml")
		if err := os.WriteFile(f, b, 0o600); err != nil {
			t.Fatal(err)
		}
		ruleFiles = append(ruleFiles, f)
	}
	var jobs []any
	for _, m := range monitors.Items {
		jobs = append(jobs, scrapeJobs(t, &m, kubeconfig)...)
	}
	config, err := yaml.Marshal(map[string]any{
		"global":         map[string]any{"scrape_interval": "30s", "evaluation_interval": "1s"},
		"rule_files":     ruleFiles,
		"scrape_configs": jobs,
	})
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(path, config, 0o600); err != nil {
		t.Fatal(err)
	}
	p := &prometheus{l: l, url: "http://127.0.0.1:9090"}
	proc, err := l.cp.Run("prometheus", nil, l.node.enter(bin, "--config.file="+path, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address=127.0.0.1:9090")...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(proc.Log())
			lines := strings.Split(strings.TrimSpace(string(b)), "\n")
			t.Logf("prometheus.yml:\n%s\nits log ends:\n%s", config, strings.Join(lines[max(0, len(lines)-30):], "\n"))
		}
	})
	if err := proc.WaitFor(ctx, time.Minute, "ready", func(context.Context) error {
		_, err := l.get(p.url + "/-/ready")
		return err
	}); err != nil {
		t.Fatal(err)
	}
	return p
}

// notLabelChar is what Prometheus replaces with "_" when it writes a
// Kubernetes label's name into a discovered target's meta labels.
var notLabelChar = regexp.MustCompile(`[^a-zA-Z0-9_]`)

// scrapeJobs are the scrape configurations of ServiceMonitor m's
// endpoints, as the Prometheus Operator writes them: named
// serviceMonitor/NAMESPACE/NAME/INDEX, discovering the EndpointSlices of
// m's namespace, keeping those of a Service m selects on the endpoint's
// port, and labelling each target with its namespace, Service, pod and
// job (the Service's name).
func scrapeJobs(t *testing.T, m *unstructured.Unstructured, kubeconfig string) []any {
	t.Helper()
	selector, _, _ := unstructured.NestedStringMap(m.Object, "spec", "selector", "matchLabels")
	endpoints, _, _ := unstructured.NestedSlice(m.Object, "spec", "endpoints")
	var keep []any
	for _, k := range slices.Sorted(maps.Keys(selector)) {
		name := notLabelChar.ReplaceAllString(k, "_")
		keep = append(keep, map[string]any{
			"action":        "keep",
			"source_labels": []string{"__meta_kubernetes_service_label_" + name, "__meta_kubernetes_service_labelpresent_" + name},
			"regex":         "(" + regexp.QuoteMeta(selector[k]) + ");true",
		})
	}
	var jobs []any
	for i, e := range endpoints {
		ep, _ := e.(map[string]any)
		port, _ := ep["port"].(string)
		job := map[string]any{
			"job_name": fmt.Sprintf("serviceMonitor/%s/%s/%d", m.GetNamespace(), m.GetName(), i),
			"kubernetes_sd_configs": []any{map[string]any{
				"role": "endpointslice", "kubeconfig_file": kubeconfig,
				"namespaces": map[string]any{"names": []string{m.GetNamespace()}},
			}},
			"relabel_configs": append(slices.Clone(keep),
				map[string]any{"action": "keep", "source_labels": []string{"__meta_kubernetes_endpointslice_port_name"}, "regex": port},
				map[string]any{"source_labels": []string{"__meta_kubernetes_namespace"}, "target_label": "namespace"},
				map[string]any{"source_labels": []string{"__meta_kubernetes_service_name"}, "target_label": "service"},
				map[string]any{"source_labels": []string{"__meta_kubernetes_pod_name"}, "target_label": "pod"},
				map[string]any{"source_labels": []string{"__meta_kubernetes_service_name"}, "target_label": "job"},
				map[string]any{"target_label": "endpoint", "replacement": port},
			),
		}
		if v, ok := ep["path"].(string); ok {
			job["metrics_path"] = v
		}
		if v, ok := ep["interval"].(string); ok {
			job["scrape_interval"] = v
		}
		jobs = append(jobs, job)
	}
	return jobs
}

// query is the instant vector of q: each sample's labels and value.
func (p *prometheus) query(q string) ([]sample, error) {
	body, err := p.l.get(p.url + "/api/v1/query?query=" + url.QueryEscape(q))
	if err != nil {
		return nil, err
	}
	var resp struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []struct {
				Metric map[string]string `json:"metric"`
				Value  [2]any            `json:"value"`
			} `json:"result"`
		} `json:"data"`
	}
	if err := json.Unmarshal([]byte(body), &resp); err != nil {
		return nil, fmt.Errorf("query %s: %w: %s", q, err, body)
	}
	if resp.Status != "success" {
		return nil, fmt.Errorf("query %s: %s", q, resp.Error)
	}
	var out []sample
	for _, r := range resp.Data.Result {
		v, _ := r.Value[1].(string)
		out = append(out, sample{r.Metric, v})
	}
	return out, nil
}

// sample is one sample of a query's answer.
type sample struct {
	labels map[string]string
	value  string
}

// alerts are the alerts Prometheus holds now, by name, each with its
// state (pending, firing).
func (p *prometheus) alerts() (map[string]string, error) {
	body, err := p.l.get(p.url + "/api/v1/alerts")
	if err != nil {
		return nil, err
	}
	var resp struct {
		Data struct {
			Alerts []struct {
				Labels map[string]string `json:"labels"`
				State  string            `json:"state"`
			} `json:"alerts"`
		} `json:"data"`
	}
	if err := json.Unmarshal([]byte(body), &resp); err != nil {
		return nil, fmt.Errorf("alerts: %w: %s", err, body)
	}
	out := map[string]string{}
	for _, a := range resp.Data.Alerts {
		if out[a.Labels["alertname"]] != "firing" {
			out[a.Labels["alertname"]] = a.State
		}
	}
	return out, nil
}

// waitAlert waits until alert name is in state (pending or firing).
func (p *prometheus) waitAlert(t *testing.T, name, state string, patience time.Duration) {
	t.Helper()
	poll.UntilNoted(t, patience, "alert "+name+" "+state+" in Prometheus", func() (bool, string) {
		a, err := p.alerts()
		if err != nil {
			return false, err.Error()
		}
		return a[name] == state, fmt.Sprintf("alerts %v", a)
	})
}

// waitTargetsUp waits until Prometheus scrapes n targets that match
// selector (a PromQL label matcher list), each up.
func (p *prometheus) waitTargetsUp(t *testing.T, selector string, n int) {
	t.Helper()
	poll.UntilNoted(t, poll.Patience, fmt.Sprintf("%d targets {%s} up", n, selector), func() (bool, string) {
		s, err := p.query("up{" + selector + "}")
		if err != nil {
			return false, err.Error()
		}
		up := 0
		var seen []string
		for _, x := range s {
			if x.value == "1" {
				up++
			}
			seen = append(seen, x.labels["job"]+" "+x.labels["instance"]+"="+x.value)
		}
		return up == n && len(s) == n, "up: " + strings.Join(seen, ", ")
	})
}
