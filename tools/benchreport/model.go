package main

import (
	"errors"
	"fmt"
	"math"
	"strconv"
)

// A tool is one way of doing the job that a row of the side-by-side
// tables stands for.
type tool struct {
	id    string // sub-benchmark of BenchmarkSideBySide
	label string // in tables and legends
}

// The readers of the whole table, in the order the tables show them.
var readers = []tool{
	{"audit", "ghostwatch agent, full audit"},
	{"floor", "count-only netlink dump (floor)"},
	{"conntrack-L", "conntrack -L > /dev/null"},
	{"kube-proxy", "kube-proxy's way (ConntrackTableList + filter)"},
	{"shell-loop", "shell loop (conntrack -L | grep; conntrack -D per line)"},
}

// The offline readers of a saved listing.
var offline = []tool{
	{"offline-scan", "ghostwatch scan of the listing"},
	{"awk", "awk '{print $5}' on the listing"},
}

// model is everything the document and the plots show.
type model struct {
	machine string
	sbs     map[string]series // by tool id
	flows   []float64         // table sizes measured, ascending
	pass    series            // BenchmarkControllerPass by pods
	watch   series            // BenchmarkClusterWatch/event and /index
	watchIx series
	dead    series // BenchmarkDeadBackends by flows
	plots   []plotRef
	// baseline is an earlier run's, when given, from the commit
	// baselineLabel names.
	baseline      *model
	baselineLabel string
	// window are the rows of scripts/measure-window.sh, when given.
	window []windowRow
}

// plotRef is a plot written for the document.
type plotRef struct{ title, path string }

func build(rs []result) (*model, error) {
	m := &model{sbs: map[string]series{}}
	for _, t := range append(append(append([]tool{}, readers...), offline...),
		tool{id: "cleaner-1s"}, tool{id: "agent-rest"}, tool{id: "agent-churn"}, tool{id: "backend-death"}, tool{id: "kernel-ops"}) {
		m.sbs[t.id] = collect(rs, "BenchmarkSideBySide/"+t.id, "flows", 0)
	}
	m.flows = m.sbs["audit"].sizes()
	if len(m.flows) == 0 {
		return nil, errors.New("no BenchmarkSideBySide/audit results: run scripts/bench.sh")
	}
	m.pass = collect(rs, "BenchmarkControllerPass", "pods", 150000)
	m.watch = collect(rs, "BenchmarkClusterWatch/event", "pods", 150000)
	m.watchIx = collect(rs, "BenchmarkClusterWatch/index", "pods", 150000)
	m.dead = collect(rs, "BenchmarkDeadBackends", "flows", 0)
	return m, nil
}

// largest is the largest table measured.
func (m *model) largest() float64 { return m.flows[len(m.flows)-1] }

// val is tool id's median metric unit at size flows; NaN when not measured.
func (m *model) val(id string, flows float64, unit string) float64 {
	v, ok := m.sbs[id].get(flows, unit)
	if !ok {
		return math.NaN()
	}
	return v
}

// shellLoop is the shell loop's time at flows, in ms, and whether it was
// measured. Where it was not, it is estimated: conntrack -L's time at
// flows, plus one `conntrack -D` per stale flow (1 %), each of which reads
// the whole table to find its entry and so costs a + b×flows, a and b
// fitted to the two largest tables the loop ran on (b alone, through the
// origin, when it ran on one).
func (m *model) shellLoop(flows float64) (ms float64, measured bool) {
	if v := m.val("shell-loop", flows, "ms"); !math.IsNaN(v) {
		return v, true
	}
	sizes := m.sbs["shell-loop"].sizes()
	if len(sizes) == 0 {
		return math.NaN(), false
	}
	perDelete := func(at float64) float64 {
		return (m.val("shell-loop", at, "ms") - m.val("conntrack-L", at, "ms")) / m.val("shell-loop", at, "deletes")
	}
	x1 := sizes[len(sizes)-1]
	a, b := 0.0, perDelete(x1)/x1
	if len(sizes) >= 2 {
		x0 := sizes[len(sizes)-2]
		b = (perDelete(x1) - perDelete(x0)) / (x1 - x0)
		a = perDelete(x1) - b*x1
	}
	return m.val("conntrack-L", flows, "ms") + (a+b*flows)*math.Ceil(flows/100), false
}

// timeOf is a reader's time at flows, in ms.
func (m *model) timeOf(id string, flows float64) float64 {
	if id == "shell-loop" {
		v, _ := m.shellLoop(flows)
		return v
	}
	return m.val(id, flows, "ms")
}

// mem is a reader's memory at flows, in MiB: for those run inside the
// benchmark's test binary (ghostwatch, the floor, kube-proxy's way), what
// the read added to the process's peak; for commands, their peak.
func (m *model) mem(id string, flows float64) float64 {
	if v := m.val(id, flows, "added-peak-rss-MiB"); !math.IsNaN(v) {
		return v
	}
	return m.val(id, flows, "peak-rss-MiB")
}

