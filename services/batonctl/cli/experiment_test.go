package cli

import (
	"encoding/json"
	"strings"
	"testing"

	queueclient "github.com/batonrun/baton/client/queue"
)

// TestExperimentCommand drives `batonctl experiment` as a user does, against
// an embedded etcd and the real queue: the tables, -o json, and the errors.
// The experiments' own outcomes are tested in internal/experiment.
func TestExperimentCommand(t *testing.T) {
	qaddr, _ := startQueue(t)
	e := env{etcd: startEtcd(t), queue: qaddr}

	out := e.run(t, "", "experiment", "repeat").mustSucceed(t).stdout
	if !hasRow(out, "Notifications", "observed", "3", "3") || !hasRow(out, "Reconciles", "3", "1") || !hasRow(out, "Correct", "number", "needed", "1", "1") {
		t.Errorf("repeat table:\n%s", out)
	}

	out = e.run(t, "", "experiment", "failure", "-o", "json").mustSucceed(t).stdout
	var f struct {
		Direct struct{ Pods int } `json:"direct_reaction"`
		Baton  struct {
			Pods  int
			Steps []struct {
				Inspect struct {
					Attempts  int    `json:"attempts"`
					LastError string `json:"last_error"`
				} `json:"inspect"`
			} `json:"steps"`
		} `json:"baton"`
	}
	if err := json.Unmarshal([]byte(out), &f); err != nil {
		t.Fatalf("failure -o json: %v\n%s", err, out)
	}
	if f.Baton.Pods != 3 || f.Direct.Pods != 1 || len(f.Baton.Steps) != 3 || f.Baton.Steps[2].Inspect.Attempts != 2 || f.Baton.Steps[2].Inspect.LastError == "" {
		t.Errorf("failure -o json:\n%s", out)
	}

	out = e.run(t, "", "experiment", "burst", "--discover", "100/s", "--execute", "1200/m", "--duration", "500ms", "--keys", "3").mustSucceed(t).stdout
	for _, row := range [][]string{{"Discovered", "/", "second"}, {"Completed", "/", "second"}, {"Backlog"}, {"Who", "holds", "the", "backlog", "nobody", "the", "queue:", "depth"}, {"Collapsed", "announcements", "0"}} {
		if !hasRow(out, row...) {
			t.Errorf("burst table lacks %q:\n%s", row, out)
		}
	}

	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"experiment"}, 2, "usage: batonctl experiment"},
		{[]string{"experiment", "storm"}, 2, `unknown experiment "storm"`},
		{[]string{"experiment", "burst", "--discover", "fast"}, 2, "positive rate"},
		{[]string{"experiment", "burst", "--execute", "10/day"}, 2, "unknown unit"},
		{[]string{"experiment", "burst", "--duration", "0s"}, 2, "--duration: must be positive"},
		{[]string{"experiment", "repeat", "--notifications", "0"}, 2, "--notifications"},
		{[]string{"experiment", "failure", "--failures", "5"}, 2, "--failures"},
		{[]string{"experiment", "repeat", "-o", "yaml"}, 2, "unknown output format"},
	} {
		r := e.run(t, "", tc.args...)
		if r.code != tc.code || !strings.Contains(r.stderr, tc.want) {
			t.Errorf("%v: exit %d, stderr %q; want %d and %q", tc.args, r.code, r.stderr, tc.code, tc.want)
		}
	}

	// A queue that already holds keys is refused, not mixed into the
	// experiment's numbers.
	q, err := queueclient.Dial(qaddr)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if _, err := q.Add(t.Context(), "experiment-repeat", []string{"left/over"}, queueclient.AddOptions{}); err != nil {
		t.Fatal(err)
	}
	r := e.run(t, "", "experiment", "repeat")
	if r.code != 1 || !strings.Contains(r.stderr, "queue experiment-repeat holds 1 keys") {
		t.Errorf("busy queue: exit %d, stderr %q", r.code, r.stderr)
	}

	// A bad option is a usage error even when nothing answers.
	if r := (env{}).run(t, "", "experiment", "failure", "--replicas", "1"); r.code != 2 || !strings.Contains(r.stderr, "--replicas") {
		t.Errorf("bad option, no stack: exit %d, stderr %q", r.code, r.stderr)
	}

	// Nothing answers: the error names the endpoint and its flag.
	r = env{etcd: e.etcd}.run(t, "", "experiment", "repeat")
	if r.code != 1 || !strings.Contains(r.stderr, "connection refused: is the queue running at "+deadAddr+"? (set --queue-addr)") {
		t.Errorf("no queue: exit %d, stderr %q", r.code, r.stderr)
	}
}
