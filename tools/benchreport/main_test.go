package main

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestHeadlineFromResults(t *testing.T) {
	dir := t.TempDir()
	machine := filepath.Join(dir, "machine.txt")
	if err := os.WriteFile(machine, []byte("cpu: test\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	doc := filepath.Join(dir, "docs", "performance.md")
	if err := os.MkdirAll(filepath.Dir(doc), 0o755); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	if err := run("testdata/results.txt", machine, doc, filepath.Join(dir, "docs"), "testdata/results.txt", "testdata/window-sweep.txt", &out); err != nil {
		t.Fatal(err)
	}
	// The medians of the largest table; the controller's pass is the
	// median of its three runs.
	want := "flows=1000000\naudit_ratio_vs_conntrack_L=0.400\naudit_ratio_vs_floor=1.250\ndelete_p99_ms=64.5\n" +
		"agent_rss_mib_1m=20.9\ncontroller_pass_ms_150k=250.0\n"
	if out.String() != want {
		t.Errorf("printed\n%s\nwant\n%s", out.String(), want)
	}
	b, err := os.ReadFile(doc)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{want, "](performance-time.png)", "| audit_ratio_vs_floor | 1.250 | 1.250 |", "(commit abc1234,", "](performance-memory.png)", "cpu: test",
		"| full audit against conntrack -L | 0.40 × | 0.40 × | met |",
		"| full audit against the count-only dump | 1.25 × | 1.15 × | **not met** |",
		"| when every backend dies: the agent's peak memory | 180.00 MiB | 200.00 MiB | met | peak RSS of the agent, 1,000,000 flows to 100,000 dead backends (the DaemonSet's limit: 256 MiB) |",
		"| when every backend dies: the scan's peak memory | 210.00 MiB | 200.00 MiB | **not met** |",
		"## When every backend dies",
		"| 1,000,000 | 100,000 | 180.0 MiB | 12.5 s | 210.0 MiB | 8000 ms | 200.0 MiB | 256.0 MiB |",
		"## What a client sees on a real node",
		"| iptables | 1s | 1000 | 3 | 1,000 | **0** | 1,004 | 0.62 s / 1.10 s | 0.04 s / 0.30 s | 0.70 s / 1.30 s / 1.90 s |",
		"| error window on a real node: pod deleted → client answered, max | 1.90 s | 2.00 s | met | kube-proxy iptables, grace 1s, 1000 replacements; limit: the grace + 1 s |",
		"| error window on a real node: healthy flows deleted | 0.00  | 0.00  | met | kube-proxy iptables, grace 1s, 1000 replacements |",
		"| error window on a real node: pod deleted → client answered, p50 | 5.64 s | 1.50 s | **not met** |",
		"| error window on a real node: healthy flows deleted | –  | 0.00  | not measured | kube-proxy nftables, grace the chart's default, 100 replacements: 0 healthy deleted, of fewer than the 1,000 replacements the goal asks |"} {
		if !strings.Contains(string(b), s) {
			t.Errorf("the document lacks %q", s)
		}
	}
	for _, png := range []string{"performance-time.png", "performance-memory.png"} {
		b, err := os.ReadFile(filepath.Join(dir, "docs", png))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.HasPrefix(b, []byte("\x89PNG\r\n\x1a\n")) {
			t.Errorf("%s is not a PNG", png)
		}
	}
}

// The shell loop is measured where it ran and estimated elsewhere: one
// conntrack -D per stale flow, each linear in the table's size.
func TestShellLoopEstimate(t *testing.T) {
	f, err := os.Open("testdata/results.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	rs, err := parse(f)
	if err != nil {
		t.Fatal(err)
	}
	m, err := build(rs)
	if err != nil {
		t.Fatal(err)
	}
	if v, measured := m.shellLoop(10000); !measured || v != 4050 {
		t.Errorf("at 10,000: %v measured %v, want 4050 measured", v, measured)
	}
	// Per delete: 40 ms at 10,000 flows, 60 at 20,000: 20 + 0.002×flows.
	// At 1,000,000: 5000 + 10,000 deletes × 2020 ms.
	v, measured := m.shellLoop(1000000)
	if want := 5000 + 10000*2020.0; measured || math.Abs(v-want) > 1e-6 {
		t.Errorf("at 1,000,000: %v measured %v, want %v estimated", v, measured, want)
	}
}

func TestParseRefusesWhatIsNotANumber(t *testing.T) {
	for _, in := range []string{
		"BenchmarkX-2 1 NaN ns/op\n",
		"BenchmarkX-2 1 12 ns/op 5\n",
		"BenchmarkX-2 1 twelve ns/op\n",
	} {
		if _, err := parse(strings.NewReader(in)); err == nil {
			t.Errorf("parse(%q): no error", in)
		}
	}
	if _, err := build(nil); err == nil || !strings.Contains(err.Error(), "scripts/bench.sh") {
		t.Errorf("build of nothing: %v, want an error naming scripts/bench.sh", err)
	}
}

// A row of the window sweep is read whole or refused with its line.
func TestParseWindowRefusesABrokenRow(t *testing.T) {
	good, err := os.ReadFile("testdata/window-sweep.txt")
	if err != nil {
		t.Fatal(err)
	}
	first := strings.Split(string(good), "\n")[1]
	for name, line := range map[string]string{
		"a key missing":  strings.Replace(first, " lanes=3", "", 1),
		"a key twice":    first + " lanes=4",
		"not a duration": strings.Replace(first, "=620ms", "=soon", 1),
		"not a count":    strings.Replace(first, "lanes=3", "lanes=three", 1),
		"an open quote":  strings.Replace(first, `grace="1s"`, `grace="1s`, 1),
		"no key=value":   first + " loose",
	} {
		path := filepath.Join(t.TempDir(), "rows.txt")
		if err := os.WriteFile(path, []byte("x\n"+line+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := parseWindow(path); err == nil || !strings.Contains(err.Error(), "rows.txt:2:") {
			t.Errorf("%s: %v, want an error naming line 2", name, err)
		}
	}
	if _, err := parseWindow(filepath.Join("testdata", "results.txt")); err == nil {
		t.Error("a file without rows was accepted")
	}
}

func FuzzParseWindowRow(f *testing.F) {
	good, err := os.ReadFile("testdata/window-sweep.txt")
	if err != nil {
		f.Fatal(err)
	}
	for _, line := range strings.Split(string(good), "\n") {
		if _, rest, ok := strings.Cut(line, "window-sweep row:"); ok {
			f.Add(rest)
		}
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := parseWindowRow(s)
		if err == nil && r.mode == "" && !strings.Contains(s, "mode=") {
			t.Errorf("%q parsed without a mode", s)
		}
	})
}
