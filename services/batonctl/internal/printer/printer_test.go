package printer

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestDuration(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want string
	}{
		{-time.Second, "0s"}, {850 * time.Millisecond, "850ms"}, {45 * time.Second, "45s"},
		{3*time.Minute + 10*time.Second, "3m10s"}, {42 * time.Minute, "42m"},
		{2*time.Hour + 5*time.Minute, "2h5m"}, {100 * time.Hour, "4d"},
	}
	for _, tc := range tests {
		if got := Duration(tc.d); got != tc.want {
			t.Errorf("Duration(%v) = %q, want %q", tc.d, got, tc.want)
		}
	}
	now := time.Date(2026, 11, 29, 20, 0, 0, 0, time.UTC)
	if got := Age("2026-11-29T19:59:00Z", now); got != "1m0s" {
		t.Errorf("Age = %q", got)
	}
	if got := Age("", now); got != "-" {
		t.Errorf("Age of nothing = %q", got)
	}
}

func decode(t *testing.T, s string) map[string]any {
	t.Helper()
	var m map[string]any
	dec := json.NewDecoder(strings.NewReader(s))
	dec.UseNumber()
	if err := dec.Decode(&m); err != nil {
		t.Fatal(err)
	}
	return m
}

func TestColumns(t *testing.T) {
	now := time.Date(2026, 11, 29, 20, 0, 0, 0, time.UTC)
	tests := []struct {
		kind, obj string
		want      []string
	}{
		{"Deployment", `{"metadata":{"name":"web","creationTimestamp":"2026-11-29T19:59:30Z"},"spec":{"replicas":3},"status":{"readyReplicas":2,"updatedReplicas":1}}`,
			[]string{"web", "2/3", "1", "2", "30s"}},
		{"Deployment", `{"metadata":{"name":"web"},"spec":{}}`, []string{"web", "0/1", "0", "0", "-"}},
		{"ReplicaSet", `{"metadata":{"name":"rs"},"spec":{"replicas":0},"status":{"replicas":1,"readyReplicas":1}}`, []string{"rs", "0", "1", "1", "-"}},
		{"StatefulSet", `{"metadata":{"name":"db"},"spec":{"replicas":3},"status":{"readyReplicas":1}}`, []string{"db", "1/3", "-"}},
		{"Job", `{"metadata":{"name":"pi"},"spec":{"completions":4},"status":{"succeeded":4,"conditions":[{"type":"Complete","status":"True"}]}}`,
			[]string{"pi", "Complete", "4/4", "0", "0", "-"}},
		{"Job", `{"metadata":{"name":"pi"},"spec":{},"status":{"active":1,"failed":7,"conditions":[{"type":"Failed","status":"True"}]}}`,
			[]string{"pi", "Failed", "0/1", "1", "7", "-"}},
		{"Job", `{"metadata":{"name":"pi"},"spec":{}}`, []string{"pi", "Running", "0/1", "0", "0", "-"}},
		{"Pod", `{"metadata":{"name":"p","ownerReferences":[{"kind":"ReplicaSet","name":"rs"}]},"spec":{"image":"x"},"status":{"phase":"Running","startTime":"2026-11-29T19:58:00.5Z"}}`,
			[]string{"p", "Running", "x", "replicaset/rs", "1m59s"}},
		{"Pod", `{"metadata":{"name":"p"},"spec":{}}`, []string{"p", "Pending", "-", "-", "-"}},
	}
	for _, tc := range tests {
		headers, row := Columns(tc.kind, now)
		got := row(decode(t, tc.obj))
		if len(got) != len(headers) || strings.Join(got, "|") != strings.Join(tc.want, "|") {
			t.Errorf("%s %s:\n got %q\nwant %q (headers %q)", tc.kind, tc.obj, got, tc.want, headers)
		}
	}
}

func TestYAMLNumbers(t *testing.T) {
	var b strings.Builder
	if err := YAML(&b, decode(t, `{"a":3,"b":"3","c":1.5}`)); err != nil {
		t.Fatal(err)
	}
	if got, want := b.String(), "a: 3\nb: \"3\"\nc: 1.5\n"; got != want {
		t.Errorf("YAML:\n%s\nwant\n%s", got, want)
	}
}

// A stream aligns the rows it was fitted to, as a Table would, and pads
// later rows to the same widths, widening a column only for a wider cell.
func TestStream(t *testing.T) {
	var b strings.Builder
	s := NewStream(&b, "NAME", "READY", "AGE")
	s.Fit("web", "3/3", "2m")
	s.Fit("cache-long-name", "1/1", "5s")
	if s.Headed() {
		t.Fatal("Fit printed the header")
	}
	s.Row("web", "3/3", "2m")
	s.Row("cache-long-name", "1/1", "5s")
	s.Row("db", "0/1", "0s")
	s.Row("a-much-longer-name-than-any", "1/1", "1s")
	want := "NAME              READY   AGE\n" +
		"web               3/3     2m\n" +
		"cache-long-name   1/1     5s\n" +
		"db                0/1     0s\n" +
		"a-much-longer-name-than-any   1/1     1s\n"
	if b.String() != want {
		t.Errorf("stream:\n%s\nwant:\n%s", b.String(), want)
	}
	var tb strings.Builder
	tbl := NewTable(&tb, "NAME", "READY", "AGE")
	tbl.Row("web", "3/3", "2m")
	tbl.Row("cache-long-name", "1/1", "5s")
	_ = tbl.Flush()
	if !strings.HasPrefix(b.String(), tb.String()) {
		t.Errorf("a stream's rows differ from a table's:\n%s\nwant:\n%s", b.String(), tb.String())
	}
}
