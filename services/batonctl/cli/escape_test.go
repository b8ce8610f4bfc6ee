package cli

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
	"unicode"
	"unicode/utf8"

	"gopkg.in/yaml.v3"

	"github.com/batonrun/baton/client/kinds"
	queueclient "github.com/batonrun/baton/client/queue"
	"github.com/batonrun/baton/client/schema"
)

// Strings a writer of an object, a declaration or a queue key may store,
// which a terminal would obey if batonctl printed them as they are.
const (
	hostileClear  = "x\x1b[2J"       // ESC [2J: clears the screen
	hostileTitle  = "\x1b]0;pwned\a" // OSC 0: sets the window's title
	hostileSpoof  = "\r\x1b[Kok"     // back to the line's start, erase it
	hostileC1     = "c1\u009b31m"    // CSI as one C1 character: red
	hostileBidi   = "abc\u202edef"   // RIGHT-TO-LEFT OVERRIDE: shown as "abcfed"
	hostileDel    = "del\x7f"
	hostileZW     = "zero\u200bwidth"
	hostileLineSp = "line\u2028sep" // LINE SEPARATOR
)

// escaped are the hostile strings as batonctl shows them.
var escaped = map[string]string{
	hostileClear:  `x\x1b[2J`,
	hostileTitle:  `\x1b]0;pwned\a`,
	hostileSpoof:  `\r\x1b[Kok`,
	hostileC1:     `c1\u009b31m`,
	hostileBidi:   `abc\u202edef`,
	hostileDel:    `del\x7f`,
	hostileZW:     `zero\u200bwidth`,
	hostileLineSp: `line\u2028sep`,
}

// terminalActsOn reports whether a terminal may act on r rather than
// show it: a control character (C0, DEL, C1), a format character
// (bidirectional overrides, zero-width characters), a line or paragraph
// separator. Written here apart from the printer's own, so that the two
// check each other.
func terminalActsOn(r rune) bool {
	return r < 0x20 || r >= 0x7f && r <= 0x9f || unicode.Is(unicode.Cf, r) || r == '\u2028' || r == '\u2029'
}

// assertShown fails unless out holds no character a terminal acts on but
// a line break or, where a table's layout has one, a tab; and no byte
// that is not UTF-8.
func assertShown(t *testing.T, what, out string) {
	t.Helper()
	for i, r := range out {
		if r == utf8.RuneError && !strings.HasPrefix(out[i:], "\uFFFD") {
			t.Errorf("%s: a byte that is not UTF-8 at byte %d:\n%q", what, i, out)
			return
		}
		if r != '\n' && r != '\t' && terminalActsOn(r) {
			t.Errorf("%s: %U printed as it is, at byte %d:\n%q", what, r, i, out)
			return
		}
	}
}

// assertHas fails unless out holds each of wants.
func assertHas(t *testing.T, what, out string, wants ...string) {
	t.Helper()
	for _, w := range wants {
		if !strings.Contains(out, w) {
			t.Errorf("%s lacks %q:\n%s", what, w, out)
		}
	}
}

