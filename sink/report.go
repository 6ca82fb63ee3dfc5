package sink

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	yaml3 "go.yaml.in/yaml/v3"

	"github.com/ghostwatch/ghostwatch/finding"
	"github.com/ghostwatch/ghostwatch/internal/buildinfo"
	"github.com/ghostwatch/ghostwatch/internal/text"
	"github.com/ghostwatch/ghostwatch/rule"
	"github.com/ghostwatch/ghostwatch/snapshot"
)

// Formats the report writers accept: text is the table ("table" is
// accepted too), json and yaml the same document.
var Formats = []string{"text", "json", "yaml"}

// Write renders r in the named format. catalog supplies the runbook text the
// table shows for each rule.
func Write(w io.Writer, format string, r *finding.Report, catalog []rule.Rule) error {
	switch format {
	case "", "text", "table":
		return Table(w, r, catalog)
	case "json":
		return JSON(w, r)
	case "yaml":
		return YAML(w, r)
	}
	return fmt.Errorf("unknown output format %q (want one of: %s)", format, strings.Join(Formats, ", "))
}

// JSON writes exactly one JSON object followed by a newline: the report,
// and under each finding about conntrack flows, "flows": each of its flows
// with the command that removes it. The flows are written as they are
// read from the snapshot, one line each, so that a finding of a million
// flows costs no memory to write.
func JSON(w io.Writer, r *finding.Report) error {
	ew := &errWriter{w: w}
	r = normalize(r)
	hb, err := marshal(reportHeaderOf(r), "", true)
	if err != nil {
		return err
	}
	ew.printf("{\n  %s,\n  \"findings\": [", bytes.TrimSpace(bytes.TrimSpace(hb)[1:len(bytes.TrimSpace(hb))-1]))
	for i := range r.Findings {
		if i > 0 {
			ew.printf(",")
		}
		b, err := marshal(&r.Findings[i], "    ", true)
		if err != nil {
			return err
		}
		ew.printf("\n    ")
		lt, ok := r.Findings[i].Target.(finding.Listed)
		if !ok {
			ew.Write(b)
			continue
		}
		// The finding's object, its closing brace left for the list.
		_, many := lt.Noun()
		b = bytes.TrimSuffix(bytes.TrimRight(b, "\n "), []byte("}"))
		ew.Write(bytes.TrimRight(b, "\n "))
		ew.printf(",\n      %q: [", many)
		n := 0
		for e := range lt.Entries() {
			if n > 0 {
				ew.printf(",")
			}
			ew.printf("\n        ")
			if err := writeEntry(ew, e); err != nil {
				return err
			}
			n++
		}
		ew.printf("\n      ]\n    }")
	}
	if len(r.Findings) > 0 {
		ew.printf("\n  ")
	}
	ew.printf("],\n")
	rest := struct {
		Sources []snapshot.SourceStatus `json:"sources"`
		Skipped []finding.Skipped       `json:"skipped,omitempty"`
	}{r.Sources, r.Skipped}
	b, err := marshal(rest, "", true)
	if err != nil {
		return err
	}
	// The rest's fields, without its own braces.
	b = bytes.TrimSpace(b)
	b = bytes.TrimSpace(b[1 : len(b)-1])
	ew.printf("  %s\n}\n", b)
	return ew.err
}

// reportHeader is what a report says before its findings.
type reportHeader struct {
	Version    string              `json:"version,omitempty"`
	Node       string              `json:"node,omitempty"`
	CapturedAt time.Time           `json:"captured_at,omitzero"`
	Summary    []finding.RuleCount `json:"summary"`
}

func reportHeaderOf(r *finding.Report) reportHeader {
	return reportHeader{Version: r.Version, Node: r.Node, CapturedAt: r.CapturedAt, Summary: r.Summary}
}

// flowLine is one flow as the reports list it.
// writeEntry writes one entry of a listed target as one line of JSON (a
// YAML flow mapping too).
func writeEntry(w io.Writer, e any) error {
	b, err := marshal(e, "", false)
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

// marshal encodes v as JSON without escaping <, > and & (a flow reads
// "a -> b"), indented by two spaces under prefix, or on one line when
// indent is false.
func marshal(v any, prefix string, indent bool) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if indent {
		enc.SetIndent(prefix, "  ")
	}
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimRight(buf.Bytes(), "\n"), nil
}

