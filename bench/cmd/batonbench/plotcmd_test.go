package main

import (
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/batonrun/baton/bench/internal/report"
)

// TestPlotFromJSON: the plot subcommand reads a run's JSON and draws one bar
// per contender and batch size; input without cycle figures is an error,
// not an empty picture.
func TestPlotFromJSON(t *testing.T) {
	var set report.Set
	set.Add(batonQ, wSideCycle(1000, 1), mRate, 400000, "keys/s")
	set.Add(batonQ, wSideCycle(1000, 64), mRate, 500000, "keys/s")
	set.Add(natsSync, wSideCycle(1000, 1), mRate, 5000, "keys/s")
	js, err := report.JSON(set.Records, nil)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	in, out := filepath.Join(dir, "run.json"), filepath.Join(dir, "cycle.png")
	if err := os.WriteFile(in, js, 0o644); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr strings.Builder
	if code := run([]string{plotCmd, "-in", in, "-out", out}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	f, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	img, err := png.Decode(f)
	if err != nil {
		t.Fatalf("not a PNG: %v", err)
	}
	if b := img.Bounds(); b.Dx() < 100 || b.Dy() < 40 {
		t.Errorf("plot is %v", b)
	}

	empty := filepath.Join(dir, "empty.json")
	if err := os.WriteFile(empty, []byte("[]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	stderr.Reset()
	if code := run([]string{plotCmd, "-in", empty, "-out", filepath.Join(dir, "none.png")}, &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), "no bars") {
		t.Errorf("JSON without cycle figures: exit %d, stderr %q", code, stderr.String())
	}
	stderr.Reset()
	if code := run([]string{plotCmd, "-in", in}, &stdout, &stderr); code != 2 || !strings.Contains(stderr.String(), "usage") {
		t.Errorf("no -out: exit %d, stderr %q", code, stderr.String())
	}
}
