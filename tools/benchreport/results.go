package main

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
)

// A result is one line of `go test -bench` output: the benchmark's name
// without the GOMAXPROCS suffix, its ns/op and every other metric.
type result struct {
	name    string
	metrics map[string]float64
}

// parse reads the benchmark lines of go test's output and ignores the rest.
// A Benchmark line whose metrics do not parse is an error naming its line.
func parse(r io.Reader) ([]result, error) {
	var out []result
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	line := 0
	for sc.Scan() {
		line++
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		if _, err := strconv.Atoi(f[1]); err != nil {
			continue // a log line that happens to begin with Benchmark
		}
		name := f[0]
		if i := strings.LastIndexByte(name, '-'); i > 0 {
			if _, err := strconv.Atoi(name[i+1:]); err == nil {
				name = name[:i]
			}
		}
		res := result{name: name, metrics: map[string]float64{}}
		rest := f[2:]
		if len(rest)%2 != 0 {
			return nil, fmt.Errorf("line %d: %s: a value without its unit", line, f[0])
		}
		for i := 0; i < len(rest); i += 2 {
			v, err := strconv.ParseFloat(rest[i], 64)
			if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
				return nil, fmt.Errorf("line %d: %s: %q is not a number", line, f[0], rest[i])
			}
			res.metrics[rest[i+1]] = v
		}
		out = append(out, res)
	}
	return out, sc.Err()
}

// series gathers the runs of one measurement, keyed by the size it ran at.
type series map[float64][]map[string]float64

// collect groups the results named name (exactly) by the metric sizeUnit
// ("flows", "pods"); results without that metric take def.
func collect(rs []result, name, sizeUnit string, def float64) series {
	s := series{}
	for _, r := range rs {
		if r.name != name {
			continue
		}
		size, ok := r.metrics[sizeUnit]
		if !ok {
			size = def
		}
		s[size] = append(s[size], r.metrics)
	}
	return s
}

// sizes are the sizes s holds, ascending.
func (s series) sizes() []float64 {
	var out []float64
	for k := range s {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// get is the median over the runs at size of metric unit; ok is false when
// none has it.
func (s series) get(size float64, unit string) (float64, bool) {
	var vs []float64
	for _, m := range s[size] {
		if v, ok := m[unit]; ok {
			vs = append(vs, v)
		}
	}
	if len(vs) == 0 {
		return 0, false
	}
	slices.Sort(vs)
	if len(vs)%2 == 1 {
		return vs[len(vs)/2], true
	}
	return (vs[len(vs)/2-1] + vs[len(vs)/2]) / 2, true
}