// A goal is one of the figures the project holds itself to.
type goal struct {
	what     string
	measured float64
	unit     string
	limit    float64
	how      string // what was measured, and at which size
}

func (g goal) met() string {
	switch {
	case math.IsNaN(g.measured):
		return "not measured"
	case g.measured <= g.limit:
		return "met"
	}
	return "**not met**"
}

func (m *model) goals() []goal {
	n := m.largest()
	at := fmt.Sprintf("%s flows", count(n))
	audit := m.val("audit", n, "ms")
	pass := math.NaN()
	perPod := math.NaN()
	if v, ok := m.pass.get(150000, "ns/op"); ok {
		pass = v / 1e6
	}
	if v, ok := m.pass.get(150000, "heap-B/pod"); ok {
		perPod = v
	}
	return append([]goal{
		{"full audit against conntrack -L", audit / m.val("conntrack-L", n, "ms"), "×", 0.4, "median time, " + at},
		{"full audit against the count-only dump", audit / m.val("floor", n, "ms"), "×", 1.15, "median time, " + at},
		{"full audit's peak memory", m.val("audit", n, "added-peak-rss-MiB"), "MiB", 48, "peak RSS the audit adds to its process, " + at},
		{"a dead backend's flows cleared, beyond the grace, against the kernel's own deletes", m.val("backend-death", n, "beyond-grace-p99-ms") / m.kernelDeletes(n), "×", 2, "p99, shipped settings, " + at + "; the kernel's: one pod's flows deleted as the agent does"},
		{"agent at rest, CPU", m.val("agent-rest", n, "cpu-%"), "% of a core", 0.5, at},
		{"agent at rest, memory", m.val("agent-rest", n, "anon-rss-MiB"), "MiB", 40, "anonymous RSS (the process's own pages), " + at},
		{"offline scan against awk", m.val("offline-scan", n, "ms") / m.val("awk", n, "ms"), "×", 1, "median time, " + at + " listing"},
		{"offline scan's peak memory", m.val("offline-scan", n, "added-peak-rss-MiB"), "MiB", 64, "peak RSS the scan adds to its process, " + at + " listing"},
		m.deadGoal("when every backend dies: the agent's peak memory", "agent-peak-MiB", "agent"),
		m.deadGoal("when every backend dies: the scan's peak memory", "scan-peak-MiB", "scan of the listing"),
		{"controller's full pass", pass, "ms", 250, "150,000 pods"},
		{"controller's memory per pod", perPod, "B", 1024, "heap per pod, every source of the leader, 150,000 pods"},
	}, m.windowGoals()...)
}

// kernelDeletes is, in ms, what the kernel takes to delete the flows of
// one pod at n flows as the agent does: by reply tuple, zone and ID, many
// a system call, while a subscriber reads the table's events.
func (m *model) kernelDeletes(n float64) float64 {
	return m.val("backend-death", n, "flows/pod") * m.val("kernel-ops", n, "judged-delete-us/entry") / 1000
}

// deadGoal is the goal of BenchmarkDeadBackends's metric unit, at the
// largest table it ran on: under its goal-MiB.
func (m *model) deadGoal(what, unit, who string) goal {
	sizes := m.dead.sizes()
	if len(sizes) == 0 {
		return goal{what, math.NaN(), "MiB", 200, "not run"}
	}
	f := sizes[len(sizes)-1]
	v, _ := m.dead.get(f, unit)
	limit, _ := m.dead.get(f, "goal-MiB")
	ds, _ := m.dead.get(f, "limit-MiB")
	dead, _ := m.dead.get(f, "dead-backends")
	return goal{what, v, "MiB", limit, fmt.Sprintf("peak RSS of the %s, %s flows to %s dead backends (the DaemonSet's limit: %s MiB)", who, count(f), count(dead), count(ds))}
}

type keyValue struct{ key, value string }

// headline is what the command's last lines print.
func (m *model) headline() []keyValue {
	n := m.largest()
	num := func(v float64, prec int) string {
		if math.IsNaN(v) {
			return "NaN"
		}
		return strconv.FormatFloat(v, 'f', prec, 64)
	}
	audit := m.val("audit", n, "ms")
	pass := math.NaN()
	if v, ok := m.pass.get(150000, "ns/op"); ok {
		pass = v / 1e6
	}
	return []keyValue{
		{"flows", num(n, 0)},
		{"audit_ratio_vs_conntrack_L", num(audit/m.val("conntrack-L", n, "ms"), 3)},
		{"audit_ratio_vs_floor", num(audit/m.val("floor", n, "ms"), 3)},
		{"delete_p99_ms", num(m.val("backend-death", n, "beyond-grace-p99-ms"), 1)},
		{"agent_rss_mib_1m", num(m.val("agent-rest", n, "anon-rss-MiB"), 1)},
		{"controller_pass_ms_150k", num(pass, 1)},
	}
}

// count formats n with thousands separators.
func count(n float64) string {
	s := strconv.FormatFloat(math.Round(n), 'f', 0, 64)
	var out []byte
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	return string(out)
}
