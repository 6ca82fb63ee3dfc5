package cli

import (
	"bytes"
	"fmt"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/cli-runtime/pkg/genericiooptions"

	"github.com/ghostwatch/ghostwatch/agent"
	"github.com/ghostwatch/ghostwatch/controller"
	"github.com/ghostwatch/ghostwatch/rule"
	"github.com/ghostwatch/ghostwatch/sink"
)

// reference writes docs/reference.md: every metric the agent and the
// controller export with its labels, every Event reason ghostwatch
// writes, and every flag of its commands with its default, from the
// registries, the rules' Info and the commands themselves.
func reference() []byte {
	var b bytes.Buffer
	b.WriteString("# Reference\n\nGenerated from the code by `go test ./cli -run TestReferenceIsCurrent -update`; a test fails when\nit drifts. What each rule judges is in [the runbooks](runbooks/) and `ghostwatch scan --help`.\n")

	b.WriteString("\n## Metrics\n\n| metric | type | labels | exported by | help |\n|---|---|---|---|---|\n")
	type metric struct{ name, typ, labels, help string }
	metrics := map[string]*metric{}
	by := map[string][]string{}
	desc := regexp.MustCompile(`fqName: "([^"]+)", help: "((?:[^"\\]|\\.)*)", constLabels: \{[^}]*\}, variableLabels: \{([^}]*)\}`)
	for _, prog := range []string{"agent", "controller"} {
		reg := prometheus.NewRegistry()
		if prog == "agent" {
			agent.NewMetrics(reg, agentRules(rule.Config{}))
		} else {
			rules, _ := ControllerRules(rule.All(rule.Config{}))
			controller.NewMetrics(reg, rules)
		}
		ch := make(chan *prometheus.Desc, 200)
		go func() {
			reg.Describe(ch)
			close(ch)
		}()
		for d := range ch {
			m := desc.FindStringSubmatch(d.String())
			if m == nil {
				continue
			}
			if metrics[m[1]] == nil {
				typ := "gauge"
				switch {
				case strings.HasSuffix(m[1], "_total"):
					typ = "counter"
				case strings.HasPrefix(m[1], "go_") || strings.HasPrefix(m[1], "process_"):
					continue
				}
				metrics[m[1]] = &metric{name: m[1], typ: typ, labels: strings.ReplaceAll(m[3], ",", ", "), help: strings.ReplaceAll(m[2], `\"`, `"`)}
			}
			if !slices.Contains(by[m[1]], prog) {
				by[m[1]] = append(by[m[1]], prog)
			}
		}
	}
	names := make([]string, 0, len(metrics))
	for n := range metrics {
		names = append(names, n)
	}
	slices.Sort(names)
	for _, n := range names {
		m := metrics[n]
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s |\n", m.name, m.typ, orDash(m.labels), strings.Join(by[n], ", "), strings.ReplaceAll(m.help, "|", "\\|"))
	}

	b.WriteString("\n## Events\n\nEach finding is a Warning Event (Normal for info findings) on every object it concerns, when it\nfirst appears; each remedy action, or refusal, an Event on the objects its finding concerns.\n\n| reason | type | when |\n|---|---|---|\n")
	for _, r := range rule.All(rule.Config{}) {
		info := r.Info()
		fmt.Fprintf(&b, "| `%s` | Warning (Normal for info) | a %s finding first appears |\n", sink.EventReason(info.ID), info.ID)
	}
	for _, r := range rule.All(rule.Config{}) {
		info := r.Info()
		if info.Remedy == nil {
			continue
		}
		ev := info.Remedy.Events
		for _, e := range []struct{ reason, typ, when string }{
			{ev.Done, "Normal", "done"}, {ev.DryRun, "Normal", "would be done (--dry-run)"},
			{ev.Refused, "Warning", "refused by a safety check (grace, re-check)"}, {ev.Failed, "Warning", "failed"},
		} {
			if e.reason != "" {
				fmt.Fprintf(&b, "| `%s` | %s | %s's remedy (%s): %s |\n", e.reason, e.typ, info.ID, info.Remedy.ID, e.when)
			}
		}
	}
	fmt.Fprintf(&b, "| `%s` | Warning | a remedy's batch exceeds --budget |\n", sink.ReasonBudgetExceeded)
	fmt.Fprintf(&b, "| `%s` | Warning | a ghost IP has more flows due than --max-flows-per-backend |\n", sink.ReasonCapExceeded)

	b.WriteString("\n## Flags\n")
	root := NewRootCommand(genericiooptions.IOStreams{In: strings.NewReader(""), Out: &bytes.Buffer{}, ErrOut: &bytes.Buffer{}})
	for _, name := range []string{"agent", "controller", "scan", "ip", "collect", "analyze"} {
		cmd, _, err := root.Find([]string{name})
		if err != nil || cmd == root {
			fmt.Fprintf(&b, "\n(no %s command)\n", name)
			continue
		}
		flagTable(&b, cmd)
	}
	return b.Bytes()
}