// TestHostileTextIsEscaped: every human-readable output of batonctl shows
// the text others wrote (an image, labels, annotations, names, event
// messages, a declaration's schema and columns, queue keys, the errors
// stored on them, worker names) with its control and format characters
// escaped, so a value cannot clear the screen, retitle the window or
// forge a line; -o json and -o yaml hold the exact values, with no such
// character raw either.
func TestHostileTextIsEscaped(t *testing.T) {
	qaddr, qhttp := startQueue(t)
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
	ago := time.Now().Add(-49 * time.Hour).UTC().Format(time.RFC3339)

	// A pod another writer stored (apply checks names; etcd does not).
	web := map[string]any{"kind": "Pod",
		"metadata": map[string]any{"name": "web", "namespace": "default", "uid": "uid-web", "creationTimestamp": ago,
			"labels":          map[string]any{"app" + hostileTitle: hostileBidi},
			"annotations":     map[string]any{"note": hostileSpoof + "\nforged line"},
			"ownerReferences": []any{map[string]any{"kind": "ReplicaSet", "name": hostileC1}}},
		"spec":   map[string]any{"image": hostileClear},
		"status": map[string]any{"phase": hostileDel}}
	put("/registry/pods/default/web", web)
	put("/registry/pods/default/evil", map[string]any{"kind": "Pod",
		"metadata": map[string]any{"name": "evil" + hostileClear, "namespace": "default", "creationTimestamp": ago},
		"spec":     map[string]any{"image": hostileZW}})
	// A key of a name apply would refuse, which completion would offer.
	put("/registry/pods/default/key"+hostileClear, map[string]any{"kind": "Pod",
		"metadata": map[string]any{"name": "key" + hostileClear, "namespace": "default", "creationTimestamp": ago}})
	put("/registry/events/default/web.1", map[string]any{"kind": "Event",
		"metadata":       map[string]any{"name": "web.1", "namespace": "default", "creationTimestamp": ago},
		"involvedObject": map[string]any{"kind": "Pod", "namespace": "default", "name": "web", "uid": "uid-web"},
		"type":           "Warning" + hostileC1, "reason": hostileTitle, "message": hostileSpoof + "\n" + hostileLineSp,
		"count": 1, "firstTimestamp": ago, "lastTimestamp": ago,
		"source": map[string]any{"component": hostileBidi, "host": hostileZW}})

	// A declared kind whose schema and columns were written by its
	// controller's author.
	declare(t, e.etcd, kinds.Declaration{Queue: "foos",
		For: kinds.Kind{Kind: "Foo", Resource: "foos", Aliases: []string{"foo"}},
		Schema: &schema.Kind{Spec: &schema.Schema{Type: schema.TypeObject, Description: "What a Foo is." + hostileTitle,
			Properties: map[string]*schema.Schema{
				"note":                {Type: schema.TypeString, Description: "first line\n" + hostileSpoof + "\n" + hostileBidi, Pattern: "^" + hostileZW},
				"evil" + hostileSpoof: {Type: schema.TypeString, Enum: []any{hostileC1, hostileDel}, Default: hostileC1},
			}}},
		PrinterColumns: []schema.Column{{Name: "Note", Type: "string", JSONPath: ".spec.note"}}})
	put("/registry/foos/default/f", map[string]any{"kind": "Foo",
		"metadata": map[string]any{"name": "f", "namespace": "default", "creationTimestamp": ago},
		"spec":     map[string]any{"note": hostileClear}})

	// The queue: a key, a worker's name and the error it stored.
	q, err := queueclient.Dial(qaddr)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if _, err := q.Add(t.Context(), "pods", []string{"default/web"}, queueclient.AddOptions{}); err != nil {
		t.Fatal(err)
	}
	leases, err := q.Lease(t.Context(), "pods", queueclient.LeaseOptions{Worker: "worker" + hostileClear, Wait: 5 * time.Second})
	if err != nil || len(leases) != 1 {
		t.Fatalf("lease: %v %v", leases, err)
	}
	// The second key is leased while the first is, so that it is the one
	// pending.
	if _, err := q.Add(t.Context(), "pods", []string{"default/key" + hostileBidi}, queueclient.AddOptions{}); err != nil {
		t.Fatal(err)
	}
	if held, err := q.Lease(t.Context(), "pods", queueclient.LeaseOptions{Worker: "holder" + hostileC1, Wait: 5 * time.Second}); err != nil || len(held) != 1 {
		t.Fatalf("lease: %v %v", held, err)
	}
	if _, err := q.Ack(t.Context(), "pods", []queueclient.Ack{{Key: "default/web", Token: leases[0].Token,
		Outcome: queueclient.Failure(hostileTitle + "boom\n" + hostileSpoof)}}); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		args []string
		want []string // escaped, in stdout or stderr
	}{
		{[]string{"get", "pods"}, []string{escaped[hostileClear], "evil" + escaped[hostileClear], escaped[hostileZW], escaped[hostileDel], "replicaset/" + escaped[hostileC1]}},
		{[]string{"get", "pods", "-o", "wide"}, []string{escaped[hostileClear]}},
		{[]string{"get", "pods", "-A"}, []string{escaped[hostileClear]}},
		{[]string{"get", "pods", "-o", "name"}, []string{"pod/evil" + escaped[hostileClear] + "\n"}},
		{[]string{"get", "all"}, []string{"pod/evil" + escaped[hostileClear]}},
		{[]string{"get", "pods,events"}, []string{escaped[hostileClear], escaped[hostileTitle]}},
		{[]string{"get", "events"}, []string{"Warning" + escaped[hostileC1], escaped[hostileTitle], escaped[hostileLineSp]}},
		{[]string{"describe", "pod", "web"}, []string{"app" + escaped[hostileTitle] + "=" + escaped[hostileBidi], "image: " + `"x\e[2J"`,
			escaped[hostileTitle] + "boom", escaped[hostileTitle], "replicaset/" + escaped[hostileC1]}},
		{[]string{"get", "foos"}, []string{escaped[hostileClear]}},
		{[]string{"get", "foos", "-o", "wide"}, []string{escaped[hostileClear]}},
		{[]string{"explain", "foos.spec"}, []string{"What a Foo is." + escaped[hostileTitle], "evil" + escaped[hostileSpoof],
			"    " + escaped[hostileSpoof] + "\n", escaped[hostileBidi], `"c1\u009b31m"`, escaped[hostileZW]}},
		{[]string{"explain", "foos", "--recursive"}, []string{"evil" + escaped[hostileSpoof]}},
		{[]string{"explain", "foos.spec.note"}, []string{escaped[hostileBidi]}},
		{[]string{"queue", "list", "pods"}, []string{"default/key" + escaped[hostileBidi], "holder" + escaped[hostileC1], escaped[hostileTitle] + "boom"}},
		{[]string{"queue", "inspect", "pods", "default/web"}, []string{escaped[hostileTitle] + "boom"}},
		{[]string{"queue", "inspect", "pods", "default/key" + hostileBidi}, []string{"default/key" + escaped[hostileBidi], "holder" + escaped[hostileC1]}},
		{[]string{"queue", "stats"}, nil},
		{[]string{"watch", "--once"}, nil},
		{[]string{"status", "--queue-http-addr", qhttp, "--worker-http-addr", ""}, []string{"holder" + escaped[hostileC1]}},
		{[]string{"queue", "forget", "pods", "gone" + hostileClear}, nil},
		// Errors that quote what a user typed or a server said.
		{[]string{"get", "pods", "missing" + hostileClear}, []string{"missing"}},
		{[]string{"describe", "foo", "missing" + hostileTitle}, []string{"missing"}},
		{[]string{"explain", "foos.spec.nope" + hostileSpoof}, []string{"nope"}},
		{[]string{"get", hostileClear}, []string{"unknown resource"}},
		{[]string{"queue", "inspect", "bad" + hostileClear, "k"}, []string{"bad"}},
		{[]string{"queue", "members", "add", "m" + hostileTitle, "--peer-addr", "h" + hostileClear + ":1"}, []string{"error"}},
		{[]string{"get", "pods", "-n", "ns" + hostileClear}, []string{"ns" + escaped[hostileClear]}},
		{[]string{"queue", "list", "nothing-here"}, nil},
	} {
		r := e.run(t, "", tc.args...)
		what := "batonctl " + strings.Join(tc.args, " ")
		assertShown(t, what+" (stdout)", r.stdout)
		assertShown(t, what+" (stderr)", r.stderr)
		assertHas(t, what, r.stdout+r.stderr, tc.want...)
	}

	// Completion leaves out a name it could neither show nor have typed.
	if out := e.run(t, "", "__complete", "get", "pods", "").stdout; !strings.Contains(out, "\nweb\n") || strings.Contains(out, "key") {
		t.Errorf("__complete get pods: want web and evil, not the key with ESC:\n%q", out)
	}

	// get -w prints the same rows as get.
	w := startWatching(t, e, "get", "pods", "-w")
	lines := w.lines(t, 4)
	w.stop()
	assertShown(t, "get pods -w", strings.Join(lines, "\n"))
	assertHas(t, "get pods -w", w.out.String(), escaped[hostileClear], "evil"+escaped[hostileClear])

	// -o json and -o yaml: the exact values, with nothing raw that a
	// terminal acts on.
	out := e.run(t, "", "get", "pod", "web", "-o", "json").mustSucceed(t).stdout
	assertShown(t, "get pod web -o json", out)
	var fromJSON map[string]any
	if err := json.Unmarshal([]byte(out), &fromJSON); err != nil {
		t.Fatalf("get -o json: %v\n%s", err, out)
	}
	want := roundTrip(t, web)
	if !reflect.DeepEqual(fromJSON, want) {
		t.Errorf("get -o json changed the values:\n got %#v\nwant %#v", fromJSON, want)
	}
	out = e.run(t, "", "get", "pod", "web", "-o", "yaml").mustSucceed(t).stdout
	assertShown(t, "get pod web -o yaml", out)
	var fromYAML map[string]any
	if err := yaml.Unmarshal([]byte(out), &fromYAML); err != nil {
		t.Fatalf("get -o yaml: %v\n%s", err, out)
	}
	if got := roundTrip(t, fromYAML); !reflect.DeepEqual(got, want) {
		t.Errorf("get -o yaml changed the values:\n got %#v\nwant %#v", got, want)
	}
	out = e.run(t, "", "queue", "list", "pods", "-o", "json").mustSucceed(t).stdout
	assertShown(t, "queue list -o json", out)
	if !strings.Contains(out, `default/key`) {
		t.Errorf("queue list -o json lacks the key:\n%s", out)
	}
	var list struct {
		Items []struct {
			Key    string `json:"key"`
			Worker string `json:"worker"`
		} `json:"items"`
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("queue list -o json: %v\n%s", err, out)
	}
	keys := map[string]string{}
	for _, it := range list.Items {
		keys[it.Key] = it.Worker
	}
	if w, ok := keys["default/key"+hostileBidi]; !ok || w != "holder"+hostileC1 {
		t.Errorf("queue list -o json: keys and workers %q", keys)
	}
}

// roundTrip is v as JSON decodes it (numbers as float64).
func roundTrip(t *testing.T, v any) map[string]any {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var out map[string]any
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestShortCutsWholeCharacters: a long error is cut for its table cell
// between two characters, not inside one, which the cell would show as
// bytes that are not UTF-8 (\xe2\x80).
func TestShortCutsWholeCharacters(t *testing.T) {
	long := strings.Repeat("a", 76) + "…and more that does not fit"
	got := short(long)
	if !utf8.ValidString(got) || got != strings.Repeat("a", 76)+"..." {
		t.Errorf("short = %q", got)
	}
	if s := short("fits"); s != "fits" {
		t.Errorf("short of a short error = %q", s)
	}
}
