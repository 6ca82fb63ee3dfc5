package main

import (
	"fmt"
	"math"
	"strings"
)

// writeDoc writes docs/performance.md.
func writeDoc(w *strings.Builder, m *model) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format, args...) }
	n := m.largest()
	p("# Performance\n\n")
	p("<!-- Written by scripts/bench.sh from what it measured; edit tools/benchreport, not this file. -->\n\n")
	p("Every figure on this page comes from one run of `scripts/bench.sh` on the machine described at the end, ")
	p("ghostwatch and what operators run today measured side by side on the same conntrack table, in the same run. ")
	p("Ratios are taken within that run. The settings are those users get unless a row says otherwise. ")
	p("What ghostwatch costs the API server is measured separately, beside a real kube-proxy: [api-cost.md](api-cost.md).\n\n")

	p("## Headline\n\n")
	p("| goal | measured | limit | | how |\n|---|---|---|---|---|\n")
	for _, g := range m.goals() {
		p("| %s | %s %s | %s %s | %s | %s |\n", g.what, num(g.measured, 2), g.unit, num(g.limit, 2), g.unit, g.met(), g.how)
	}
	if b := m.baseline; b != nil {
		label := m.baselineLabel
		if label == "" {
			label = "the baseline"
		}
		p("\nBeside an earlier run (commit %s, results in the file given with `--baseline`):\n\n", label)
		p("| figure | earlier | now |\n|---|---|---|\n")
		now := m.headline()
		for i, h := range b.headline() {
			p("| %s | %s | %s |\n", h.key, h.value, now[i].value)
		}
	}
	p("\nThe command's last lines:\n\n```\n")
	for _, h := range m.headline() {
		p("%s=%s\n", h.key, h.value)
	}
	p("```\n\n")
	for _, pl := range m.plots {
		p("![%s](%s)\n\n", pl.title, pl.path)
	}

	p("## Reading the whole table\n\n")
	p("Median time of %s, and memory: for a command, the peak resident set of its process; for a reader run inside the benchmark's test binary ", runsOf(m))
	p("(ghostwatch, the floor, kube-proxy's way), what the read added to that process's peak, beyond the binary's code, the Go runtime and the cluster's objects it held before. ")
	p("The table holds TCP, UDP and SCTP flows (14:5:1), one in ten IPv6, four in five through a Service's ClusterIP, ")
	p("and 1 %% of them to deleted backends; it lives in a network namespace of the benchmark's own.\n\n")
	p("| reader |")
	for _, f := range m.flows {
		p(" %s flows |", count(f))
	}
	p("\n|---|")
	for range m.flows {
		p("---|")
	}
	p("\n")
	for _, t := range readers {
		p("| %s |", cell(t.label))
		for _, f := range m.flows {
			if t.id == "shell-loop" {
				v, measured := m.shellLoop(f)
				mark := ""
				if !measured && !math.IsNaN(v) {
					mark = " (est.)"
				}
				p(" %s%s |", ms(v), mark)
				continue
			}
			p(" %s, %s |", ms(m.val(t.id, f, "ms")), mib(m.mem(t.id, f)))
		}
		p("\n")
	}
	p("| ghostwatch audit / conntrack -L |")
	for _, f := range m.flows {
		p(" %s× |", num(m.val("audit", f, "ms")/m.val("conntrack-L", f, "ms"), 2))
	}
	p("\n| ghostwatch audit / floor |")
	for _, f := range m.flows {
		p(" %s× |", num(m.val("audit", f, "ms")/m.val("floor", f, "ms"), 2))
	}
	p("\n\n")
	if fl, cl := m.val("floor", n, "ms"), m.val("conntrack-L", n, "ms"); fl > 0 && cl > 0 {
		p("At %s flows the count-only dump alone takes %s× the time of `conntrack -L`: the kernel's side of a dump ", count(n), num(fl/cl, 2))
		p("(walking the table and writing every entry's attributes into netlink messages) is most of what `conntrack -L` costs, ")
		p("so no reader of the whole table can take less than that share of it.\n\n")
	}
	p("- **ghostwatch agent, full audit**: what the agent does at every scheduled audit (every 2 minutes by default) ")
	p("and after lost events: it dumps the table over its own netlink reader, seeds its index of flows by backend, ")
	p("and runs every node rule.\n")
	p("- **count-only netlink dump**: one dump request and a loop that counts the entries by their netlink header, ")
	p("parsing nothing. No reader of the whole table can be faster: this is the kernel's own cost.\n")
	p("- **conntrack -L**: conntrack-tools' listing, written to /dev/null, started with `ip netns exec`.\n")
	p("- **kube-proxy's way**: `netlink.ConntrackTableList` (vishvananda/netlink) for IPv4 then IPv6, every entry ")
	p("decoded into a `ConntrackFlow`, and a filter for flows from a deleted backend, as kube-proxy's conntrack ")
	p("reconciler reads the table.\n")
	p("- **shell loop**: the loop from the incident reports, `conntrack -L | grep` for the dead backends and one ")
	p("`conntrack -D` per line. Each `conntrack -D` given a flow's addresses and ports reads the whole table to ")
	p("find it, so the loop grows with the square of the table. It runs on tables of up to 20,000 flows; on larger ")
	p("ones it is estimated (est.): conntrack -L's time there, plus one `conntrack -D` per stale flow at a cost ")
	p("linear in the table's size, fitted to the two largest tables it ran on.\n\n")

	p("## Keeping watch\n\n")
	p("CPU (percent of one core) and resident set over a window of the same length, once the first full audit is done.\n\n")
	p("| | flows | CPU | RSS | anonymous RSS | Go heap | indexed flows |\n|---|---|---|---|---|---|---|\n")
	for _, f := range m.flows {
		for _, row := range []struct{ id, label string }{{"agent-rest", "ghostwatch agent at rest"}, {"agent-churn", "ghostwatch agent, churn"}} {
			label := row.label
			if c := m.val(row.id, f, "churn/s"); !math.IsNaN(c) {
				label = fmt.Sprintf("%s (%s new and %s destroyed flows a second)", label, count(c), count(c))
			}
			p("| %s | %s | %s %% | %s | %s | %s | %s |\n", label, count(f), num(m.val(row.id, f, "cpu-%"), 2),
				mib(m.val(row.id, f, "rss-MiB")), mib(m.val(row.id, f, "anon-rss-MiB")), mib(m.val(row.id, f, "heap-MiB")),
				countOr(m.val(row.id, f, "indexed")))
		}
		p("| per-second cleaner (dump and filter every second) | %s | %s %% | %s peak | | | |\n", count(f),
			num(m.val("cleaner-1s", f, "cpu-%"), 1), mib(m.val("cleaner-1s", f, "peak-rss-MiB")))
	}
	p("\nThe window falls between the agent's scheduled full audits, which read the whole table every 2 minutes by default ")
	p("and take the full audit's time above; on average they add that time over the interval:")
	for _, f := range m.flows {
		p(" %s %% of a core at %s flows;", num(m.val("audit", f, "ms")/1200, 2), count(f))
	}
	p(" the collection that gives a full dump's memory back, once after each, falls in the window.\n")
	p("\nThe agent's RSS includes the pages of its binary's code it touched, shared with every other process ")
	p("running that binary; the anonymous RSS is its own memory. The agent keeps its index current from ")
	p("conntrack's new and destroy events, and dumps the table only at its scheduled audit; a cleaner that dumps ")
	p("every second pays the reader's cost every second, and cannot when one dump takes longer.\n\n")

	p("## A dead backend's flows\n\n")
	p("From a pod's deletion in the API to the last of its flows deleted from the kernel, with the settings ")
	p("the agent ships (grace %s s, debounce 50 ms, a budget of 20 ghost IPs a minute); %s dual-stack pods killed 500 ms apart. ",
		num(m.val("backend-death", n, "grace-ms")/1000, 0), countOr(killsOf(m)))
	p("The grace period is the agent's own choice (it waits for the evidence to hold before acting, ")
	p("docs/agent.md); the time beyond it is what the agent's reaction and the deletes cost.\n\n")
	if j := m.val("kernel-ops", n, "judged-delete-us/entry"); j > 0 {
		per := m.val("backend-death", n, "flows/pod")
		p("The agent deletes a flow by its reply tuple, zone and ID, which only the entry it judged has (docs/agent.md), ")
		p("256 a system call, without reading it back first. On this machine the kernel takes %s µs an entry to delete so ", num(j, 1))
		p("while a subscriber reads the table's events, as the agent does (%s µs by original tuple, batched, with no subscriber; ", num(m.val("kernel-ops", n, "batched-delete-us/entry"), 1))
		p("%s µs one system call an entry; reading an entry back %s µs batched): for the %s flows of one pod at %s flows, %s of the kernel's time. ",
			num(m.val("kernel-ops", n, "delete-us/entry"), 1), num(m.val("kernel-ops", n, "batched-get-us/entry"), 1), countOr(per), count(n), ms(m.kernelDeletes(n)))
		p("The grace starts when the agent learned of the pod's deletion, and when it ends with nothing changed since, the agent acts on ")
		p("its last audit's findings without reading the table again: the time beyond it is the API server's watch delivering the deletion, ")
		p("the re-check's quorum reads, and the deletes.\n\n")
	}
	p("| flows | flows per pod | p50 | p99 | p50 beyond the grace | p99 beyond the grace |\n|---|---|---|---|---|---|\n")
	for _, f := range m.flows {
		p("| %s | %s | %s | %s | %s | %s |\n", count(f), countOr(m.val("backend-death", f, "flows/pod")),
			ms(m.val("backend-death", f, "p50-ms")), ms(m.val("backend-death", f, "p99-ms")),
			ms(m.val("backend-death", f, "beyond-grace-p50-ms")), ms(m.val("backend-death", f, "beyond-grace-p99-ms")))
	}
	p("\n")

	if sizes := m.dead.sizes(); len(sizes) > 0 {
		p("## When every backend dies\n\n")
		p("A node whose workloads all restarted elsewhere: every flow of its table goes to a dead backend, ten flows to each, ")
		p("through the benchmarks' 100 Services. The agent as it ships (report only, the soft memory limit it sets at 75 %% of ")
		p("the DaemonSet's), from its start until two complete audits have judged every flow (the first, then a scheduled one), ")
		p("and `ghostwatch scan` of the table's listing, its JSON report written, each in a process of its own: their peak ")
		p("resident set, the benchmark's binary and its in-memory cluster included, against the goal and beside the ")
		p("DaemonSet's memory limit (deploy/agent, the chart's default).\n\n")
		p("| flows | dead backends | agent: peak RSS | agent: first audit | scan: peak RSS | scan: time | goal | the DaemonSet's limit |\n|---|---|---|---|---|---|---|---|\n")
		for _, f := range sizes {
			get := func(unit string) float64 {
				v, ok := m.dead.get(f, unit)
				if !ok {
					return math.NaN()
				}
				return v
			}
			p("| %s | %s | %s | %s | %s | %s | %s | %s |\n", count(f), countOr(get("dead-backends")), mib(get("agent-peak-MiB")),
				ms(get("agent-first-pass-s")*1000), mib(get("scan-peak-MiB")), ms(get("scan-s")*1000), mib(get("goal-MiB")), mib(get("limit-MiB")))
		}
		p("\n")
	}

	writeWindow(p, m)

	p("## Offline: a saved listing\n\n")
	p("`ghostwatch scan` of the table's `conntrack -L -o extended,id` listing with every rule, against the ")
	p("simplest field split a shell user would run on the same file.\n\n")
	p("| | flows | time | peak RSS | RSS the scan adds |\n|---|---|---|---|---|\n")
	for _, f := range m.flows {
		for _, t := range offline {
			p("| %s | %s | %s | %s | %s |\n", cell(t.label), count(f), ms(m.val(t.id, f, "ms")), mib(m.val(t.id, f, "peak-rss-MiB")),
				mib(m.val(t.id, f, "added-peak-rss-MiB")))
		}
	}
	p("\n")

	p("## The controller\n\n")
	p("The leader's full pass over the cluster (its sources collected into a snapshot, every cluster rule run), ")
	p("on a cluster of pods spread over nodes of 60 pods and a Calico block each, 5,000 of them members of a Consul ")
	p("cluster; the heap per pod is everything the leader's sources keep.\n\n")
	p("| pods | full pass | CPU per pass | heap per pod | of which Calico's ledger |\n|---|---|---|---|---|\n")
	for _, pods := range m.pass.sizes() {
		v := func(u string) float64 { x, _ := m.pass.get(pods, u); return x }
		p("| %s | %s | %s | %s B | %s B |\n", count(pods), ms(v("ns/op")/1e6), ms(v("cpu-ns/op")/1e6), count(v("heap-B/pod")), count(v("calico-B/pod")))
	}
	if ev, ok := m.watch.get(150000, "ns/op"); ok {
		p("\nOne pod event reaches the leader's pod index in %s ns", num(ev, 0))
		if bp, ok := m.watchIx.get(150000, "B/pod"); ok {
			p("; the index keeps %s B per pod beyond the informer's cache", count(bp))
		}
		p(" (150,000 pods).\n")
	}
	p("\n")

	p("## How each cost grows\n\n")
	if len(m.flows) >= 2 {
		a, b := m.flows[len(m.flows)-2], m.flows[len(m.flows)-1]
		p("From %s to %s flows (%s× the table):\n\n", count(a), count(b), num(b/a, 0))
		p("| | time | memory |\n|---|---|---|\n")
		for _, t := range append(append([]tool{}, readers...), offline...) {
			p("| %s | %s× | %s× |\n", cell(t.label), num(m.timeOf(t.id, b)/m.timeOf(t.id, a), 1),
				num(m.mem(t.id, b)/m.mem(t.id, a), 1))
		}
		p("\n")
	}

	p("## How to reproduce\n\n")
	p("```sh\nsudo scripts/bench.sh                 # every size, writes this page\nsudo scripts/bench.sh --sizes 10000   # one small table, a quick look\n")
	p("cp docs/performance-results.txt /tmp/before.txt   # then, after a change:\nsudo scripts/bench.sh --baseline /tmp/before.txt\n```\n\n")
	p("The raw results of the run this page shows are in [performance-results.txt](performance-results.txt).\n\n")
	p("The script installs conntrack, GNU time and iproute2 when they are missing, builds the benchmarks as the ")
	p("release is built (static, stripped), and raises nf_conntrack_max for the run if it is too small. ")
	p("`scripts/bench.sh --help` lists its options.\n\n")
	p("## Machine\n\n```\n%s\n```\n", m.machine)
}

// cell escapes what a markdown table cell cannot hold.
func cell(s string) string { return strings.ReplaceAll(s, "|", "\\|") }

func runsOf(m *model) string {
	if v := m.val("audit", m.largest(), "reps"); !math.IsNaN(v) {
		return fmt.Sprintf("%s runs", count(v))
	}
	return "the runs"
}

func killsOf(m *model) float64 { return m.val("backend-death", m.largest(), "kills") }

func num(v float64, prec int) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "–"
	}
	return fmt.Sprintf("%.*f", prec, v)
}

func countOr(v float64) string {
	if math.IsNaN(v) {
		return "–"
	}
	return count(v)
}

func ms(v float64) string {
	switch {
	case math.IsNaN(v):
		return "–"
	case v >= 10000:
		return fmt.Sprintf("%.1f s", v/1000)
	case v >= 100:
		return fmt.Sprintf("%.0f ms", v)
	}
	return fmt.Sprintf("%.1f ms", v)
}

func mib(v float64) string {
	if math.IsNaN(v) {
		return "–"
	}
	return fmt.Sprintf("%.1f MiB", v)
}
