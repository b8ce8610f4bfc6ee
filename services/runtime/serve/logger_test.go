package serve

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestLoggerWritesDurationsAsStrings: a duration in a JSON log line reads
// "1.5s", as etcd writes it, not 1500000000.
func TestLoggerWritesDurationsAsStrings(t *testing.T) {
	var b bytes.Buffer
	NewLogger(&b, slog.LevelInfo).Info("recovered", "took", 1500*time.Millisecond, "keys", 3)
	if got := b.String(); !strings.Contains(got, `"took":"1.5s"`) || !strings.Contains(got, `"keys":3`) {
		t.Errorf("log line %s: want \"took\":\"1.5s\" and \"keys\":3", got)
	}
}
