package report

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
)

func TestFormat(t *testing.T) {
	for _, tc := range []struct {
		v    float64
		unit string
		want string
	}{
		{1234567, "keys/s", "1,234,567"},
		{999.6, "calls/s", "1,000"},
		{-4500, "B", "-4,500"},
		{0.1934, "ms", "0.193"},
		{12.345, "ms", "12.3"},
		{1.5, "x", "1.50"},
		{105.4, "B/key", "105"},
		{3.25, "keys/s", "3.25"},
		{0, "keys", "0"},
		{math.NaN(), "x", "–"},
	} {
		if got := Format(tc.v, tc.unit); got != tc.want {
			t.Errorf("Format(%v, %q) = %q, want %q", tc.v, tc.unit, got, tc.want)
		}
	}
}

func TestTargets(t *testing.T) {
	for _, tc := range []struct {
		t    Target
		want string
	}{
		{Target{Measured: 10, Limit: 5, AtLeast: true}, "PASS"},
		{Target{Measured: 5, Limit: 5, AtLeast: true}, "PASS"},
		{Target{Measured: 4.9, Limit: 5, AtLeast: true}, "MISS"},
		{Target{Measured: 2, Limit: 2}, "PASS"},
		{Target{Measured: 2.1, Limit: 2}, "MISS"},
		{Target{Measured: math.NaN(), Limit: 2}, "MISS"},
		{Target{Measured: 1, Limit: 2, Missing: true}, "n/a"},
	} {
		if got := tc.t.Verdict(); got != tc.want {
			t.Errorf("%+v: %s, want %s", tc.t, got, tc.want)
		}
	}
}

func TestSetAndJSON(t *testing.T) {
	var s Set
	s.Add("reference", "echo 1 caller", "rate", 18600, "calls/s")
	s.Add("baton", "add batch 1", "rate", math.NaN(), "keys/s")
	s.Add("reference", "echo 1 caller", "rate", 18700, "calls/s") // a re-measure wins
	if v, ok := s.Get("reference", "echo 1 caller", "rate"); !ok || v != 18700 {
		t.Fatalf("Get: %v %v", v, ok)
	}
	if _, ok := s.Get("baton", "nothing", "rate"); ok {
		t.Fatal("Get found a figure never added")
	}
	b, err := JSON(s.Records, []Target{{Name: "t1", Measured: 3, Limit: 2, Unit: "x", AtLeast: true}})
	if err != nil {
		t.Fatal(err)
	}
	var back []map[string]any
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	if len(back) != 6 {
		t.Fatalf("%d records, want 3 figures + 3 target records", len(back))
	}
	for _, k := range []string{"contender", "workload", "metric", "value", "unit"} {
		if _, ok := back[0][k]; !ok {
			t.Errorf("record lacks %q: %v", k, back[0])
		}
	}
	if back[1]["value"] != 0.0 {
		t.Errorf("NaN written as %v, want 0", back[1]["value"])
	}
	if last := back[5]; last["contender"] != "target" || last["metric"] != "pass" || last["value"] != 1.0 {
		t.Errorf("target pass record: %v", last)
	}

	s.Keep("baton", "cycle", "rate", 10, "keys/s", true)
	s.Keep("baton", "cycle", "rate", 30, "keys/s", true)
	s.Keep("baton", "cycle", "rate", 20, "keys/s", true)
	s.Keep("baton", "cycle", "p50", 2, "ms", false)
	s.Keep("baton", "cycle", "p50", 1, "ms", false)
	s.Keep("baton", "cycle", "p50", 3, "ms", false)
	if v, _ := s.Get("baton", "cycle", "rate"); v != 30 {
		t.Errorf("best rate %v, want 30", v)
	}
	if v, _ := s.Get("baton", "cycle", "p50"); v != 1 {
		t.Errorf("best p50 %v, want 1", v)
	}
	if n := len(s.Records); n != 5 {
		t.Errorf("%d records after Keep, want 5", n)
	}
	s.Records = s.Records[:3]

	var tb strings.Builder
	if err := WriteTable(&tb, s.Records); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(tb.String(), "| reference | echo 1 caller | rate | 18,600 | calls/s |") {
		t.Errorf("table:\n%s", tb.String())
	}
	tb.Reset()
	if err := WriteTargets(&tb, []Target{{Name: "p50", Measured: 1, Limit: 0.5, Unit: "ms", Basis: "2 × fsync"}}); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(tb.String(), "| p50 | 1.00 ms | ≤ 0.500 ms (2 × fsync) | 2.00 | **MISS** |") {
		t.Errorf("targets:\n%s", tb.String())
	}
}

