package cli

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/ghostwatch/ghostwatch/finding"
	"github.com/ghostwatch/ghostwatch/lab"
)

// scan and lab name their outputs alike: an unknown -o gets the same
// answer from both, listing the same names, before anything runs.
func TestOutputNamesShared(t *testing.T) {
	for _, args := range [][]string{
		append(append([]string(nil), offline...), "-o", "xml"),
		{"lab", "conntrack-deploy", "-o", "xml"},
		{"lab", "conntrack-pool", "-o", "xml"},
	} {
		code, out, errOut := run(t, "", args...)
		if code != ExitError || out != "" || errOut != "ghostwatch: -o \"xml\": want text, json or yaml\n" {
			t.Errorf("ghostwatch %s: exit %d, stdout %q, stderr %q", strings.Join(args, " "), code, out, errOut)
		}
	}
}

// The shell offers the same -o names for scan and the lab.
func TestOutputCompletionsShared(t *testing.T) {
	for _, cmd := range [][]string{{"scan"}, {"lab", "conntrack-deploy"}, {"lab", "conntrack-pool"}} {
		code, out, errOut := run(t, "", append(append([]string{"__complete"}, cmd...), "-o", "")...)
		names, _, _ := strings.Cut(out, ":")
		if code != ExitOK || names != "text\njson\nyaml\n" {
			t.Errorf("completing %s -o: exit %d, stdout %q, stderr %q; want text, json, yaml", strings.Join(cmd, " "), code, out, errOut)
		}
	}
}

// scan -o text is the table, as -o table (still accepted) and the default.
func TestScanTextIsTheTable(t *testing.T) {
	_, def, _ := run(t, "", offline...)
	for _, o := range []string{"text", "table"} {
		code, out, errOut := run(t, "", append(append([]string(nil), offline...), "-o", o)...)
		if code != ExitFindings || out != def {
			t.Errorf("-o %s: exit %d, stderr %q, stdout differs from the default:\n%s", o, code, errOut, out)
		}
	}
	if !strings.Contains(def, "stale-nat-flow: 2 findings") {
		t.Errorf("default output is not the table:\n%s", def)
	}
}

// lab -o yaml prints the object -o json prints.
func TestLabResultYAMLIsTheJSON(t *testing.T) {
	res := &lab.Result{Scenario: "conntrack-deploy", Runs: []lab.Run{{
		Agent: true, ErrorWindowSeconds: 0.25, FailedRequests: 3, Recovered: true,
		Findings: []finding.Finding{{Rule: "stale-nat-flow", Severity: finding.Critical, Message: "a <ghost> & more",
			Subject: finding.Subject{IP: "10.244.1.100", Flow: "tcp 203.0.113.10:40000 -> 192.168.50.1:30080"}}},
	}}}
	var js, ys bytes.Buffer
	if err := writeResult(&js, "json", res); err != nil {
		t.Fatal(err)
	}
	if err := writeResult(&ys, "yaml", res); err != nil {
		t.Fatal(err)
	}
	if strings.HasPrefix(strings.TrimSpace(ys.String()), "{") {
		t.Fatalf("-o yaml printed JSON:\n%s", ys.String())
	}
	fromYAML, err := yaml.YAMLToJSON(ys.Bytes())
	if err != nil {
		t.Fatalf("-o yaml is not YAML: %v\n%s", err, ys.String())
	}
	var a, b any
	if err := json.Unmarshal(js.Bytes(), &a); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(fromYAML, &b); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a, b) {
		t.Errorf("yaml and json differ:\njson: %s\nyaml: %s", js.String(), ys.String())
	}
	var text bytes.Buffer
	if err := writeResult(&text, "text", res); err != nil || text.Len() != 0 {
		t.Errorf("-o text printed %q, %v after the timeline", text.String(), err)
	}
}
