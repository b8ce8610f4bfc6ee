package printer

import (
	"strings"
	"testing"
	"time"

	"github.com/batonrun/baton/client/schema"
)

func TestDeclared(t *testing.T) {
	now := time.Date(2026, 11, 29, 20, 0, 0, 0, time.UTC)
	cols := []schema.Column{
		{Name: "Replicas", Type: "integer", JSONPath: ".spec.replicas"},
		{Name: "Ready", Type: "boolean", JSONPath: ".status.ready"},
		{Name: "Phase", Type: "string", JSONPath: ".status.conditions[0].type"},
		{Name: "Ratio", Type: "number", JSONPath: ".spec.ratio", Priority: 1},
		{Name: "Started", Type: "date", JSONPath: ".status.startTime", Priority: 1},
		{Name: "Ports", Type: "string", JSONPath: ".spec.ports", Priority: 2},
	}
	obj := decode(t, `{"metadata":{"name":"x","creationTimestamp":"2026-11-29T19:00:00Z"},
		"spec":{"replicas":3,"ratio":0.5,"ports":[80,443]},
		"status":{"ready":true,"conditions":[{"type":"Running"}],"startTime":"2026-11-29T19:58:00Z"}}`)
	for _, tc := range []struct {
		wide            bool
		headers, values string
	}{
		{false, "NAME REPLICAS READY PHASE AGE", "x 3 true Running 1h0m"},
		{true, "NAME REPLICAS READY PHASE RATIO STARTED PORTS AGE", "x 3 true Running 0.5 2m0s [80,443] 1h0m"},
	} {
		headers, row := Declared(cols, tc.wide, now)
		if got := strings.Join(headers, " "); got != tc.headers {
			t.Errorf("wide=%v: headers %q, want %q", tc.wide, got, tc.headers)
		}
		if got := strings.Join(row(obj), " "); got != tc.values {
			t.Errorf("wide=%v: row %q, want %q", tc.wide, got, tc.values)
		}
	}
	// What is not there is <none>.
	_, row := Declared(cols, true, now)
	if got := strings.Join(row(decode(t, `{"metadata":{"name":"y"},"spec":{}}`)), " "); got != "y <none> <none> <none> <none> <none> <none> -" {
		t.Errorf("row of an empty object: %q", got)
	}
}
