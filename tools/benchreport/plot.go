package main

import (
	"math"
	"path/filepath"
	"strconv"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// drawPlots writes the plots of time and memory against table size, one
// line per tool, into dir; rel is dir as the document links it.
func drawPlots(m *model, dir, rel string) ([]plotRef, error) {
	all := append(append([]tool{}, readers...), offline...)
	timeOf := func(id string, f float64) float64 { return m.timeOf(id, f) / 1000 }
	memOf := func(id string, f float64) float64 { return m.mem(id, f) }
	plots := []struct {
		file, title, y string
		tools          []tool
		v              func(string, float64) float64
	}{
		{"performance-time.png", "Time to read the table, against its size", "seconds", all, timeOf},
		{"performance-memory.png", "Peak memory, against the table's size", "MiB", without(all, "shell-loop"), memOf},
	}
	var refs []plotRef
	for _, pl := range plots {
		p := plot.New()
		p.Title.Text = pl.title
		p.X.Label.Text = "conntrack entries"
		p.Y.Label.Text = pl.y
		p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
		var ticks []plot.Tick
		for _, f := range m.flows {
			ticks = append(ticks, plot.Tick{Value: f, Label: short(f)})
		}
		p.X.Tick.Marker, p.Y.Tick.Marker = plot.ConstantTicks(ticks), plot.LogTicks{Prec: -1}
		p.Legend.Top, p.Legend.Left = true, true
		p.Add(plotter.NewGrid())
		for i, t := range pl.tools {
			var xys plotter.XYs
			for _, f := range m.flows {
				if v := pl.v(t.id, f); !math.IsNaN(v) && v > 0 {
					xys = append(xys, plotter.XY{X: f, Y: v})
				}
			}
			if len(xys) == 0 {
				continue
			}
			l, pts, err := plotter.NewLinePoints(xys)
			if err != nil {
				return nil, err
			}
			l.Color, pts.Color = plotutil.Color(i), plotutil.Color(i)
			pts.Shape = plotutil.Shape(i)
			l.Width = vg.Points(1.5)
			if t.id == "floor" || t.id == "awk" {
				l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
			}
			p.Add(l, pts)
			p.Legend.Add(t.label, l, pts)
		}
		// Room above the lines for the legend.
		p.Y.Max *= 40
		p.Legend.TextStyle.Font.Size = vg.Points(8)
		p.Legend.Padding = vg.Points(2)
		p.Legend.YOffs = -vg.Points(4)
		p.Legend.XOffs = vg.Points(4)
		if err := p.Save(8*vg.Inch, 5*vg.Inch, filepath.Join(dir, pl.file)); err != nil {
			return nil, err
		}
		refs = append(refs, plotRef{title: pl.title, path: filepath.ToSlash(filepath.Join(rel, pl.file))})
	}
	return refs, nil
}

// short writes a table size as 10k, 1M.
func short(f float64) string {
	switch {
	case f >= 1e6 && math.Mod(f, 1e6) == 0:
		return strconv.FormatFloat(f/1e6, 'f', -1, 64) + "M"
	case f >= 1e3 && math.Mod(f, 1e3) == 0:
		return strconv.FormatFloat(f/1e3, 'f', -1, 64) + "k"
	}
	return strconv.FormatFloat(f, 'f', -1, 64)
}

func without(ts []tool, id string) []tool {
	var out []tool
	for _, t := range ts {
		if t.id != id {
			out = append(out, t)
		}
	}
	return out
}
