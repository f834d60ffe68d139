package soak

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"sort"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"

	"github.com/sandlot-dev/sandlot/test/bench/stats"
)

// table is the run's accounting per operation, in Markdown: counts by
// outcome and the latency of those that worked.
func table(records []record) string {
	var b strings.Builder
	b.WriteString("| operation | n | ok | failed | lost | p50 s | p99 s | max s |\n|---|---|---|---|---|---|---|---|\n")
	for _, op := range ops(records) {
		var n, oks, fails, losses int
		var secs []float64
		for _, r := range records {
			if r.op != op {
				continue
			}
			n++
			switch r.outcome {
			case ok:
				oks++
				secs = append(secs, r.end.Sub(r.start).Seconds())
			case failed:
				fails++
			case lost:
				losses++
			}
		}
		fmt.Fprintf(&b, "| %s | %d | %d | %d | %d | %s | %s | %s |\n", op, n, oks, fails, losses,
			sec(stats.Quantile(secs, 0.5)), sec(stats.Quantile(secs, 0.99)), sec(stats.Quantile(secs, 1)))
	}
	return b.String()
}

func sec(v float64) string {
	if math.IsNaN(v) {
		return "–"
	}
	return fmt.Sprintf("%.1f", v)
}

// bucket is how wide each point of the latency plot is.
func bucket(run time.Duration) time.Duration {
	return max(30*time.Second, (run / 20).Round(time.Second))
}

// series is, per operation, the q-quantile of the latency of the
// operations that worked and started in each bucket (minutes from t0).
func series(records []record, t0 time.Time, width time.Duration, q float64) map[string]plotter.XYs {
	byOp := map[string]map[int][]float64{}
	for _, r := range records {
		if r.outcome != ok {
			continue
		}
		i := int(r.start.Sub(t0) / width)
		if byOp[r.op] == nil {
			byOp[r.op] = map[int][]float64{}
		}
		byOp[r.op][i] = append(byOp[r.op][i], r.end.Sub(r.start).Seconds())
	}
	out := map[string]plotter.XYs{}
	for op, buckets := range byOp {
		keys := make([]int, 0, len(buckets))
		for i := range buckets {
			keys = append(keys, i)
		}
		sort.Ints(keys)
		for _, i := range keys {
			x := (time.Duration(i)*width + width/2).Minutes()
			out[op] = append(out[op], plotter.XY{X: x, Y: stats.Quantile(buckets[i], q)})
		}
	}
	return out
}

// drawRun writes the PNG: p50 and p99 latency per operation over the
// run, each fault's window shaded and named, failures marked.
func drawRun(w io.Writer, title string, records []record, windows []window, t0 time.Time, run time.Duration) error {
	const width, height = 1400, 1000
	img := vgimg.New(vg.Points(width*0.75), vg.Points(height*0.75))
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 2, Cols: 1, PadY: vg.Points(10), PadTop: vg.Points(10), PadBottom: vg.Points(10), PadLeft: vg.Points(10), PadRight: vg.Points(10)}
	names := ops(records)
	for row, q := range []float64{0.5, 0.99} {
		p := plot.New()
		p.Title.Text = fmt.Sprintf("%s — p%d latency per operation (s), %s buckets", title, int(q*100), bucket(run))
		p.X.Label.Text = "minutes into the run"
		p.Y.Label.Text = "seconds"
		p.X.Min, p.X.Max = 0, run.Minutes()
		s := series(records, t0, bucket(run), q)
		top := 1.0
		for _, xy := range s {
			for _, pt := range xy {
				top = max(top, pt.Y)
			}
		}
		p.Y.Min, p.Y.Max = 0, top*1.15
		if err := shadeFaults(p, windows, t0, top*1.15); err != nil {
			return err
		}
		if err := addLines(p, names, s); err != nil {
			return err
		}
		if err := markFailures(p, records, t0, top*1.1); err != nil {
			return err
		}
		p.Legend.Top, p.Legend.Left = true, false
		p.Draw(tiles.At(dc, 0, row))
	}
	_, err := vgimg.PngCanvas{Canvas: img}.WriteTo(w)
	return err
}

func addLines(p *plot.Plot, names []string, s map[string]plotter.XYs) error {
	for i, op := range names {
		xy, found := s[op]
		if !found {
			continue
		}
		l, pts, err := plotter.NewLinePoints(xy)
		if err != nil {
			return err
		}
		l.Color, pts.Color = plotutil.Color(i), plotutil.Color(i)
		l.Dashes = plotutil.Dashes(i / 7)
		pts.Shape = plotutil.Shape(i)
		p.Add(l, pts)
		p.Legend.Add(op, l, pts)
	}
	return nil
}

// shadeFaults draws each fault's window as a band named at its top, and
// its grace after it as a lighter one.
func shadeFaults(p *plot.Plot, windows []window, t0 time.Time, top float64) error {
	var labels plotter.XYLabels
	for _, w := range windows {
		x0, x1, x2 := w.start.Sub(t0).Minutes(), w.end.Sub(t0).Minutes(), w.end.Add(grace).Sub(t0).Minutes()
		// The fault itself, then its grace, lighter (translucent: the
		// lines show through).
		for _, b := range []struct {
			from, to float64
			c        color.NRGBA
		}{{x0, max(x1, x0+0.05), color.NRGBA{R: 230, G: 60, B: 60, A: 110}}, {x1, x2, color.NRGBA{R: 255, G: 170, B: 170, A: 45}}} {
			band, err := plotter.NewPolygon(plotter.XYs{{X: b.from, Y: 0}, {X: b.to, Y: 0}, {X: b.to, Y: top}, {X: b.from, Y: top}})
			if err != nil {
				return err
			}
			band.Color = b.c
			band.LineStyle.Width = 0
			p.Add(band)
		}
		labels.XYs = append(labels.XYs, plotter.XY{X: x0, Y: top * 0.97})
		labels.Labels = append(labels.Labels, w.fault)
	}
	if len(labels.XYs) == 0 {
		return nil
	}
	l, err := plotter.NewLabels(labels)
	if err != nil {
		return err
	}
	for i := range l.TextStyle {
		l.TextStyle[i].Rotation = -math.Pi / 2
		l.TextStyle[i].Font.Size = vg.Points(7)
	}
	p.Add(l)
	return nil
}

// markFailures puts a red cross at each failed or lost operation's end.
func markFailures(p *plot.Plot, records []record, t0 time.Time, y float64) error {
	var xy plotter.XYs
	for _, r := range records {
		if r.outcome != ok {
			xy = append(xy, plotter.XY{X: r.end.Sub(t0).Minutes(), Y: y})
		}
	}
	if len(xy) == 0 {
		return nil
	}
	sc, err := plotter.NewScatter(xy)
	if err != nil {
		return err
	}
	sc.GlyphStyle.Shape = draw.CrossGlyph{}
	sc.GlyphStyle.Color = color.RGBA{R: 200, A: 255}
	p.Add(sc)
	p.Legend.Add("failed or lost", sc)
	return nil
}
