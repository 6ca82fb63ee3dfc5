// Command benchreport writes docs/performance.md, and the plots it shows,
// from what scripts/bench.sh measured: the output of ghostwatch's
// benchmarks (go test -bench) and a description of the machine. It prints
// the headline figures as key=value lines.
//
// It is a module of its own so that its plotting library (gonum.org/v1/plot)
// stays out of ghostwatch's go.mod.
//
// Usage: benchreport -results FILE -machine FILE [-doc docs/performance.md] [-plots docs] [-window docs/window-sweep.txt]
package main

import (
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

func main() {
	results := flag.String("results", "", "`file` of go test -bench output (required)")
	machine := flag.String("machine", "", "`file` describing the machine and the run, as scripts/bench.sh writes it (required)")
	doc := flag.String("doc", "", "markdown `file` to write; none when empty")
	plots := flag.String("plots", "", "`directory` to write the PNG plots into; the document links them relative to itself")
	baseline := flag.String("baseline", "", "results `file` of an earlier run, shown beside this one's headline figures")
	window := flag.String("window", "", "`file` of scripts/measure-window.sh's rows (docs/window-sweep.txt): the error window on a real node")
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "Usage: benchreport -results FILE -machine FILE [-doc FILE] [-plots DIR] [-window FILE]\n\n"+
			"Writes the performance document and its plots from scripts/bench.sh's measurements,\n"+
			"and prints the headline figures as key=value lines.\n\n")
		flag.PrintDefaults()
	}
	flag.Parse()
	if *results == "" || *machine == "" || flag.NArg() > 0 {
		flag.Usage()
		os.Exit(2)
	}
	if err := run(*results, *machine, *doc, *plots, *baseline, *window, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "benchreport:", err)
		os.Exit(1)
	}
}

func run(resultsPath, machinePath, docPath, plotDir, baselinePath, windowPath string, stdout io.Writer) error {
	rs, _, err := parseFile(resultsPath)
	if err != nil {
		return err
	}
	machine, err := os.ReadFile(machinePath)
	if err != nil {
		return err
	}
	m, err := build(rs)
	if err != nil {
		return fmt.Errorf("%s: %w", resultsPath, err)
	}
	m.machine = strings.TrimSpace(string(machine))
	if windowPath != "" {
		if m.window, err = parseWindow(windowPath); err != nil {
			return err
		}
	}
	if baselinePath != "" {
		brs, label, err := parseFile(baselinePath)
		if err != nil {
			return err
		}
		if m.baseline, err = build(brs); err != nil {
			return fmt.Errorf("%s: %w", baselinePath, err)
		}
		m.baselineLabel = label
	}
	if plotDir != "" {
		if err := os.MkdirAll(plotDir, 0o755); err != nil {
			return err
		}
		rel := plotDir
		if docPath != "" {
			if r, err := filepath.Rel(filepath.Dir(docPath), plotDir); err == nil {
				rel = r
			}
		}
		if m.plots, err = drawPlots(m, plotDir, rel); err != nil {
			return err
		}
	}
	if docPath != "" {
		var b strings.Builder
		writeDoc(&b, m)
		if err := os.WriteFile(docPath, []byte(b.String()), 0o644); err != nil {
			return err
		}
	}
	for _, h := range m.headline() {
		fmt.Fprintf(stdout, "%s=%s\n", h.key, h.value)
	}
	return nil
}

// parseFile reads a results file, and the commit its "# commit:" line
// names, if any.
func parseFile(path string) ([]result, string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, "", err
	}
	rs, err := parse(strings.NewReader(string(b)))
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", path, err)
	}
	label := ""
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "# commit:"); ok {
			label = strings.TrimSpace(rest)
			break
		}
	}
	return rs, label, nil
}
