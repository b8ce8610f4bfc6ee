package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/batonrun/baton/bench/internal/report"
)

// plotCmd redraws the cycle plot from a run's JSON:
//
//	batonbench plot -in bench.json -out docs/benchmarks-cycle.png
//
// A full run draws its plot the same way, from the JSON it writes (or
// would write), so the picture and the JSON never disagree.
const plotCmd = "plot"

func runPlot(args []string, stderr io.Writer) int {
	fs := flag.NewFlagSet("batonbench plot", flag.ContinueOnError)
	fs.SetOutput(stderr)
	in := fs.String("in", "", "a run's JSON (BENCH_OUT)")
	out := fs.String("out", "", "the PNG to write")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *in == "" || *out == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "usage: batonbench plot -in results.json -out plot.png")
		return 2
	}
	js, err := os.ReadFile(*in)
	if err == nil {
		err = plotFromJSON(*out, js)
	}
	if err != nil {
		fmt.Fprintln(stderr, "batonbench plot:", err)
		return 1
	}
	fmt.Fprintln(stderr, "batonbench: wrote", *out)
	return 0
}

// plotFromJSON draws the cycle plot of the records in js (report.JSON's
// format).
func plotFromJSON(path string, js []byte) error {
	var recs []report.Record
	if err := json.Unmarshal(js, &recs); err != nil {
		return fmt.Errorf("read the records: %w", err)
	}
	return writeCyclePlot(path, recs)
}
