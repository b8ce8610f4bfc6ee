// Package plot draws a horizontal bar chart as a PNG, in pure Go with the
// standard library's image packages and a fixed 7×13 bitmap font, so the
// benchmark can chart its own JSON without a plotting dependency.
package plot

import (
	"bytes"
	"errors"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"io"
	"math"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// Bar is one labelled value.
type Bar struct {
	Label string // left of the bar
	Value float64
	Text  string // right of the bar, e.g. the formatted value
	Group int    // bars of one group share a colour
}

// Chart is a horizontal bar chart; with Log the bars are on a log10 scale,
// for values that span orders of magnitude.
type Chart struct {
	Title string
	Bars  []Bar
	Log   bool
}

const (
	rowH   = 26
	barH   = 16
	margin = 12
	barW   = 420
	charW  = 7
)

var palette = []color.RGBA{{0x2b, 0x6c, 0xb0, 0xff}, {0xd9, 0x5f, 0x02, 0xff}, {0x1b, 0x9e, 0x77, 0xff}, {0x75, 0x70, 0xb3, 0xff}, {0xe7, 0x29, 0x8a, 0xff}, {0x66, 0xa6, 0x1e, 0xff}}

// WritePNG draws the chart.
func (c Chart) WritePNG(w io.Writer) error {
	if len(c.Bars) == 0 {
		return errors.New("plot: no bars")
	}
	labelW, textW := 0, 0
	top := 0.0
	for _, b := range c.Bars {
		labelW = max(labelW, len(b.Label)*charW)
		textW = max(textW, len(b.Text)*charW)
		top = max(top, c.scale(b.Value))
	}
	if top <= 0 {
		top = 1
	}
	width := margin + labelW + margin + barW + margin + textW + margin
	width = max(width, len(c.Title)*charW+2*margin)
	height := margin + 20 + len(c.Bars)*rowH + margin
	img := image.NewRGBA(image.Rect(0, 0, width, height))
	draw.Draw(img, img.Bounds(), image.White, image.Point{}, draw.Src)
	text(img, margin, margin+12, c.Title)
	x0 := margin + labelW + margin
	for i, b := range c.Bars {
		y := margin + 20 + i*rowH
		text(img, margin, y+barH-3, b.Label)
		n := int(math.Round(barW * max(c.scale(b.Value), 0) / top))
		if b.Value > 0 && n < 1 {
			n = 1
		}
		draw.Draw(img, image.Rect(x0, y, x0+n, y+barH), &image.Uniform{palette[b.Group%len(palette)]}, image.Point{}, draw.Src)
		text(img, x0+n+6, y+barH-3, b.Text)
	}
	// The axis.
	draw.Draw(img, image.Rect(x0-1, margin+18, x0, height-margin), image.Black, image.Point{}, draw.Src)
	var buf bytes.Buffer
	if err := png.Encode(&buf, img); err != nil {
		return err
	}
	_, err := w.Write(buf.Bytes())
	return err
}

func (c Chart) scale(v float64) float64 {
	if !c.Log {
		return v
	}
	if v <= 1 {
		return 0
	}
	return math.Log10(v)
}

func text(img draw.Image, x, y int, s string) {
	d := font.Drawer{Dst: img, Src: image.Black, Face: basicfont.Face7x13, Dot: fixed.P(x, y)}
	d.DrawString(s)
}
