package baton

import (
	"bufio"
	"strings"
	"testing"
)

func TestParseMetrics(t *testing.T) {
	in := `# HELP go_gc_duration_seconds A summary.
# TYPE go_gc_duration_seconds summary
go_gc_duration_seconds{quantile="0.5"} 2.1e-05
go_gc_duration_seconds_count 7
baton_queue_depth{queue="a b"} 3
go_memstats_next_gc_bytes 4.194304e+06
broken line
`
	m, err := ParseMetrics(bufio.NewScanner(strings.NewReader(in)))
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]float64{
		`go_gc_duration_seconds{quantile="0.5"}`: 2.1e-05,
		"go_gc_duration_seconds_count":           7,
		`baton_queue_depth{queue="a b"}`:         3,
		"go_memstats_next_gc_bytes":              4194304,
	} {
		if m[k] != want {
			t.Errorf("%s = %v, want %v", k, m[k], want)
		}
	}
	if len(m) != 4 {
		t.Errorf("%d samples: %v", len(m), m)
	}
}
