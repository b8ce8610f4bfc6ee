package stack

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonrun/baton/client/kinds"
	"github.com/batonrun/baton/services/etcdembed"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// runDeclare runs examples/python-worker/declare.py with args and returns
// its exit code and output.
func runDeclare(t *testing.T, python string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), python, append([]string{filepath.Join(pythonWorker, "declare.py")}, args...)...)
	var out, errb strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case errors.As(err, &exit):
		code = exit.ExitCode()
	case err != nil:
		t.Fatalf("declare.py: %v", err)
	}
	return code, out.String(), errb.String()
}

// TestPythonDeclare checks declare.py against the Go side it stands in for:
// it publishes what kinds.Parse accepts, byte for byte as the Go SDK
// publishes it (Marshal), and refuses, writing nothing, what Parse refuses;
// a declaration already in etcd makes no revision; several are checked
// before any is written; an etcd failure is retried; and its reference
// kinds are kinds.Builtin().
func TestPythonDeclare(t *testing.T) {
	python := findPython(t)
	srv := etcdembed.StartForTest(t)
	endpoint := srv.Endpoints()[0]
	etcd, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer etcd.Close()
	get := func(key string) (string, int64) {
		t.Helper()
		resp, err := etcd.Get(t.Context(), key)
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.Kvs) == 0 {
			return "", resp.Header.Revision
		}
		return string(resp.Kvs[0].Value), resp.Header.Revision
	}
	declare := func(args ...string) (int, string, string) {
		t.Helper()
		return runDeclare(t, python, append([]string{"--etcd-endpoints", endpoint}, args...)...)
	}

	builtin, err := json.Marshal(kinds.BuiltinDeclarations()[0])
	if err != nil {
		t.Fatal(err)
	}
	var owns33 []string
	for i := range kinds.MaxOwns + 1 {
		owns33 = append(owns33, fmt.Sprintf(`{"kind":"K%d","resource":"k%d"}`, i, i))
	}
	valid := `{"queue":"greetings","for":{"kind":"Greeting","resource":"greetings","aliases":["greeting"]},"owns":[{"kind":"Pod","resource":"pods","aliases":["pod","po"]}]}`
	for _, tc := range []struct{ name, json string }{
		{"the greeter's", valid},
		{"a reference one", string(builtin)},
		{"spaced, members in another order", `{ "owns": [{"resource": "pods", "kind": "Pod"}], "for": {"resource": "hellos", "kind": "Hello"}, "queue": "hellos", "ignoreOwnStatus": true }`},
		{"nulls and empties", `{"queue":"nulls","for":{"kind":"Null","resource":"nulls","aliases":null},"owns":[],"ignoreOwnStatus":false}`},
		{"a schema and columns", `{"queue":"widgets","for":{"kind":"Widget","resource":"widgets"},"schema":{"spec":{"type":"object","description":"a <b> & c…","properties":{"size":{"type":"integer","minimum":0}}}},"printerColumns":[{"name":"Size","type":"integer","jsonPath":".spec.size"}]}`},
		{"a schema not an object", `{"queue":"x15","for":{"kind":"X","resource":"xs"},"schema":[]}`},
		{"unknown member", `{"queue":"x1","for":{"kind":"X","resource":"xs"},"watches":"everything"}`},
		{"unknown member of for", `{"queue":"x2","for":{"kind":"X","resource":"xs","group":"apps"}}`},
		{"no for", `{"queue":"x3"}`},
		{"queue not a DNS label", `{"queue":"Greetings","for":{"kind":"X","resource":"xs"}}`},
		{"queue with a newline", `{"queue":"x4\n","for":{"kind":"X","resource":"xs"}}`},
		{"queue of 64", `{"queue":"` + strings.Repeat("q", 64) + `","for":{"kind":"X","resource":"xs"}}`},
		{"lower-case kind", `{"queue":"x5","for":{"kind":"greeting","resource":"xs"}}`},
		{"kind with a newline", `{"queue":"x6","for":{"kind":"X\n","resource":"xs"}}`},
		{"upper-case alias", `{"queue":"x7","for":{"kind":"X","resource":"xs","aliases":["Xx"]}}`},
		{"nine aliases", `{"queue":"x8","for":{"kind":"X","resource":"xs","aliases":["a","b","c","d","e","f","g","h","i"]}}`},
		{"resource named twice", `{"queue":"x9","for":{"kind":"X","resource":"xs"},"owns":[{"kind":"Y","resource":"xs"}]}`},
		{"owns 33", `{"queue":"x10","for":{"kind":"X","resource":"xs"},"owns":[` + strings.Join(owns33, ",") + `]}`},
		{"ignoreOwnStatus not a bool", `{"queue":"x11","for":{"kind":"X","resource":"xs"},"ignoreOwnStatus":"yes"}`},
		{"queue not a string", `{"queue":11,"for":{"kind":"X","resource":"xs"}}`},
		{"data after the object", `{"queue":"x12","for":{"kind":"X","resource":"xs"}} {}`},
		{"not an object", `["x13"]`},
		{"not JSON", `{"queue":`},
		{"over 64 KiB", `{"queue":"x14","for":{"kind":"X","resource":"xs"}` + strings.Repeat(" ", kinds.MaxDeclarationBytes) + `}`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, perr := kinds.Parse([]byte(tc.json))
			code, out, errs := declare("-d", tc.json)
			if perr != nil {
				if code != 2 || out != "" {
					t.Errorf("kinds.Parse refuses it (%v); declare.py: exit %d, %q %q; want exit 2 and nothing declared", perr, code, out, errs)
				}
				return
			}
			want, err := d.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			if code != 0 || out != d.Key()+" declared\n" {
				t.Fatalf("declare.py: exit %d, %q %q; want %q", code, out, errs, d.Key()+" declared\n")
			}
			if got, _ := get(d.Key()); got != string(want) {
				t.Errorf("%s holds\n%s\nwant, as the Go SDK writes it,\n%s", d.Key(), got, want)
			}
		})
	}
	// Nothing but the valid ones was written.
	resp, err := etcd.Get(t.Context(), kinds.DeclarationPrefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, kv := range resp.Kvs {
		keys = append(keys, string(kv.Key))
	}
	if got, want := strings.Join(keys, " "), "/baton/rules/greetings /baton/rules/hellos /baton/rules/nulls /baton/rules/replicasets /baton/rules/widgets"; got != want {
		t.Errorf("declared keys: %s; want %s", got, want)
	}

	// Declared already: unchanged, and not one etcd revision more.
	_, head := get("/baton/rules/greetings")
	if code, out, errs := declare("-d", valid); code != 0 || out != "/baton/rules/greetings unchanged\n" {
		t.Errorf("declaring again: exit %d, %q %q", code, out, errs)
	}
	if _, after := get("/baton/rules/greetings"); after != head {
		t.Errorf("declaring again moved etcd from revision %d to %d", head, after)
	}

	// Several: every one is checked before any is written.
	other := `{"queue":"others","for":{"kind":"Other","resource":"others"}}`
	if code, out, _ := declare("-d", other, "-d", `{"queue":"others","for":{"kind":"Other","resource":"others"},"owns":[{"kind":"Pod","resource":"pods"}]}`); code != 2 || out != "" {
		t.Errorf("one queue declared twice: exit %d, %q; want exit 2", code, out)
	}
	if code, out, _ := declare("-d", other, "-d", `{"queue":"bad!","for":{"kind":"Other","resource":"others"}}`); code != 2 || out != "" {
		t.Errorf("an invalid second declaration: exit %d, %q; want exit 2", code, out)
	}
	if got, _ := get("/baton/rules/others"); got != "" {
		t.Errorf("a refused call wrote /baton/rules/others: %s", got)
	}
	changed := strings.Replace(valid, `,"owns":[{"kind":"Pod","resource":"pods","aliases":["pod","po"]}]`, "", 1)
	if code, out, errs := declare("-d", other, "-d", changed); code != 0 || out != "/baton/rules/others declared\n/baton/rules/greetings declared\n" {
		t.Errorf("two declarations, one changed: exit %d, %q %q", code, out, errs)
	}
	if got, _ := get("/baton/rules/greetings"); strings.Contains(got, "owns") {
		t.Errorf("the changed declaration was not written: %s", got)
	}

	// TLS flags on a plaintext endpoint would be ignored: refused instead.
	if code, _, errs := declare("--etcd-cacert", "ca.crt", "-d", valid); code != 2 || !strings.Contains(errs, "is not https://") {
		t.Errorf("--etcd-cacert with an http:// endpoint: exit %d, %q", code, errs)
	}

	// An etcd that fails twice is retried.
	target, err := url.Parse(endpoint)
	if err != nil {
		t.Fatal(err)
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	var calls atomic.Int32
	flaky := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) <= 2 {
			http.Error(w, `{"error":"down","code":14,"message":"etcd is down"}`, http.StatusServiceUnavailable)
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	defer flaky.Close()
	code, out, errs := runDeclare(t, python, "--etcd-endpoints", flaky.URL, "-d", `{"queue":"flaky","for":{"kind":"Flaky","resource":"flakies"}}`)
	if code != 0 || out != "/baton/rules/flaky declared\n" || calls.Load() != 3 {
		t.Errorf("through an etcd that failed twice: exit %d, %q %q after %d calls; want declared after 3", code, out, errs, calls.Load())
	}

	// Its reference kinds are kinds.Builtin().
	cmd := exec.CommandContext(t.Context(), python, "-c",
		"import json, sys; sys.path.insert(0, sys.argv[1]); import declare; print(json.dumps([k.to_json() for k in declare.BUILTIN]))",
		pythonWorker)
	got, err := cmd.Output()
	if err != nil {
		t.Fatalf("declare.BUILTIN: %v", err)
	}
	var pyKinds []kinds.Kind
	if err := json.Unmarshal(got, &pyKinds); err != nil {
		t.Fatal(err)
	}
	if g, w := fmt.Sprint(pyKinds), fmt.Sprint(kinds.Builtin()); g != w {
		t.Errorf("declare.BUILTIN is %s; kinds.Builtin() is %s", g, w)
	}
}
