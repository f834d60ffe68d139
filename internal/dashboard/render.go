package dashboard

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/font"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/text"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// Grafana's grid in pixels (at 96 DPI a pixel is 0.75 pt): 24 columns
// across Width, rows of RowHeight.
const (
	Width       = 1800
	RowHeight   = 30
	columns     = 24
	pad         = 6 // between panels, px
	maxLegend   = 8 // series named in a panel's legend
	pointsPerPx = 0.75
)

// Data is each panel's series, per target, by panel index.
type Data map[int][][]Series

// Run is what a rendering shows: a title, and the time range every
// panel's axis spans.
type Run struct {
	Title      string
	Start, End time.Time
}

// Render draws d's panels with data where the dashboard places them and
// writes a PNG. Rows are headings; a panel without data says so.
func Render(w io.Writer, d Dashboard, data Data, run Run) error {
	rows := 0
	for _, p := range d.Panels {
		rows = max(rows, p.GridPos.Y+p.GridPos.H)
	}
	heightPx := (rows+2)*RowHeight + pad
	c := vgimg.NewWith(vgimg.UseWH(px(Width), px(heightPx)), vgimg.UseDPI(96),
		vgimg.UseBackgroundColor(color.White))
	dc := draw.New(c)
	heading(dc, run.Title, heightPx, 20)
	top := heightPx - 2*RowHeight // the title's two rows
	for i, p := range d.Panels {
		area := cell(dc, p.GridPos, top)
		if p.Type == "row" {
			heading(area, p.Title, p.GridPos.H*RowHeight, 15)
			continue
		}
		pl, err := panelPlot(p, data[i], run)
		if err != nil {
			return fmt.Errorf("panel %q: %w", p.Title, err)
		}
		pl.Draw(area)
	}
	_, err := vgimg.PngCanvas{Canvas: c}.WriteTo(w)
	return err
}

func px(n int) vg.Length { return vg.Length(float64(n) * pointsPerPx) }

// cell is the canvas of a grid position, top the grid's top edge in px
// from the bottom.
func cell(dc draw.Canvas, g GridPos, top int) draw.Canvas {
	colPx := Width / columns
	left, right := g.X*colPx+pad, (g.X+g.W)*colPx-pad
	hi := top - g.Y*RowHeight - pad
	lo := top - (g.Y+g.H)*RowHeight + pad
	return draw.Canvas{Canvas: dc.Canvas, Rectangle: vg.Rectangle{
		Min: vg.Point{X: px(left), Y: px(lo)}, Max: vg.Point{X: px(right), Y: px(hi)}}}
}

// heading writes s at the top left of a band heightPx high.
func heading(dc draw.Canvas, s string, heightPx int, size vg.Length) {
	sty := text.Style{Color: color.Black, Font: font.From(plot.DefaultFont, size), Handler: plot.DefaultTextHandler,
		YAlign: draw.YTop}
	dc.FillText(sty, vg.Point{X: dc.Min.X + px(pad), Y: dc.Min.Y + px(heightPx-pad)}, s)
}

// panelPlot is one time series panel: a line per series of each target,
// the first maxLegend named in the legend.
func panelPlot(p Panel, targets [][]Series, run Run) (*plot.Plot, error) {
	pl := plot.New()
	pl.X.Min, pl.X.Max = float64(run.Start.Unix()), float64(run.End.Unix())
	pl.Title.Text = p.Title
	pl.X.Tick.Marker = plot.TimeTicks{Format: "15:04"}
	pl.Y.Label.Text = p.Field.Defaults.Unit
	pl.Add(plotter.NewGrid())
	pl.Legend.Top, pl.Legend.Left = true, true
	pl.Legend.TextStyle.Font.Size = 9
	n := 0
	for ti, series := range targets {
		for _, s := range series {
			l, err := line(s, plotutil.Color(n))
			if err != nil {
				return nil, err
			}
			if l == nil {
				continue
			}
			pl.Add(l)
			if n < maxLegend {
				pl.Legend.Add(p.Targets[ti].Legend(s.Labels), l)
			}
			n++
		}
	}
	if n == 0 {
		pl.Title.Text += " (no data in the run)"
	} else if n > maxLegend {
		pl.Title.Text += fmt.Sprintf(" (%d series, %d named)", n, maxLegend)
	}
	return pl, nil
}

// line is a series as a line (nil when it has no finite point): NaN and
// infinite values (a quantile of no observations) are left out.
func line(s Series, c color.Color) (*plotter.Line, error) {
	pts := make(plotter.XYs, 0, len(s.Values))
	for i, v := range s.Values {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			continue
		}
		pts = append(pts, plotter.XY{X: float64(s.Times[i].Unix()), Y: v})
	}
	if len(pts) == 0 {
		return nil, nil
	}
	l, err := plotter.NewLine(pts)
	if err != nil {
		return nil, err
	}
	l.Color = c
	l.Width = vg.Points(1.5)
	return l, nil
}

// Step is the query step that gives each panel about 200 points over
// the run [start, end].
func Step(start, end time.Time) (time.Duration, error) {
	if !end.After(start) {
		return 0, fmt.Errorf("empty window %s..%s", start, end)
	}
	return max(end.Sub(start)/200, time.Second).Round(time.Second), nil
}
