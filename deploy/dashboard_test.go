package deploy

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ghostwatch/ghostwatch/agent"
	"github.com/ghostwatch/ghostwatch/cli"
	"github.com/ghostwatch/ghostwatch/controller"
	"github.com/ghostwatch/ghostwatch/internal/testenv"
	"github.com/ghostwatch/ghostwatch/rule"
)

// dashboard is what the test reads of the Grafana dashboard.
type dashboard struct {
	Title  string
	UID    string
	Panels []struct {
		ID      int
		Title   string
		Targets []struct{ Expr string }
	}
}

// exportedMetrics returns the metric names the controller registers, and
// those the agent or the controller does.
func exportedMetrics(t *testing.T) (byController, byEither map[string]bool) {
	t.Helper()
	creg, areg := prometheus.NewRegistry(), prometheus.NewRegistry()
	rules, _ := cli.ControllerRules(rule.All(rule.Config{}))
	controller.NewMetrics(creg, rules)
	agent.NewMetrics(areg, rule.All(rule.Config{}))
	byController, byEither = metricNames(creg), metricNames(areg)
	for m := range byController {
		byEither[m] = true
	}
	return byController, byEither
}

// metricNames are the names of the metrics reg describes.
func metricNames(reg *prometheus.Registry) map[string]bool {
	ch := make(chan *prometheus.Desc, 100)
	go func() {
		reg.Describe(ch)
		close(ch)
	}()
	out := map[string]bool{}
	name := regexp.MustCompile(`fqName: "([a-z_]+)"`)
	for d := range ch {
		if m := name.FindStringSubmatch(d.String()); m != nil {
			out[m[1]] = true
		}
	}
	return out
}

// Every panel of the dashboard queries, and every query names only metrics
// ghostwatch exports, and parses: promtool checks each as a recording
// rule's expression.
func TestDashboardQueriesParseAndNameExportedMetrics(t *testing.T) {
	b, err := os.ReadFile("dashboards/ghostwatch.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatal(err)
	}
	if d.UID == "" || len(d.Panels) < 8 {
		t.Fatalf("dashboard %q: uid %q, %d panels", d.Title, d.UID, len(d.Panels))
	}
	_, exported := exportedMetrics(t)
	used := regexp.MustCompile(`ghostwatch_[a-z_]+`)
	var rules strings.Builder
	rules.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	n := 0
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("panel %q queries nothing", p.Title)
		}
		for _, q := range p.Targets {
			ms := used.FindAllString(q.Expr, -1)
			if len(ms) == 0 {
				t.Errorf("panel %q: %q names no ghostwatch metric", p.Title, q.Expr)
			}
			for _, m := range ms {
				if !exported[m] {
					t.Errorf("panel %q uses %s, which ghostwatch does not export", p.Title, m)
				}
			}
			n++
			fmt.Fprintf(&rules, "      - record: dashboard:query:%d\n        expr: %q\n", n, q.Expr)
		}
	}
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		testenv.Unavailable(t, "promtool is not installed (Debian: apt-get install prometheus; scripts/test.sh does it)")
		return
	}
	file := filepath.Join(t.TempDir(), "queries.rules.yaml")
	if err := os.WriteFile(file, []byte(rules.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(promtool, "check", "rules", file).CombinedOutput(); err != nil {
		t.Errorf("a dashboard query does not parse: %v\n%s", err, out)
	}
}
