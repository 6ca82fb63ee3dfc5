package sink

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	yaml3 "go.yaml.in/yaml/v3"
	"sigs.k8s.io/yaml"

	"github.com/ghostwatch/ghostwatch/finding"
	"github.com/ghostwatch/ghostwatch/rule"
	"github.com/ghostwatch/ghostwatch/snapshot"
)

var update = flag.Bool("update", false, "rewrite the golden files")

func sample() *finding.Report {
	return &finding.Report{
		Findings: []finding.Finding{
			{Rule: rule.MisdeliveredFlowID, Severity: finding.Critical, Message: "tcp flow to ClusterIP db/postgres is delivered to 10.244.3.47:5432, now held by another pod",
				Subject:  finding.Subject{IP: "10.244.3.47", Service: "db/postgres", Namespace: "db", Pod: "payments/ledger", Node: "node-a", Flow: "tcp 10.244.1.50:45679 -> 10.96.100.50:5432"},
				Evidence: map[string]any{"backend": "10.244.3.47:5432", "proof": "flow started before the holder existed"}},
			{Rule: rule.StaleNATFlowID, Severity: finding.Warning, Message: "tcp flow to NodePort web/api still goes to 10.244.1.100:8080, which is no longer a backend and which no pod holds",
				Subject:  finding.Subject{IP: "10.244.1.100", Service: "web/api", Namespace: "web", Node: "node-a", Flow: "tcp 203.0.113.10:40000 -> 192.168.50.1:30080"},
				Evidence: map[string]any{"backend": "10.244.1.100:8080", "state": "FIN_WAIT", "timeout_seconds": 117}},
		},
		Sources: []snapshot.SourceStatus{{Name: "kube", Status: snapshot.StatusOK}, {Name: "conntrack", Status: snapshot.StatusOK}},
	}
}

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./sink -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from golden file:\n--- got\n%s\n--- want\n%s", name, got, want)
	}
}

func TestTableGolden(t *testing.T) {
	var b bytes.Buffer
	if err := Table(&b, sample(), rule.All(rule.Config{})); err != nil {
		t.Fatal(err)
	}
	golden(t, "report.table", b.Bytes())
}

// A rule skipped for want of a source is said to be, and the table does
// not claim that nothing was found.
func TestTableSaysWhichRulesWereNotJudged(t *testing.T) {
	var b bytes.Buffer
	r := &finding.Report{
		Sources: []snapshot.SourceStatus{{Name: "kube", Status: snapshot.StatusOK}, {Name: "conntrack", Status: snapshot.StatusUnsupported, Detail: "no nf_conntrack_netlink"}},
		Skipped: []finding.Skipped{{Rule: rule.StaleNATFlowID, Reason: "sources not ready (conntrack: unsupported)"}},
	}
	if err := Table(&b, r, rule.All(rule.Config{})); err != nil {
		t.Fatal(err)
	}
	got := b.String()
	for _, want := range []string{"No ghosts found in what could be read", "Not judged", "  stale-nat-flow:\n    sources not ready (conntrack: unsupported)"} {
		if !strings.Contains(got, want) {
			t.Errorf("table lacks %q:\n%s", want, got)
		}
	}
}

// An input not given is said once, with every rule it kept from being
// judged, whichever sources would have read it; and the table does not
// say the scan found nothing.
func TestTableSaysEachInputNotGivenOnce(t *testing.T) {
	var b bytes.Buffer
	files := "no copy of the node's files: pass --host-root DIR"
	r := &finding.Report{
		Sources: []snapshot.SourceStatus{{Name: "kube", Status: snapshot.StatusOK},
			{Name: "hostlocal", Status: snapshot.StatusNotGiven, Detail: files}, {Name: "calico-node", Status: snapshot.StatusNotGiven, Detail: files}},
		Skipped: []finding.Skipped{
			{Rule: "ipam-unbooked-ip", NotGiven: true, Causes: []string{"hostlocal: not given: " + files}},
			{Rule: "ipam-leaked-ip", NotGiven: true, Causes: []string{"hostlocal: not given: " + files}},
			{Rule: "stale-nodename-file", NotGiven: true, Causes: []string{"calico-node: not given: " + files}},
		},
	}
	if err := Table(&b, r, rule.All(rule.Config{})); err != nil {
		t.Fatal(err)
	}
	got := b.String()
	want := "Not judged:\n  ipam-unbooked-ip, ipam-leaked-ip, stale-nodename-file:\n    not given: " + files + "\n"
	if !strings.Contains(got, want) || strings.Count(got, "not given: "+files) != 1 || !strings.HasPrefix(got, "No ghosts found by the rules that could be judged") {
		t.Errorf("table:\n%s\nwant it to hold once:\n%s", got, want)
	}
}

func TestTableNoFindings(t *testing.T) {
	var b bytes.Buffer
	r := &finding.Report{Sources: []snapshot.SourceStatus{{Name: "kube", Status: snapshot.StatusError, Detail: "connection refused"}}}
	if err := Table(&b, r, nil); err != nil {
		t.Fatal(err)
	}
	golden(t, "empty.table", b.Bytes())
}

