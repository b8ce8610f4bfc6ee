package cli

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// TestEvents: get events lists Events in kubectl's columns, the last
// recorded last, and describe ends with those about the object described,
// by uid, or <none>. The events are written as package sdk/events writes
// them; the worker's tests record them through it.
func TestEvents(t *testing.T) {
	qaddr, _ := startQueue(t)
	e := env{etcd: startEtcd(t), queue: qaddr}
	etcd := etcdClient(t, e.etcd)
	put := func(key string, v any) {
		t.Helper()
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := etcd.Put(t.Context(), key, string(b)); err != nil {
			t.Fatal(err)
		}
	}
	rs := func(name, uid string) map[string]any {
		return map[string]any{"kind": "ReplicaSet", "metadata": map[string]any{"name": name, "namespace": "default", "uid": uid},
			"spec": map[string]any{"replicas": 1}}
	}
	put("/registry/replicasets/default/web", rs("web", "uid-web"))
	put("/registry/replicasets/default/quiet", rs("quiet", "uid-quiet"))

	// Days ago, so that the ages printed do not move while the test runs.
	now := time.Now().UTC()
	ago := func(days int) string {
		return now.Add(-time.Duration(days)*24*time.Hour - time.Hour).Format(time.RFC3339Nano)
	}
	event := func(ns, name string, about map[string]any, typ, reason, message string, count, first, last int) {
		t.Helper()
		put("/registry/events/"+ns+"/"+name, map[string]any{
			"kind":           "Event",
			"metadata":       map[string]any{"name": name, "namespace": ns, "uid": "uid-" + name, "creationTimestamp": ago(first)},
			"involvedObject": about, "type": typ, "reason": reason, "message": message, "count": count,
			"firstTimestamp": ago(first), "lastTimestamp": ago(last),
			"source": map[string]any{"component": "replicaset-controller"}, "reportingController": "replicaset-controller",
		})
	}
	web := map[string]any{"kind": "ReplicaSet", "namespace": "default", "name": "web", "uid": "uid-web"}
	earlierWeb := map[string]any{"kind": "ReplicaSet", "namespace": "default", "name": "web", "uid": "uid-gone"}
	// Key order (a, b, c) is not the order of their last times (b, c, a).
	event("default", "web.a", web, "Normal", "SuccessfulCreate", "Created pod: web-x7k2p", 3, 5, 2)
	event("default", "web.b", earlierWeb, "Normal", "SuccessfulCreate", "Created pod: web-old", 1, 9, 9)
	event("default", "web.c", web, "Warning", "FailedCreate", "Error creating:\nquota", 1, 4, 4)
	event("team-a", "api.d", map[string]any{"kind": "Pod", "namespace": "team-a", "name": "api"}, "Normal", "Started", "Started", 1, 1, 1)

	got := e.run(t, "", "get", "events").mustSucceed(t).stdout
	lines := strings.Split(strings.TrimSpace(got), "\n")
	if len(lines) != 4 || !hasRow(lines[0], "LAST", "SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE") ||
		!hasRow(lines[1], "9d", "Normal", "SuccessfulCreate", "replicaset/web", "Created", "pod:", "web-old") ||
		!hasRow(lines[2], "4d", "Warning", "FailedCreate", "replicaset/web", "Error", "creating:", "quota") ||
		!hasRow(lines[3], "2d", "(x3", "over", "5d)", "Normal", "SuccessfulCreate", "replicaset/web", "Created", "pod:", "web-x7k2p") {
		t.Errorf("get events: want kubectl's columns, one line each, the last recorded last:\n%s", got)
	}
	if got := e.run(t, "", "get", "ev", "-A").mustSucceed(t).stdout; !hasRow(got, "NAMESPACE", "LAST", "SEEN") ||
		!hasRow(got, "team-a", "1d", "Normal", "Started", "pod/api") || !hasRow(got, "default", "2d", "(x3") {
		t.Errorf("get ev -A:\n%s", got)
	}
	if got := e.run(t, "", "get", "events", "-n", "team-a", "-o", "name").mustSucceed(t).stdout; got != "event/api.d\n" {
		t.Errorf("get events -n team-a -o name: %q", got)
	}
	// Beside another kind, an event's row is not prefixed with a name it
	// does not show.
	if got := e.run(t, "", "get", "rs,events").mustSucceed(t).stdout; !hasRow(got, "replicaset/web") || !hasRow(got, "2d", "(x3") {
		t.Errorf("get rs,events:\n%s", got)
	}
	if got := e.run(t, "", "get", "all").mustSucceed(t).stdout; strings.Contains(got, "SuccessfulCreate") {
		t.Errorf("get all lists events; kubectl's all leaves them out:\n%s", got)
	}

	d := e.run(t, "", "describe", "rs", "web").mustSucceed(t).stdout
	_, section, ok := strings.Cut(d, "\nEvents:\n")
	rows := strings.Split(strings.TrimRight(section, "\n"), "\n")
	if !ok || len(rows) != 4 || !hasRow(rows[0], "Type", "Reason", "Age", "From", "Message") ||
		!hasRow(rows[2], "Warning", "FailedCreate", "4d", "replicaset-controller", "Error", "creating:", "quota") ||
		!hasRow(rows[3], "Normal", "SuccessfulCreate", "2d", "(x3", "over", "5d)", "replicaset-controller", "Created", "pod:", "web-x7k2p") {
		t.Errorf("describe rs web: want its two events last, the earlier ReplicaSet's left out:\n%s", d)
	}
	if d := e.run(t, "", "describe", "rs", "quiet").mustSucceed(t).stdout; !strings.HasSuffix(d, "\nEvents:       <none>\n") {
		t.Errorf("describe of an object without events:\n%s", d)
	}
}
