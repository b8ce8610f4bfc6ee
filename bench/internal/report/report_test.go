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
