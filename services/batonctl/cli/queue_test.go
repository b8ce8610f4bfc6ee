package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	queueclient "github.com/batonrun/baton/client/queue"
	"github.com/batonrun/baton/test/framework"
)

// TestQueueMembers runs batonctl queue members against the real
// baton-queue, a queue of one member: the table and -o json show it (its
// --name, its address, no peer, the leader, its term and an applied index
// that rises with a change), and add and remove print the queue's refusal
// as it worded it, exit 1; a command line missing a part is exit 2.
func TestQueueMembers(t *testing.T) {
	q := framework.StartQueue(t, framework.QueueOptions{Args: []string{"--name", "queue-a"}})
	e := env{queue: q.Addr}

	table := e.run(t, "", "queue", "members").mustSucceed(t).stdout
	lines := strings.Split(strings.TrimSpace(table), "\n")
	if len(lines) != 2 || !hasRow(lines[0], "NAME", "CLIENT-ADDR", "PEER-ADDR", "LEADER", "TERM", "APPLIED") ||
		!hasRow(lines[1], "queue-a", q.Addr, "-", "true") {
		t.Fatalf("queue members:\n%s", table)
	}

	type member struct {
		Name         string `json:"name"`
		ClientAddr   string `json:"clientAddr"`
		PeerAddr     string `json:"peerAddr"`
		Leader       bool   `json:"leader"`
		Term         string `json:"term"` // uint64 is a string in protojson
		AppliedIndex string `json:"appliedIndex"`
	}
	members := func() []member {
		t.Helper()
		var out struct {
			Members []member `json:"members"`
		}
		r := e.run(t, "", "queue", "members", "-o", "json").mustSucceed(t)
		if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
			t.Fatalf("queue members -o json: %v\n%s", err, r.stdout)
		}
		return out.Members
	}
	before := members()
	if len(before) != 1 || before[0].Name != "queue-a" || before[0].ClientAddr != q.Addr || before[0].PeerAddr != "" || !before[0].Leader || before[0].Term == "0" {
		t.Fatalf("queue members -o json = %+v", before)
	}
	if !hasRow(lines[1], "queue-a", q.Addr, "-", "true", before[0].Term) {
		t.Errorf("the table's term is not the JSON's %s:\n%s", before[0].Term, table)
	}
	if _, err := q.Client.Add(t.Context(), "jobs", []string{"default/a"}, queueclient.AddOptions{}); err != nil {
		t.Fatal(err)
	}
	after := members()
	was, _ := strconv.ParseUint(before[0].AppliedIndex, 10, 64)
	if now, err := strconv.ParseUint(after[0].AppliedIndex, 10, 64); err != nil || now <= was {
		t.Errorf("applied index %q after an Add, was %d: want it higher", after[0].AppliedIndex, was)
	}

	for _, tc := range []struct {
		name     string
		args     []string
		wantCode int
		want     string // the whole of stderr
	}{
		{"add refused", []string{"queue", "members", "add", "queue-b", "--peer-addr", "queue-b:7072", "--client-addr", "queue-b:7070"}, 1,
			`error: member "queue-b" was not added: this queue is one member, "queue-a", started without --initial-cluster, and membership changes need a replicated queue; nothing changed` + "\n"},
		{"remove refused", []string{"queue", "members", "remove", "queue-a"}, 1,
			`error: member "queue-a" was not removed: this queue is one member, "queue-a", started without --initial-cluster, and membership changes need a replicated queue; nothing changed` + "\n"},
		{"add a bad name", []string{"queue", "members", "add", "queue=b", "--peer-addr", "queue-b:7072"}, 1,
			`error: invalid argument: name "queue=b" has "=" at byte 5: a member name is letters, digits, '.', '-' and '_'` + "\n"},
		{"add a wildcard peer address", []string{"queue", "members", "add", "queue-b", "--peer-addr", "0.0.0.0:7072"}, 1,
			`error: invalid argument: peer_addr "0.0.0.0:7072" has the wildcard host 0.0.0.0, where a process listens: give the host others dial` + "\n"},
		{"add without --peer-addr", []string{"queue", "members", "add", "queue-b"}, 2,
			"error: queue members add needs --peer-addr H:P, the address the new member's peers reach it at\n"},
		{"add without a name", []string{"queue", "members", "add", "--peer-addr", "queue-b:7072"}, 2,
			"error: usage: batonctl queue members add NAME --peer-addr H:P [--client-addr H:P] [-o json]\n"},
		{"remove two", []string{"queue", "members", "remove", "a", "b"}, 2,
			"error: usage: batonctl queue members remove NAME [-o json]\n"},
		{"unknown subcommand", []string{"queue", "members", "promote", "a"}, 2,
			`error: unknown queue members command "promote" (batonctl queue members --help lists them)` + "\n"},
		{"mistyped subcommand", []string{"queue", "members", "remvoe", "a"}, 2,
			`error: unknown queue members command "remvoe": did you mean remove? (batonctl queue members --help lists them)` + "\n"},
		{"yaml", []string{"queue", "members", "-o", "yaml"}, 2, "error: unknown output format \"yaml\" (json)\n"},
		{"--peer-addr on remove", []string{"queue", "members", "remove", "a", "--peer-addr", "x:1"}, 2,
			"error: flag provided but not defined: -peer-addr (batonctl queue members remove -h lists its flags)\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := e.run(t, "", tc.args...)
			if r.code != tc.wantCode || r.stderr != tc.want || r.stdout != "" {
				t.Errorf("exit %d, want %d\nstderr: %q\nwant:   %q\nstdout: %q", r.code, tc.wantCode, r.stderr, tc.want, r.stdout)
			}
		})
	}
	if got := members(); len(got) != 1 || got[0].Name != "queue-a" {
		t.Errorf("after the refused changes, the members are %+v", got)
	}

	// A list of members whose first is down (a leader just killed): the
	// next one answers, within the one try each member gets.
	if r := (env{queue: deadAddr + "," + q.Addr}).run(t, "", "queue", "members").mustSucceed(t); !strings.Contains(r.stdout, "queue-a") {
		t.Errorf("queue members with the first of two members down:\n%s", r.stdout)
	}

	dead := env{}.run(t, "", "queue", "members")
	if dead.code != 1 || !strings.Contains(dead.stderr, "connection refused: is the queue running at 127.0.0.1:1? (set --queue-addr)") {
		t.Errorf("queue members with no queue: exit %d, stderr %q", dead.code, dead.stderr)
	}
}