// YAML writes the same document as JSON, in YAML: the same keys in the
// same order, the same values (times and durations as JSON writes them),
// the flows streamed the same way (each a flow mapping on one line).
func YAML(w io.Writer, r *finding.Report) error {
	ew := &errWriter{w: w}
	r = normalize(r)
	hb, err := marshal(reportHeaderOf(r), "", false)
	if err != nil {
		return err
	}
	if err := writeYAML(ew, hb, ""); err != nil {
		return err
	}
	if len(r.Findings) == 0 {
		ew.printf("findings: []\n")
	} else {
		ew.printf("findings:\n")
	}
	for i := range r.Findings {
		b, err := marshal(&r.Findings[i], "", false)
		if err != nil {
			return err
		}
		if err := writeYAML(ew, b, "- "); err != nil {
			return err
		}
		lt, ok := r.Findings[i].Target.(finding.Listed)
		if !ok {
			continue
		}
		_, many := lt.Noun()
		ew.printf("  %s:\n", many)
		for e := range lt.Entries() {
			ew.printf("  - ")
			if err := writeEntry(ew, e); err != nil {
				return err
			}
			ew.printf("\n")
		}
	}
	rest := struct {
		Sources []snapshot.SourceStatus `json:"sources"`
		Skipped []finding.Skipped       `json:"skipped,omitempty"`
	}{r.Sources, r.Skipped}
	b, err := marshal(rest, "", false)
	if err != nil {
		return err
	}
	if err := writeYAML(ew, b, ""); err != nil {
		return err
	}
	return ew.err
}

// writeYAML writes the JSON object j as YAML, its keys in j's order (as
// JSON writes them), each line after the first indented to follow first
// ("- " for an item of a list).
func writeYAML(w io.Writer, j []byte, first string) error {
	var n yaml3.Node
	if err := yaml3.Unmarshal(j, &n); err != nil {
		return err
	}
	plain(&n)
	var buf bytes.Buffer
	enc := yaml3.NewEncoder(&buf)
	enc.SetIndent(2)
	if err := enc.Encode(&n); err != nil {
		return err
	}
	if err := enc.Close(); err != nil {
		return err
	}
	indent := strings.Repeat(" ", len(first))
	for k, line := range strings.Split(strings.TrimRight(buf.String(), "\n"), "\n") {
		pre := indent
		if k == 0 {
			pre = first
		}
		if _, err := fmt.Fprintf(w, "%s%s\n", pre, line); err != nil {
			return err
		}
	}
	return nil
}

// plain drops the styles decoding JSON gave n (flow mappings, quoted
// strings): the encoder writes block YAML, and quotes a string only where
// it would read as something else.
func plain(n *yaml3.Node) {
	n.Style = 0
	for _, c := range n.Content {
		plain(c)
	}
}

// normalize makes empty lists print as [] rather than null.
func normalize(r *finding.Report) *finding.Report {
	c := *r
	if c.Summary == nil {
		c.Summary = finding.Summarize(c.Findings)
	}
	if c.Findings == nil {
		c.Findings = []finding.Finding{}
	}
	if c.Sources == nil {
		c.Sources = []snapshot.SourceStatus{}
	}
	return &c
}