func flagTable(b *bytes.Buffer, cmd *cobra.Command) {
	fmt.Fprintf(b, "\n### ghostwatch %s\n\n| flag | default | |\n|---|---|---|\n", cmd.Name())
	cmd.NonInheritedFlags().VisitAll(func(f *pflag.Flag) {
		if f.Hidden {
			return
		}
		_, usage := pflag.UnquoteUsage(f)
		def := f.DefValue
		if home, err := os.UserHomeDir(); err == nil && home != "" && home != "/" {
			// The same page on every machine.
			def = strings.ReplaceAll(def, home, "$HOME")
		}
		if def == "" || def == "[]" {
			def = "-"
		} else {
			def = "`" + def + "`"
		}
		fmt.Fprintf(b, "| `--%s` | %s | %s |\n", f.Name, def, strings.ReplaceAll(strings.ReplaceAll(usage, "|", "\\|"), "\n", " "))
	})
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// controllerDoc writes docs/controller.md: what `ghostwatch controller
// --help` says, its rules with what each reads and its remedies from the
// rules' Info, and its flags.
func controllerDoc() []byte {
	var b bytes.Buffer
	root := NewRootCommand(genericiooptions.IOStreams{In: strings.NewReader(""), Out: &bytes.Buffer{}, ErrOut: &bytes.Buffer{}})
	cmd, _, err := root.Find([]string{"controller"})
	if err != nil {
		return []byte(err.Error())
	}
	b.WriteString("# The controller\n\nGenerated from `ghostwatch controller --help` and the rules' own descriptions by\n`go test ./cli -run TestControllerDocIsCurrent -update`; a test fails when it drifts. Metrics and\nEvent reasons: [reference.md](reference.md). Install: the Helm chart\n([deploy/helm/ghostwatch](../deploy/helm/ghostwatch)) or `kubectl apply -k deploy/namespace && kubectl apply -k deploy/controller`.\n\n")
	b.WriteString(cmd.Short + ".\n\n```\n" + cmd.Long + "\n```\n\n## Examples\n\n```sh\n" + cmd.Example + "\n```\n\n## Rules\n\n| rule | reads | finds | runbook |\n|---|---|---|---|\n")
	rules, _ := ControllerRules(rule.All(rule.Config{}))
	for _, r := range rules {
		info := r.Info()
		fmt.Fprintf(&b, "| `%s` | %s | %s | [%s](../%s) |\n", info.ID, strings.Join(info.Reads(), ", "), strings.ReplaceAll(info.Summary, "|", "\\|"), info.Runbook, info.Runbook)
	}
	b.WriteString("\n## Remedies\n\n| remedy | of rule | what it does |\n|---|---|---|\n")
	for _, r := range rules {
		info := r.Info()
		if info.Remedy != nil && slices.Contains(rule.RemedyIDs(controllerRemedies(rules)), info.Remedy.ID) {
			fmt.Fprintf(&b, "| `%s` | `%s` | %s |\n", info.Remedy.ID, info.ID, strings.ReplaceAll(info.Fix, "|", "\\|"))
		}
	}
	b.WriteString("\nWhat the remedy did under faults (the API server down, hung or restarted, a watch gap,\nskewed clocks, a shared address, a leader killed mid-budget), on the real API server:\n[faults.md](faults.md) (what ghostwatch survives).\n")
	b.WriteString("\n## Flags\n")
	flagTable(&b, cmd)
	return b.Bytes()
}

// docs/controller.md is what the code says today.
func TestControllerDocIsCurrent(t *testing.T) {
	got := controllerDoc()
	if *update {
		if err := os.WriteFile("../docs/controller.md", got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile("../docs/controller.md")
	if err != nil {
		t.Fatalf("%v (run go test ./cli -run TestControllerDocIsCurrent -update)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("docs/controller.md drifted from the code: run go test ./cli -run TestControllerDocIsCurrent -update")
	}
}

// docs/reference.md is what the code says today.
func TestReferenceIsCurrent(t *testing.T) {
	got := reference()
	if *update {
		if err := os.WriteFile("../docs/reference.md", got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile("../docs/reference.md")
	if err != nil {
		t.Fatalf("%v (run go test ./cli -run TestReferenceIsCurrent -update)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("docs/reference.md drifted from the code: run go test ./cli -run TestReferenceIsCurrent -update")
	}
}
