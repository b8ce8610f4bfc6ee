package printer

import (
	"slices"
	"testing"
	"time"
)

func TestEventColumns(t *testing.T) {
	now := time.Date(2026, 11, 29, 20, 0, 0, 0, time.UTC)
	headers, row := Columns("Event", now)
	if want := []string{"LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"}; !slices.Equal(headers, want) {
		t.Errorf("headers %q, want kubectl's %q", headers, want)
	}
	repeated := map[string]any{
		"involvedObject": map[string]any{"kind": "ReplicaSet", "namespace": "default", "name": "web"},
		"type":           "Normal", "reason": "SuccessfulCreate", "message": "Created pod:\tweb-a\nand more",
		"count": 3.0, "firstTimestamp": "2026-11-29T19:00:00Z", "lastTimestamp": "2026-11-29T19:58:30.5Z",
	}
	if got, want := row(repeated), []string{"1m29s (x3 over 1h0m)", "Normal", "SuccessfulCreate", "replicaset/web", "Created pod: web-a and more"}; !slices.Equal(got, want) {
		t.Errorf("row of a repeated event %q, want %q", got, want)
	}
	once := map[string]any{"type": "Warning", "reason": "FailedCreate", "count": 1.0,
		"metadata": map[string]any{"creationTimestamp": "2026-11-29T19:59:00Z"}}
	if got, want := row(once), []string{"1m0s", "Warning", "FailedCreate", "-", ""}; !slices.Equal(got, want) {
		t.Errorf("row of an event recorded once, about nothing named, without lastTimestamp: %q, want %q", got, want)
	}
}
