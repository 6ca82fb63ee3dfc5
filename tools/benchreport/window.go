package main

import (
	"bufio"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"time"
)

// windowRow is one run of scripts/measure-window.sh: seed 004's error
// window on a real node, one "window-sweep row:" line of
// TestErrorWindowSweep.
type windowRow struct {
	mode, grace, budget string
	lanes, replacements int
	ghosts, healthy     int
	// From the old pod's deletion in the API to the agent's delete of
	// its flow, from that delete to the client's first answer by the new
	// replica, and from the deletion to that answer.
	toDelete, afterDelete, toAnswer struct{ p50, p99, max time.Duration }
}

// windowKeys are the row's keys, each required.
var windowKeys = []string{"mode", "grace", "budget", "lanes", "replacements", "ghost_deletes", "healthy_deletes",
	"deleted_to_flow_deleted_p50", "deleted_to_flow_deleted_max", "flow_deleted_to_answered_p50", "flow_deleted_to_answered_max",
	"deleted_to_answered_p50", "deleted_to_answered_p99", "deleted_to_answered_max"}

// parseWindow reads the rows of a file of measure-window.sh's output;
// other lines are ignored.
func parseWindow(path string) ([]windowRow, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var rows []windowRow
	sc := bufio.NewScanner(f)
	for ln := 1; sc.Scan(); ln++ {
		_, rest, ok := strings.Cut(sc.Text(), "window-sweep row:")
		if !ok {
			continue
		}
		r, err := parseWindowRow(rest)
		if err != nil {
			return nil, fmt.Errorf("%s:%d: %w", path, ln, err)
		}
		rows = append(rows, r)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if len(rows) == 0 {
		return nil, fmt.Errorf("%s: no \"window-sweep row:\" line: run scripts/measure-window.sh", path)
	}
	return rows, nil
}

// parseWindowRow reads key=value fields; a value may be double-quoted.
func parseWindowRow(s string) (windowRow, error) {
	kv := map[string]string{}
	for s = strings.TrimSpace(s); s != ""; s = strings.TrimSpace(s) {
		k, rest, ok := strings.Cut(s, "=")
		if !ok || k == "" || strings.ContainsAny(k, " \t") {
			return windowRow{}, fmt.Errorf("%q: want key=value", s)
		}
		var v string
		if strings.HasPrefix(rest, `"`) {
			q, err := strconv.QuotedPrefix(rest)
			if err != nil {
				return windowRow{}, fmt.Errorf("%s: %w", k, err)
			}
			v, _ = strconv.Unquote(q)
			rest = rest[len(q):]
		} else {
			v, rest, _ = strings.Cut(rest, " ")
		}
		if _, dup := kv[k]; dup {
			return windowRow{}, fmt.Errorf("%s given twice", k)
		}
		kv[k], s = v, rest
	}
	for _, k := range windowKeys {
		if _, ok := kv[k]; !ok {
			return windowRow{}, fmt.Errorf("no %s", k)
		}
	}
	var r windowRow
	var err error
	atoi := func(k string) int {
		n, e := strconv.Atoi(kv[k])
		if e != nil && err == nil {
			err = fmt.Errorf("%s=%q: not a count", k, kv[k])
		}
		return n
	}
	dur := func(k string) time.Duration {
		d, e := time.ParseDuration(kv[k])
		if e != nil && err == nil {
			err = fmt.Errorf("%s=%q: not a duration", k, kv[k])
		}
		return d
	}
	r.mode, r.grace, r.budget = kv["mode"], kv["grace"], kv["budget"]
	r.lanes, r.replacements = atoi("lanes"), atoi("replacements")
	r.ghosts, r.healthy = atoi("ghost_deletes"), atoi("healthy_deletes")
	r.toDelete.p50, r.toDelete.max = dur("deleted_to_flow_deleted_p50"), dur("deleted_to_flow_deleted_max")
	r.afterDelete.p50, r.afterDelete.max = dur("flow_deleted_to_answered_p50"), dur("flow_deleted_to_answered_max")
	r.toAnswer.p50, r.toAnswer.p99, r.toAnswer.max = dur("deleted_to_answered_p50"), dur("deleted_to_answered_p99"), dur("deleted_to_answered_max")
	return r, err
}

// graceOf is the row's grace period; ok false when it names none (the
// chart's default, unknown here).
func (r windowRow) graceOf() (time.Duration, bool) {
	d, err := time.ParseDuration(r.grace)
	return d, err == nil
}

// windowGoals are issue-level goals of each row: the client answered
// p50 within 1.5 s of its pod's deletion and at most a second beyond the
// grace, with no healthy flow deleted in 1,000 replacements or more.
func (m *model) windowGoals() []goal {
	var gs []goal
	for _, r := range m.window {
		at := fmt.Sprintf("kube-proxy %s, grace %s, %d replacements", r.mode, r.grace, r.replacements)
		gs = append(gs, goal{"error window on a real node: pod deleted → client answered, p50", r.toAnswer.p50.Seconds(), "s", 1.5, at})
		if g, ok := r.graceOf(); ok {
			gs = append(gs, goal{"error window on a real node: pod deleted → client answered, max", r.toAnswer.max.Seconds(), "s", (g + time.Second).Seconds(), at + "; limit: the grace + 1 s"})
		}
		healthy, how := float64(r.healthy), at
		if r.replacements < 1000 {
			// Too few to tell: the goal asks for none in 1,000.
			healthy, how = math.NaN(), fmt.Sprintf("%s: %d healthy deleted, of fewer than the 1,000 replacements the goal asks", at, r.healthy)
		}
		gs = append(gs, goal{"error window on a real node: healthy flows deleted", healthy, "", 0, how})
	}
	return gs
}

// writeWindow writes the document's section on the error window.
func writeWindow(p func(string, ...any), m *model) {
	if len(m.window) == 0 {
		return
	}
	p("## What a client sees on a real node\n\n")
	p("Seed 004's error window, from `scripts/measure-window.sh` (an hour or so a mode; its rows are kept in ")
	p("[window-sweep.txt](window-sweep.txt) and shown here): the chart installed on a real node (kubelet, containerd, ")
	p("host-local) with `stale-nat-flow` on, lanes of a one-replica Deployment behind a NodePort, each with a keep-alive ")
	p("client outside the node, replaced again and again with the old pod's FIN and RST dropped by the node. Every flow ")
	p("the agent deleted is judged against the pods' lives from a watch. How to read it: ")
	p("[agent.md](agent.md#what-a-client-sees-on-a-real-node).\n\n")
	p("| kube-proxy | grace | budget | lanes | replacements | healthy flows deleted | ghosts deleted | pod deleted → flow deleted, p50 / max | flow deleted → client answered, p50 / max | pod deleted → client answered, p50 / p99 / max |\n")
	p("|---|---|---|---|---|---|---|---|---|---|\n")
	for _, r := range m.window {
		p("| %s | %s | %s | %d | %s | **%d** | %s | %s / %s | %s / %s | %s / %s / %s |\n", r.mode, cell(r.grace), cell(r.budget), r.lanes,
			count(float64(r.replacements)), r.healthy, count(float64(r.ghosts)), secs(r.toDelete.p50), secs(r.toDelete.max),
			secs(r.afterDelete.p50), secs(r.afterDelete.max), secs(r.toAnswer.p50), secs(r.toAnswer.p99), secs(r.toAnswer.max))
	}
	p("\n")
}

// secs writes d in seconds, to the hundredth.
func secs(d time.Duration) string { return strconv.FormatFloat(d.Seconds(), 'f', 2, 64) + " s" }
