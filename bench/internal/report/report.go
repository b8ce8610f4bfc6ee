// Package report holds a benchmark run's figures: records in the JSON shape
// every Baton benchmark writes ({"contender", "workload", "metric", "value",
// "unit"}), the targets judged as ratios between figures of the same run, and
// the table both are printed as.
package report

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// Record is one measured figure.
type Record struct {
	Contender string  `json:"contender"`
	Workload  string  `json:"workload"`
	Metric    string  `json:"metric"`
	Value     float64 `json:"value"`
	Unit      string  `json:"unit"`
}

// Set is the figures of one run, in the order they were measured.
type Set struct {
	Records []Record
}

// Add appends a figure.
func (s *Set) Add(contender, workload, metric string, value float64, unit string) {
	s.Records = append(s.Records, Record{Contender: contender, Workload: workload, Metric: metric, Value: value, Unit: unit})
}

// Keep records a figure of a repeated measurement, keeping the best value
// seen: the highest if higher is better, else the lowest. On a shared,
// noisy machine the best of a few rounds is the one least disturbed.
func (s *Set) Keep(contender, workload, metric string, value float64, unit string, higher bool) {
	for i := range s.Records {
		r := &s.Records[i]
		if r.Contender == contender && r.Workload == workload && r.Metric == metric {
			if (higher && value > r.Value) || (!higher && value < r.Value) {
				r.Value = value
			}
			return
		}
	}
	s.Add(contender, workload, metric, value, unit)
}

// Get returns a figure, if it was measured.
func (s *Set) Get(contender, workload, metric string) (float64, bool) {
	for i := len(s.Records) - 1; i >= 0; i-- {
		r := s.Records[i]
		if r.Contender == contender && r.Workload == workload && r.Metric == metric {
			return r.Value, true
		}
	}
	return 0, false
}

// Target compares a measured figure with a limit derived from other figures
// of the same run.
type Target struct {
	Name     string  // what must hold, e.g. "durable Add, 64 callers ≥ 50% of echo"
	Measured float64 // the figure judged
	Limit    float64 // the bound it is judged against
	Unit     string
	AtLeast  bool   // Measured ≥ Limit passes; otherwise Measured ≤ Limit passes
	Basis    string // how Limit was computed from the references
	Missing  bool   // a figure it needs was not measured

	// Reference and Factor, for a target made by AtLeastTimes: Limit is
	// Factor × Reference, the figure RefName of the same run, and the
	// target is also stated as Times() against it (Line).
	Reference float64
	RefName   string
	Factor    float64
}

// AtLeastTimes is the target "measured ≥ factor × reference", where
// reference is the figure refName measured in the same run (e.g. the
// mTLS cycle at least 0.8 × the plaintext one). Besides the usual row it
// has a Line saying how many times the reference was measured. A reference
// of 0 (nothing went through) or NaN leaves nothing to be a multiple of: the
// target is Missing, judged n/a rather than passed by any figure.
func AtLeastTimes(name string, measured float64, refName string, reference, factor float64, unit, basis string) Target {
	return Target{Name: name, Measured: measured, Limit: factor * reference, Unit: unit, AtLeast: true, Basis: basis,
		Missing: !(reference > 0), Reference: reference, RefName: refName, Factor: factor}
}

// Relative reports whether the target was made by AtLeastTimes.
func (t Target) Relative() bool { return t.RefName != "" }

// Times is Measured over Reference, NaN without a reference figure.
func (t Target) Times() float64 {
	if t.Reference == 0 {
		return math.NaN()
	}
	return t.Measured / t.Reference
}

// Line states a relative target in one line: "NAME: 380,000 keys/s,
// 0.920× plaintext (target ≥0.8×): PASS".
func (t Target) Line() string {
	return fmt.Sprintf("%s: %s %s, %s× %s (target ≥%s×): %s", t.Name, Format(t.Measured, t.Unit), t.Unit,
		Format(t.Times(), "x"), t.RefName, strconv.FormatFloat(t.Factor, 'f', -1, 64), t.Verdict())
}

// Pass reports whether the target holds.
func (t Target) Pass() bool {
	if t.Missing || math.IsNaN(t.Measured) || math.IsNaN(t.Limit) {
		return false
	}
	if t.AtLeast {
		return t.Measured >= t.Limit
	}
	return t.Measured <= t.Limit
}