func TestJSONIsOneObjectWithTheDocumentedShape(t *testing.T) {
	var b bytes.Buffer
	if err := Write(&b, "json", sample(), nil); err != nil {
		t.Fatal(err)
	}
	golden(t, "report.json", b.Bytes())
	dec := json.NewDecoder(&b)
	var doc struct {
		Findings []struct {
			Rule, Severity, Message string
			Subject                 map[string]string
			Evidence                map[string]any
		}
		Sources []struct{ Name, Status, Detail string }
	}
	if err := dec.Decode(&doc); err != nil {
		t.Fatal(err)
	}
	if dec.More() {
		t.Fatal("more than one JSON value written")
	}
	if len(doc.Findings) != 2 || doc.Findings[0].Severity != "critical" || doc.Findings[1].Subject["ip"] != "10.244.1.100" ||
		doc.Findings[1].Subject["service"] != "web/api" || doc.Sources[0].Status != "ok" {
		t.Fatalf("decoded %+v", doc)
	}
}

func TestEmptyListsAreArrays(t *testing.T) {
	var b bytes.Buffer
	if err := JSON(&b, &finding.Report{}); err != nil {
		t.Fatal(err)
	}
	if got := b.String(); got != "{\n  \"summary\": [],\n  \"findings\": [],\n  \"sources\": []\n}\n" {
		t.Fatalf("got %q", got)
	}
}

func TestYAMLMatchesJSON(t *testing.T) {
	var b bytes.Buffer
	if err := Write(&b, "yaml", sample(), nil); err != nil {
		t.Fatal(err)
	}
	golden(t, "report.yaml", b.Bytes())
	// The same keys in the same order, the same values.
	var j bytes.Buffer
	if err := Write(&j, "json", sample(), nil); err != nil {
		t.Fatal(err)
	}
	var jn, yn yaml3.Node
	if err := yaml3.Unmarshal(j.Bytes(), &jn); err != nil {
		t.Fatal(err)
	}
	if err := yaml3.Unmarshal(b.Bytes(), &yn); err != nil {
		t.Fatal(err)
	}
	if jk, yk := keys(&jn, ""), keys(&yn, ""); !slices.Equal(jk, yk) {
		t.Errorf("the YAML's keys and values differ from the JSON's:\n json %v\n yaml %v", jk, yk)
	}
}

// keys lists n's mapping keys and scalar values, in document order, each
// with its path.
func keys(n *yaml3.Node, path string) []string {
	var out []string
	switch n.Kind {
	case yaml3.DocumentNode, yaml3.SequenceNode:
		for i, c := range n.Content {
			out = append(out, keys(c, fmt.Sprintf("%s[%d]", path, i))...)
		}
	case yaml3.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := path + "." + n.Content[i].Value
			out = append(out, k)
			out = append(out, keys(n.Content[i+1], k)...)
		}
	case yaml3.ScalarNode:
		out = append(out, path+"="+n.Value)
	}
	return out
}

func TestUnknownFormat(t *testing.T) {
	if err := Write(&bytes.Buffer{}, "xml", sample(), nil); err == nil {
		t.Fatal("want an error for -o xml")
	}
}

// A finding of many flows lists each in the JSON and YAML reports, with
// the command that removes it; both stay documents their decoders read.
func TestReportsListEveryFlow(t *testing.T) {
	var flows []snapshot.Flow
	for i := range 3 {
		flows = append(flows, snapshot.Flow{Proto: snapshot.ProtoTCP, ID: uint32(7 + i), State: "ESTABLISHED", Timeout: 300,
			Orig:  snapshot.Tuple{Src: netip.MustParseAddr("10.244.1.50"), Dst: netip.MustParseAddr("10.96.0.10"), SrcPort: uint16(40000 + i), DstPort: 80},
			Reply: snapshot.Tuple{Src: netip.MustParseAddr("10.244.3.47"), Dst: netip.MustParseAddr("10.244.1.50"), SrcPort: 8080, DstPort: uint16(40000 + i)}})
	}
	r := &finding.Report{Findings: []finding.Finding{{Rule: rule.StaleNATFlowID, Severity: finding.Warning,
		Message: "3 tcp flows to ClusterIP ns/svc still go to 10.244.3.47:8080", Subject: finding.Subject{IP: "10.244.3.47", Flow: "3 flows (tcp)"},
		Target: finding.NewFlowTarget("ns/svc gone", flows...)}}}
	type doc struct {
		Findings []struct {
			Rule  string `json:"rule"`
			Flows []struct {
				Flow   string `json:"flow"`
				ID     uint32 `json:"conntrack_id"`
				Remove string `json:"remove"`
			} `json:"flows"`
		} `json:"findings"`
		Sources []snapshot.SourceStatus `json:"sources"`
	}
	var j, y bytes.Buffer
	if err := JSON(&j, r); err != nil {
		t.Fatal(err)
	}
	if err := YAML(&y, r); err != nil {
		t.Fatal(err)
	}
	for name, read := range map[string]func(v any) error{
		"json": func(v any) error { return json.Unmarshal(j.Bytes(), v) },
		"yaml": func(v any) error { return yaml.Unmarshal(y.Bytes(), v) },
	} {
		var d doc
		if err := read(&d); err != nil {
			t.Fatalf("%s: %v\n%s%s", name, err, j.String(), y.String())
		}
		if len(d.Findings) != 1 || len(d.Findings[0].Flows) != 3 {
			t.Fatalf("%s: %+v", name, d)
		}
		for i, f := range d.Findings[0].Flows {
			if f.Flow != flows[i].String() || f.ID != flows[i].ID || f.Remove != flows[i].DeleteCommand() {
				t.Errorf("%s: flow %d = %+v, want %s", name, i, f, flows[i].DeleteCommand())
			}
		}
	}
}