// Table writes one group per rule: a header with the rule's why and fix,
// then one row per ghost IP of a Service (its flows counted, a sample and
// the clients named when there are several; JSON keeps every finding);
// then one line per source. Every string it did not write (names,
// messages, details, commands, causes, sources' details) passes through
// text.Escape: the table's own layout is the only line break and column
// gap in it, whatever a cluster, a gossip member or a bundle holds.
func Table(w io.Writer, r *finding.Report, catalog []rule.Rule) error {
	infos := map[string]rule.Info{}
	var order []string
	for _, c := range catalog {
		infos[c.Info().ID] = c.Info()
		order = append(order, c.Info().ID)
	}
	byRule := map[string][]finding.Finding{}
	for _, f := range r.Findings {
		if _, ok := infos[f.Rule]; !ok {
			infos[f.Rule] = rule.Info{ID: f.Rule}
			order = append(order, f.Rule)
		}
		byRule[f.Rule] = append(byRule[f.Rule], f)
	}
	// Worst groups first; catalog order among equals.
	worst := map[string]finding.Severity{}
	for _, f := range r.Findings {
		if f.Severity > worst[f.Rule] {
			worst[f.Rule] = f.Severity
		}
	}
	sort.SliceStable(order, func(i, j int) bool { return worst[order[i]] > worst[order[j]] })
	ew := &errWriter{w: w}
	// A ledger that does not exist here (unsupported) misses nothing.
	var notJudged []finding.Skipped
	for _, sk := range r.Skipped {
		if !sk.NotApplicable {
			notJudged = append(notJudged, sk)
		}
	}
	complete, failed := len(notJudged) == 0, false
	for _, s := range r.Sources {
		failed = failed || s.Status == snapshot.StatusError
	}
	notGiven := !failed && !slices.ContainsFunc(notJudged, func(sk finding.Skipped) bool { return !sk.NotGiven })
	switch {
	case len(r.Findings) == 0 && complete && !failed:
		ew.printf("No ghosts found.\n")
	case len(r.Findings) == 0 && notGiven:
		ew.printf("No ghosts found by the rules that could be judged; the others were not, for what was not given (below).\n")
	case len(r.Findings) == 0:
		ew.printf("No ghosts found in what could be read: the scan is incomplete (see Sources).\n")
	}
	for _, id := range order {
		fs := byRule[id]
		if len(fs) == 0 {
			continue
		}
		info := infos[id]
		ew.printf("%s: %s\n", text.Escape(id), countFindings(fs))
		if info.Summary != "" {
			ew.printf("  why: %s\n", info.Summary)
		}
		if info.Fix != "" {
			ew.printf("  fix: %s\n", info.Fix)
		}
		if info.Runbook != "" {
			ew.printf("  runbook: %s\n", buildinfo.DocURL(info.Runbook))
		}
		ew.printf("\n")
		cols := info.Columns
		if len(cols) == 0 {
			cols = []string{"ip"}
		}
		tw := tabwriter.NewWriter(ew, 0, 4, 2, ' ', 0)
		head := []string{"SEVERITY"}
		for _, c := range cols {
			head = append(head, header(c))
		}
		fmt.Fprintln(tw, "  "+strings.Join(append(head, "DETAIL"), "\t"))
		for _, g := range groupByIP(fs) {
			f := g[0]
			row := []string{worstOf(g).String()}
			for _, c := range cols {
				v := f.Subject.Field(c)
				if c == "flow" && len(g) > 1 {
					v = summarizeFlows(g)
				}
				row = append(row, dash(text.Escape(v)))
			}
			d := f.Message
			if info.Detail != nil {
				d = info.Detail(f)
			}
			if len(g) > 1 || entries(f) > 1 {
				d += "; e.g. " + sampleFlow(f) + clients(g)
			}
			fmt.Fprintln(tw, "  "+strings.Join(append(row, text.Escape(d)), "\t"))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		writeRemove(ew, fs)
		ew.printf("\n")
	}
	if len(notJudged) > 0 {
		// Each cause once, with the rules it kept from being judged.
		ew.printf("Not judged:\n")
		var causes []string
		rules := map[string][]string{}
		for _, sk := range notJudged {
			cs := sk.Causes
			if len(cs) == 0 {
				cs = []string{sk.Reason}
			}
			for _, c := range cs {
				// An input not given is said once, whichever sources
				// would have read it.
				if _, rest, ok := strings.Cut(c, ": "+string(snapshot.StatusNotGiven)+": "); ok {
					c = string(snapshot.StatusNotGiven) + ": " + rest
				}
				if _, ok := rules[c]; !ok {
					causes = append(causes, c)
				}
				if !slices.Contains(rules[c], sk.Rule) {
					rules[c] = append(rules[c], sk.Rule)
				}
			}
		}
		for _, c := range causes {
			ew.printf("  %s\n    %s\n", text.Escape(strings.Join(rules[c], ", ")+":"), text.Escape(c))
		}
		ew.printf("\n")
	}
	ew.printf("Sources:\n")
	width := 10
	for _, s := range r.Sources {
		width = max(width, len(text.Escape(s.Name)))
	}
	for _, s := range r.Sources {
		line := fmt.Sprintf("  %-*s %s", width, text.Escape(s.Name), text.Escape(string(s.Status)))
		if s.Detail != "" {
			line += "  " + text.Escape(s.Detail)
		}
		ew.printf("%s\n", line)
	}
	return ew.err
}

// header is a column's title: the subject field in capitals, the ghost IP
// named as such.
func header(field string) string {
	if field == "ip" {
		return "GHOST IP"
	}
	return strings.ToUpper(field)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(p)
	e.err = err
	return n, err
}

func (e *errWriter) printf(format string, a ...any) { fmt.Fprintf(e, format, a...) }

// maxRemoveLines is how many entries of one rule get their remove command
// printed under the table; beyond, -o json has each.
const maxRemoveLines = 10

// writeRemove prints the commands that remove the findings' entries by
// hand: each flow's when there are few.
func writeRemove(ew *errWriter, fs []finding.Finding) {
	var cmds []string
	more, noun := false, "entry"
	for _, f := range fs {
		if lt, ok := f.Target.(finding.Listed); ok {
			noun, _ = lt.Noun()
			for _, remove := range lt.Entries() {
				if len(cmds) > maxRemoveLines {
					more = true
					break
				}
				cmds = append(cmds, remove)
			}
			continue
		}
		if f.Remove != "" {
			cmds = append(cmds, f.Remove)
		}
	}
	switch {
	case len(cmds) == 0:
	case more || len(cmds) > maxRemoveLines:
		ew.printf("\n  to remove one by hand: the \"remove\" of each %s in -o json, e.g.\n    %s\n", noun, text.Escape(cmds[0]))
	default:
		ew.printf("\n  to remove by hand, exactly these entries:\n")
		for _, c := range cmds {
			ew.printf("    %s\n", text.Escape(c))
		}
	}
}

// entries is how many entries a finding is about: its flows, or 1.
func entries(f finding.Finding) int {
	if f.Target == nil {
		return 1
	}
	return f.Target.Size()
}

// countFindings says how many findings a rule has, and how many flows
// they hold when that is more: "1 finding (12 flows)".
func countFindings(fs []finding.Finding) string {
	n, listed := len(fs), 0
	var one, many string
	for _, f := range fs {
		if lt, ok := f.Target.(finding.Listed); ok {
			listed += lt.Size()
			one, many = lt.Noun()
		}
	}
	s := text.Count(n, "finding", "findings")
	if listed > n {
		s += " (" + text.Count(listed, one, many) + ")"
	}
	return s
}

// groupByIP gathers the findings of one Service and one ghost IP, in
// their order: a dead backend's flows judged for different reasons read
// as one row.
func groupByIP(fs []finding.Finding) [][]finding.Finding {
	type key struct{ service, ip string }
	var out [][]finding.Finding
	at := map[key]int{}
	for _, f := range fs {
		k := key{f.Subject.Service, f.Subject.IP}
		if f.Subject.IP == "" {
			out = append(out, []finding.Finding{f})
			continue
		}
		if i, ok := at[k]; ok {
			out[i] = append(out[i], f)
			continue
		}
		at[k] = len(out)
		out = append(out, []finding.Finding{f})
	}
	return out
}

func worstOf(g []finding.Finding) finding.Severity {
	w := g[0].Severity
	for _, f := range g[1:] {
		w = max(w, f.Severity)
	}
	return w
}

// protocols are the protocols of a finding's flows, in order.
func protocols(f finding.Finding) []string {
	if st, ok := f.Evidence["flows_by_state"].(map[string]int); ok {
		var out []string
		for _, k := range slices.Sorted(maps.Keys(st)) {
			p, _, _ := strings.Cut(k, " ")
			if !slices.Contains(out, p) {
				out = append(out, p)
			}
		}
		return out
	}
	p, _, _ := strings.Cut(f.Subject.Flow, " ")
	return []string{p}
}

// summarizeFlows says how many flows a row stands for, and of which
// protocols: "266 flows (tcp, udp)".
func summarizeFlows(g []finding.Finding) string {
	var protos []string
	n := 0
	for _, f := range g {
		n += entries(f)
		for _, p := range protocols(f) {
			if p != "" && !slices.Contains(protos, p) {
				protos = append(protos, p)
			}
		}
	}
	return fmt.Sprintf("%d flows (%s)", n, strings.Join(protos, ", "))
}

// sampleFlow is the flow a finding of several shows as an example.
func sampleFlow(f finding.Finding) string {
	if s, ok := f.Evidence["sample_flow"].(string); ok {
		return s
	}
	return f.Subject.Flow
}

// maxClients is how many client addresses a grouped row names.
const maxClients = 3

// clients names the client addresses of a row's flows, when the findings
// are conntrack flows: the first few, and how many more.
func clients(g []finding.Finding) string {
	var cs []string
	total := 0
	for _, f := range g {
		listed, ok := f.Evidence["clients"].([]string)
		if !ok {
			return ""
		}
		for _, c := range listed {
			if !slices.Contains(cs, c) {
				cs = append(cs, c)
			}
		}
		if n, ok := f.Evidence["client_count"].(int); ok {
			total += n
		}
	}
	total = max(total, len(cs))
	if len(cs) > maxClients {
		cs = cs[:maxClients]
	}
	if total > len(cs) {
		return fmt.Sprintf(", clients %s (+%d more)", strings.Join(cs, ", "), total-len(cs))
	}
	return ", clients " + strings.Join(cs, ", ")
}