// Verdict is PASS, MISS, or n/a when a figure is missing.
func (t Target) Verdict() string {
	switch {
	case t.Missing:
		return "n/a"
	case t.Pass():
		return "PASS"
	}
	return "MISS"
}

// Ratio is Measured over Limit: how far past (≥ 1 for AtLeast) or within
// (≤ 1 otherwise) the bound the figure is.
func (t Target) Ratio() float64 {
	if t.Limit == 0 {
		return math.NaN()
	}
	return t.Measured / t.Limit
}

// Format prints a value for people: thousands separated, durations and
// sizes with a sensible number of digits.
func Format(v float64, unit string) string {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return "–"
	case unit == "ms" || unit == "s" || unit == "x" || unit == "B/key":
		return strconv.FormatFloat(v, 'f', digits(v), 64)
	}
	if math.Abs(v) >= 100 || v == math.Trunc(v) {
		return thousands(int64(math.Round(v)))
	}
	return strconv.FormatFloat(v, 'f', digits(v), 64)
}

// digits keeps three significant digits below 100 and none above.
func digits(v float64) int {
	a := math.Abs(v)
	switch {
	case a >= 100:
		return 0
	case a >= 10:
		return 1
	case a >= 1:
		return 2
	case a >= 0.1:
		return 3
	}
	return 4
}

func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := strings.HasPrefix(s, "-")
	s = strings.TrimPrefix(s, "-")
	var b strings.Builder
	if neg {
		b.WriteByte('-')
	}
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}

// WriteTable writes the records as a Markdown table.
func WriteTable(w io.Writer, recs []Record) error {
	var b strings.Builder
	b.WriteString("| contender | workload | metric | value | unit |\n|---|---|---|---:|---|\n")
	for _, r := range recs {
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s |\n", r.Contender, r.Workload, r.Metric, Format(r.Value, r.Unit), r.Unit)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteTargets writes the targets as a Markdown table.
func WriteTargets(w io.Writer, ts []Target) error {
	var b strings.Builder
	b.WriteString("| target | measured | bound | measured / bound | result |\n|---|---:|---:|---:|---|\n")
	for _, t := range ts {
		cmp := "≤"
		if t.AtLeast {
			cmp = "≥"
		}
		fmt.Fprintf(&b, "| %s | %s %s | %s %s (%s) | %s | **%s** |\n", t.Name,
			Format(t.Measured, t.Unit), t.Unit, cmp+" "+Format(t.Limit, t.Unit), t.Unit, t.Basis,
			Format(t.Ratio(), "x"), t.Verdict())
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteRelative writes the Line of each relative target (AtLeastTimes) as a
// Markdown list, nothing when there is none.
func WriteRelative(w io.Writer, ts []Target) error {
	var b strings.Builder
	for _, t := range ts {
		if t.Relative() {
			fmt.Fprintf(&b, "- %s\n", t.Line())
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// JSON returns the records followed by one record per target and figure
// (contender "target": measured, bound and pass as 1 or 0; for a relative
// target also its reference figure and the times measured, "x"), as the
// indented JSON list BENCH_OUT receives.
func JSON(recs []Record, ts []Target) ([]byte, error) {
	out := append([]Record(nil), recs...)
	for _, t := range ts {
		pass := 0.0
		if t.Pass() {
			pass = 1
		}
		out = append(out,
			Record{Contender: "target", Workload: t.Name, Metric: "measured", Value: finite(t.Measured), Unit: t.Unit},
			Record{Contender: "target", Workload: t.Name, Metric: "bound", Value: finite(t.Limit), Unit: t.Unit},
			Record{Contender: "target", Workload: t.Name, Metric: "pass", Value: pass, Unit: "bool"},
		)
		if t.Relative() {
			out = append(out,
				Record{Contender: "target", Workload: t.Name, Metric: "reference (" + t.RefName + ")", Value: t.Reference, Unit: t.Unit},
				Record{Contender: "target", Workload: t.Name, Metric: "times the reference", Value: t.Times(), Unit: "x"},
			)
		}
	}
	for i := range out {
		out[i].Value = finite(out[i].Value)
	}
	b, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// finite maps NaN and infinities (not representable in JSON) to 0.
func finite(v float64) float64 {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0
	}
	return v
}
