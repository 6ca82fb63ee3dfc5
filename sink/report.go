package sink

import (
	"encoding/json"
	"fmt"
	"github.com/ghostwatch/ghostwatch/internal/buildinfo"
	"github.com/ghostwatch/ghostwatch/internal/text"
	"io"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"

	"sigs.k8s.io/yaml"

	"github.com/ghostwatch/ghostwatch/finding"
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

// JSON writes exactly one JSON object followed by a newline.
func JSON(w io.Writer, r *finding.Report) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(normalize(r))
}

// YAML writes the same document as JSON, in YAML.
func YAML(w io.Writer, r *finding.Report) error {
	b, err := yaml.Marshal(normalize(r))
	if err != nil {
		return err
	}
	_, err = w.Write(b)
	return err
}

// normalize makes empty lists print as [] rather than null.
func normalize(r *finding.Report) *finding.Report {
	c := *r
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
// then one line per source.
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
	complete := len(notJudged) == 0
	for _, s := range r.Sources {
		complete = complete && s.Status != snapshot.StatusError
	}
	switch {
	case len(r.Findings) == 0 && complete:
		ew.printf("No ghosts found.\n")
	case len(r.Findings) == 0:
		ew.printf("No ghosts found in what could be read: the scan is incomplete (see Sources).\n")
	}
	for _, id := range order {
		fs := byRule[id]
		if len(fs) == 0 {
			continue
		}
		info := infos[id]
		ew.printf("%s: %s\n", id, text.Count(len(fs), "finding", "findings"))
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
				row = append(row, dash(v))
			}
			d := f.Message
			if info.Detail != nil {
				d = info.Detail(f)
			}
			if len(g) > 1 {
				d += "; e.g. " + f.Subject.Flow + clients(g)
			}
			fmt.Fprintln(tw, "  "+strings.Join(append(row, d), "\t"))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		writeRemove(ew, fs)
		ew.printf("\n")
	}
	if len(notJudged) > 0 {
		ew.printf("Not judged (a source they read was not complete):\n")
		for _, sk := range notJudged {
			ew.printf("  %s: %s\n", sk.Rule, sk.Reason)
		}
		ew.printf("\n")
	}
	ew.printf("Sources:\n")
	for _, s := range r.Sources {
		line := fmt.Sprintf("  %-10s %s", s.Name, s.Status)
		if s.Detail != "" {
			line += "  " + s.Detail
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

// maxRemoveLines is how many findings of one rule get their remove command
// printed under the table; beyond, -o json has each.
const maxRemoveLines = 10

// writeRemove prints the commands that remove the findings by hand.
func writeRemove(ew *errWriter, fs []finding.Finding) {
	var cmds []string
	for _, f := range fs {
		if f.Remove != "" {
			cmds = append(cmds, f.Remove)
		}
	}
	switch {
	case len(cmds) == 0:
	case len(cmds) > maxRemoveLines:
		ew.printf("\n  to remove one by hand: the \"remove\" field of each finding in -o json, e.g.\n    %s\n", cmds[0])
	default:
		ew.printf("\n  to remove by hand, exactly these entries:\n")
		for _, c := range cmds {
			ew.printf("    %s\n", c)
		}
	}
}

// groupByIP gathers the findings of one Service and one ghost IP, in
// their order: thousands of flows to one dead backend read as one row.
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

// summarizeFlows says how many flows a row stands for, and of which
// protocols: "266 flows (tcp, udp)".
func summarizeFlows(g []finding.Finding) string {
	var protos []string
	for _, f := range g {
		p, _, _ := strings.Cut(f.Subject.Flow, " ")
		if p != "" && !slices.Contains(protos, p) {
			protos = append(protos, p)
		}
	}
	return fmt.Sprintf("%d flows (%s)", len(g), strings.Join(protos, ", "))
}

// maxClients is how many client addresses a grouped row names.
const maxClients = 3

// clients names the client addresses of a row's flows, when the findings
// are conntrack flows.
func clients(g []finding.Finding) string {
	var cs []string
	for _, f := range g {
		ft, ok := f.Target.(*finding.FlowTarget)
		if !ok {
			return ""
		}
		if c := ft.Flow.Orig.Src.Unmap().String(); !slices.Contains(cs, c) {
			cs = append(cs, c)
		}
	}
	if len(cs) > maxClients {
		return fmt.Sprintf(", clients %s (+%d more)", strings.Join(cs[:maxClients], ", "), len(cs)-maxClients)
	}
	return ", clients " + strings.Join(cs, ", ")
}