// TestAtLeastTimes: a target stated as a multiple of another figure of the
// run (the mTLS cycle against the plaintext one) is judged, printed and
// written like any other, and also says how many times its reference was
// measured.
func TestAtLeastTimes(t *testing.T) {
	for _, tc := range []struct {
		measured, reference float64
		missing             bool
		verdict, line       string
	}{
		{400_000, 500_000, false, "PASS", "mtls: 400,000 keys/s, 0.800× plaintext (target ≥0.8×): PASS"},
		{460_000, 500_000, false, "PASS", "mtls: 460,000 keys/s, 0.920× plaintext (target ≥0.8×): PASS"},
		{399_000, 500_000, false, "MISS", "mtls: 399,000 keys/s, 0.798× plaintext (target ≥0.8×): MISS"},
		{500_000, 450_000, false, "PASS", "mtls: 500,000 keys/s, 1.11× plaintext (target ≥0.8×): PASS"},
		{400_000, 0, false, "n/a", "mtls: 400,000 keys/s, –× plaintext (target ≥0.8×): n/a"},
		{400_000, math.NaN(), false, "n/a", "mtls: 400,000 keys/s, –× plaintext (target ≥0.8×): n/a"},
		{400_000, 500_000, true, "n/a", "mtls: 400,000 keys/s, 0.800× plaintext (target ≥0.8×): n/a"},
	} {
		tg := AtLeastTimes("mtls", tc.measured, "plaintext", tc.reference, 0.8, "keys/s", "0.8 × plaintext")
		tg.Missing = tg.Missing || tc.missing
		if !tg.Relative() || !tg.AtLeast || (tc.reference > 0 && tg.Limit != 0.8*tc.reference) {
			t.Fatalf("AtLeastTimes(%v, %v) = %+v", tc.measured, tc.reference, tg)
		}
		if got := tg.Verdict(); got != tc.verdict {
			t.Errorf("%v of %v: %s, want %s", tc.measured, tc.reference, got, tc.verdict)
		}
		if got := tg.Line(); got != tc.line {
			t.Errorf("Line() = %q, want %q", got, tc.line)
		}
	}

	abs := Target{Name: "cycle", Measured: 1, Limit: 2, Unit: "keys/s", AtLeast: true}
	rel := AtLeastTimes("mtls", 460_000, "plaintext", 500_000, 0.8, "keys/s", "0.8 × plaintext")
	if abs.Relative() || !math.IsNaN(abs.Times()) {
		t.Errorf("an absolute target is not relative: %v, %v", abs.Relative(), abs.Times())
	}
	var b strings.Builder
	if err := WriteRelative(&b, []Target{abs, rel}); err != nil {
		t.Fatal(err)
	}
	if want := "- mtls: 460,000 keys/s, 0.920× plaintext (target ≥0.8×): PASS\n"; b.String() != want {
		t.Errorf("WriteRelative = %q, want only the relative target's line %q", b.String(), want)
	}
	b.Reset()
	if err := WriteRelative(&b, []Target{abs}); err != nil || b.Len() != 0 {
		t.Errorf("WriteRelative without a relative target = %q, %v", b.String(), err)
	}
	b.Reset()
	if err := WriteTargets(&b, []Target{rel}); err != nil {
		t.Fatal(err)
	}
	if want := "| mtls | 460,000 keys/s | ≥ 400,000 keys/s (0.8 × plaintext) | 1.15 | **PASS** |"; !strings.Contains(b.String(), want) {
		t.Errorf("targets table:\n%s\nlacks %q", b.String(), want)
	}

	js, err := JSON(nil, []Target{abs, rel})
	if err != nil {
		t.Fatal(err)
	}
	var back []Record
	if err := json.Unmarshal(js, &back); err != nil {
		t.Fatal(err)
	}
	got := map[string]Record{}
	for _, r := range back {
		got[r.Workload+"/"+r.Metric] = r
	}
	if len(back) != 3+5 {
		t.Fatalf("%d records, want 3 for the absolute target and 5 for the relative one: %v", len(back), back)
	}
	for key, want := range map[string]Record{
		"mtls/measured":              {Value: 460_000, Unit: "keys/s"},
		"mtls/bound":                 {Value: 400_000, Unit: "keys/s"},
		"mtls/pass":                  {Value: 1, Unit: "bool"},
		"mtls/reference (plaintext)": {Value: 500_000, Unit: "keys/s"},
		"mtls/times the reference":   {Value: 0.92, Unit: "x"},
	} {
		r, ok := got[key]
		if !ok || r.Contender != "target" || math.Abs(r.Value-want.Value) > 1e-9 || r.Unit != want.Unit {
			t.Errorf("%s: %+v (found %v), want %v %s", key, r, ok, want.Value, want.Unit)
		}
	}
	if _, ok := got["cycle/times the reference"]; ok {
		t.Error("an absolute target got a reference record")
	}
}
