package plot

import (
	"bytes"
	"image"
	"image/png"
	"testing"
)

func TestWritePNG(t *testing.T) {
	c := Chart{Title: "cycle keys/s", Bars: []Bar{{Label: "baton", Value: 100000, Text: "100,000"}, {Label: "etcd-queue", Value: 1000, Text: "1,000", Group: 1}}}
	var b bytes.Buffer
	if err := c.WritePNG(&b); err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(&b)
	if err != nil {
		t.Fatal(err)
	}
	// The first bar is full length, the second a hundredth of it: count
	// non-white pixels along each bar's middle row.
	bars := []int{barLen(img, margin+20+barH/2), barLen(img, margin+20+rowH+barH/2)}
	if bars[0] < barW-2 || bars[1] < 3 || bars[1] > 6 {
		t.Errorf("bar lengths %v, want ~%d and ~%d", bars, barW, barW/100)
	}
	if err := (Chart{}).WritePNG(&b); err == nil {
		t.Error("a chart without bars drew")
	}
}

// barLen counts the coloured (not white, not black) pixels in row y.
func barLen(img image.Image, y int) int {
	n := 0
	for x := img.Bounds().Min.X; x < img.Bounds().Max.X; x++ {
		r, g, b, _ := img.At(x, y).RGBA()
		if !(r == g && g == b) {
			n++
		}
	}
	return n
}