// TestQueueSnapshotSave: batonctl queue snapshot save writes a backup of
// the real baton-queue to the file named (checked whole before it is
// renamed there, and saying how many records it holds); move-leader on a
// queue of one member prints its refusal, exit 1.
func TestQueueSnapshotSave(t *testing.T) {
	q := framework.StartQueue(t, framework.QueueOptions{Args: []string{"--name", "queue-a"}})
	e := env{queue: q.Addr}
	if _, err := q.Client.Add(t.Context(), "jobs", []string{"default/a", "default/b"}, queueclient.AddOptions{}); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "queue.bak")
	out := e.run(t, "", "queue", "snapshot", "save", path).mustSucceed(t).stdout
	// A Queue record and two Put records.
	if !strings.Contains(out, "saved 3 records") || !strings.Contains(out, path) {
		t.Fatalf("queue snapshot save: %q", out)
	}
	records, err := checkBackup(path)
	if err != nil || records != 3 {
		t.Fatalf("the saved file: %d records, %v", records, err)
	}
	if ents, _ := os.ReadDir(filepath.Dir(path)); len(ents) != 1 {
		t.Errorf("the save left %d files beside the backup", len(ents))
	}
	b, _ := os.ReadFile(path)
	b[len(b)/2] ^= 0x10
	bad := filepath.Join(t.TempDir(), "bad.bak")
	if err := os.WriteFile(bad, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := checkBackup(bad); err == nil || !strings.Contains(err.Error(), "checksum") {
		t.Errorf("checkBackup of a damaged file: %v, want its checksum refused", err)
	}
	// "-" is the standard output: the same whole file, the count on the
	// standard error.
	res := e.run(t, "", "queue", "snapshot", "save", "-").mustSucceed(t)
	if got := []byte(res.stdout); len(got) == 0 || !strings.Contains(res.stderr, "saved 3 records") {
		t.Errorf("queue snapshot save -: %d bytes out, stderr %q", len(got), res.stderr)
	} else {
		p := filepath.Join(t.TempDir(), "stdout.bak")
		if err := os.WriteFile(p, got, 0o600); err != nil {
			t.Fatal(err)
		}
		if records, err := checkBackup(p); err != nil || records != 3 {
			t.Errorf("the backup written to the standard output: %d records, %v", records, err)
		}
	}
	// A directory is refused before anything is received.
	dir := t.TempDir()
	res = e.run(t, "", "queue", "snapshot", "save", dir)
	if res.code != 1 || !strings.Contains(res.stderr, "is a directory") {
		t.Errorf("queue snapshot save DIR: exit %d, stderr %q", res.code, res.stderr)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Errorf("a refused save left %d files in the directory", len(ents))
	}
	r := e.run(t, "", "queue", "move-leader")
	if r.code != 1 || !strings.Contains(r.stderr, "one member") {
		t.Errorf("queue move-leader on a queue of one: exit %d, %q", r.code, r.stderr)
	}
}
