package manifest

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const deployment = `kind: Deployment
metadata:
  name: web
  labels: {app: web}
spec:
  replicas: 3
  strategy: {maxSurge: 1, maxUnavailable: 0}
  template:
    metadata: {labels: {app: web}}
    spec: {image: "nginx:1.27"}
`

func TestDecodeValid(t *testing.T) {
	tests := []struct {
		name, in  string
		wantRefs  []string
		wantLines []int
	}{
		{"one yaml", deployment, []string{"deployment/web"}, []int{1}},
		{"multi document", "---\n" + deployment + "---\nkind: Pod\nmetadata: {name: p, namespace: ns1}\nspec: {image: busybox}\n---\n",
			[]string{"deployment/web", "pod/p"}, []int{2, 13}},
		{"json", `{"kind": "Job", "metadata": {"name": "pi"},
	"spec": {"completions": 2, "template": {"spec": {"image": "perl", "durationSeconds": 1}}}}`,
			[]string{"job/pi"}, []int{1}},
		{"json list", `[{"kind": "Pod", "metadata": {"name": "a"}, "spec": {}},
{"kind": "Pod", "metadata": {"name": "b"}, "spec": {}}]`, []string{"pod/a", "pod/b"}, []int{1, 2}},
		{"List wrapper", "kind: List\nitems:\n- kind: Pod\n  metadata: {name: a}\n  spec: {}\n", []string{"pod/a"}, []int{3}},
		{"status ignored but allowed", "kind: Pod\nmetadata: {name: a}\nspec: {}\nstatus: {phase: Running}\n", []string{"pod/a"}, []int{1}},
		{"percent and fractional seconds", "kind: Deployment\nmetadata: {name: a}\nspec:\n  strategy: {maxSurge: 25%, maxUnavailable: 0}\n  template: {spec: {durationSeconds: 0.5}}\n", []string{"deployment/a"}, []int{1}},
		{"null means unset", "kind: Pod\nmetadata: {name: a, labels: null}\nspec: {image: ~}\n", []string{"pod/a"}, []int{1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := Decode("in.yaml", strings.NewReader(tc.in), "", nil)
			if err != nil {
				t.Fatalf("Decode: %v", err)
			}
			var refs []string
			var lines []int
			for _, o := range objs {
				refs = append(refs, o.Ref())
				lines = append(lines, o.Source.Line)
			}
			if strings.Join(refs, ",") != strings.Join(tc.wantRefs, ",") {
				t.Errorf("refs = %v, want %v", refs, tc.wantRefs)
			}
			for i := range lines {
				if i < len(tc.wantLines) && lines[i] != tc.wantLines[i] {
					t.Errorf("line of %s = %d, want %d", refs[i], lines[i], tc.wantLines[i])
				}
			}
		})
	}
}

func TestDecodeValue(t *testing.T) {
	objs, err := Decode("in.yaml", strings.NewReader(deployment), "team-a", nil)
	if err != nil {
		t.Fatal(err)
	}
	o := objs[0]
	if o.Namespace != "team-a" || o.Key() != "/registry/deployments/team-a/web" {
		t.Errorf("namespace %q key %q", o.Namespace, o.Key())
	}
	got, _ := json.Marshal(o.Value)
	want := `{"kind":"Deployment","metadata":{"labels":{"app":"web"},"name":"web","namespace":"team-a"},` +
		`"spec":{"replicas":3,"strategy":{"maxSurge":1,"maxUnavailable":0},"template":{"metadata":{"labels":{"app":"web"}},"spec":{"image":"nginx:1.27"}}}}`
	if string(got) != want {
		t.Errorf("value\n got %s\nwant %s", got, want)
	}
}

func TestDecodeErrors(t *testing.T) {
	tests := []struct {
		name, in string
		want     []string // substrings of the error
	}{
		{"syntax", "kind: Pod\nmetadata:\n  name: a\n bad: [\n", []string{"in.yaml:3: did not find expected key"}},
		{"unknown kind", "kind: Deploymnet\nmetadata: {name: a}\nspec: {}\n", []string{`in.yaml:1:7: kind: unknown kind "Deploymnet" (known: Deployment, `}},
		{"missing kind", "metadata: {name: a}\nspec: {}\n", []string{"in.yaml:1:1: kind: missing required field"}},
		{"missing name", "kind: Pod\nmetadata:\n  labels: {a: b}\nspec: {}\n", []string{`in.yaml:3:3: The Pod "" is invalid: metadata.name: Required value`}},
		{"missing metadata", "kind: Pod\nspec: {}\n", []string{`in.yaml:1:1: The Pod "" is invalid: metadata: Required value`}},
		{"missing template", "kind: ReplicaSet\nmetadata: {name: a}\nspec:\n  replicas: 1\n", []string{`in.yaml:4:3: The ReplicaSet "a" is invalid: spec.template: Required value`}},
		{"bad int", deploymentWith("replicas: 3", `replicas: "three"`), []string{`in.yaml:6:13: The Deployment "web" is invalid: spec.replicas: Invalid value: "three": must be of type integer`}},
		{"float", deploymentWith("replicas: 3", `replicas: 2.5`), []string{`spec.replicas: Invalid value: 2.5: must be of type integer`}},
		{"negative", deploymentWith("replicas: 3", `replicas: -1`), []string{`in.yaml:6:13: The Deployment "web" is invalid: spec.replicas: Invalid value: -1: must be greater than or equal to 0`}},
		{"unknown field", deploymentWith("replicas: 3", `replcias: 3`), []string{`in.yaml:6:3: The Deployment "web" is invalid: spec.replcias: Unknown field: not in the schema of Deployment (known: replicas, revisionHistoryLimit, strategy, template)`}},
		{"label not string", deploymentWith("{app: web}", "{version: 2}"), []string{`in.yaml:4:21: The Deployment "web" is invalid: metadata.labels[version]: Invalid value: 2: must be of type string`}},
		{"image not string", deploymentWith(`image: "nginx:1.27"`, `image: [a]`), []string{`in.yaml:10:19: The Deployment "web" is invalid: spec.template.spec.image: Invalid value: ["a"]: must be of type string`}},
		{"bad name", "kind: Pod\nmetadata: {name: Web_1}\nspec: {}\n", []string{`in.yaml:2:18: metadata.name: "Web_1" is not a valid name`}},
		{"not a mapping", "- 3\n", []string{"in.yaml:1:3: an object must be a mapping, got integer 3"}},
		{"bad percent", deploymentWith("maxSurge: 1", `maxSurge: "lots"`), []string{`in.yaml:7:24: The Deployment "web" is invalid: spec.strategy.maxSurge: Invalid value: "lots": must match the pattern '^[0-9]+%$'`}},
		{"negative duration", "kind: Pod\nmetadata: {name: a}\nspec: {durationSeconds: -0.5}\n", []string{"spec.durationSeconds: Invalid value: -0.5: must be greater than or equal to 0"}},
		{"two errors", "kind: Pod\nmetadata: {name: a}\nspec: {image: 3, exitCode: x}\n",
			[]string{`in.yaml:3:15: The Pod "a" is invalid: spec.image: Invalid value: 3: must be of type string
in.yaml:3:28: The Pod "a" is invalid: spec.exitCode: Invalid value: "x": must be of type integer`}},
		{"json error line", "{\"kind\": \"Pod\",\n \"metadata\": {\"name\": \"a\"},\n \"spec\": {\"durationSeconds\": \"5\"}}", []string{`in.yaml:3:30: The Pod "a" is invalid: spec.durationSeconds: Invalid value: "5": must be of type number`}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Decode("in.yaml", strings.NewReader(tc.in), "", nil)
			if err == nil {
				t.Fatal("Decode succeeded, want an error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error\n%v\ndoes not contain\n%s", err, w)
				}
			}
		})
	}
}

func deploymentWith(old, repl string) string {
	return strings.Replace(deployment, old, repl, 1)
}

func TestReadFolder(t *testing.T) {
	dir := t.TempDir()
	write := func(name, body string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("b.yaml", "kind: Pod\nmetadata: {name: b}\nspec: {}\n")
	write("a.json", `{"kind": "Pod", "metadata": {"name": "a"}, "spec": {}}`)
	write("notes.txt", "not a manifest")
	write("sub/c.yml", "kind: Pod\nmetadata: {name: c}\nspec: {}\n")

	for _, tc := range []struct {
		recursive bool
		want      string
	}{{false, "pod/a,pod/b"}, {true, "pod/a,pod/b,pod/c"}} {
		objs, err := Read(t.Context(), []string{dir}, tc.recursive, nil, "", nil)
		if err != nil {
			t.Fatal(err)
		}
		var refs []string
		for _, o := range objs {
			refs = append(refs, o.Ref())
		}
		if got := strings.Join(refs, ","); got != tc.want {
			t.Errorf("recursive=%v: %s, want %s", tc.recursive, got, tc.want)
		}
	}

	if _, err := Read(t.Context(), []string{filepath.Join(dir, "missing.yaml")}, false, nil, "", nil); err == nil || !strings.Contains(err.Error(), "missing.yaml") {
		t.Errorf("missing file: %v", err)
	}
	write("bad.yaml", "kind: Pod\nmetadata: {name: x}\nspec: {image: 1}\n")
	if _, err := Read(t.Context(), []string{dir}, false, nil, "", nil); err == nil || !strings.Contains(err.Error(), filepath.Join(dir, "bad.yaml")+":3:") {
		t.Errorf("bad file in folder: %v", err)
	}
	if _, err := Read(t.Context(), []string{"-"}, false, strings.NewReader(""), "", nil); err == nil || !strings.Contains(err.Error(), "no objects") {
		t.Errorf("empty stdin: %v", err)
	}
}

// endless is a reader that never ends; it fails the read once it has
// given more than max bytes, so a reader without a bound fails the test
// instead of exhausting memory.
type endless struct{ n, max int }

func (r *endless) Read(p []byte) (int, error) {
	if r.n > r.max {
		return 0, fmt.Errorf("read %d bytes and still reading", r.n)
	}
	for i := range p {
		p[i] = '#'
	}
	r.n += len(p)
	return len(p), nil
}

// TestReadLimit: a manifest file, or stdin, of more than MaxFileBytes is
// refused naming it and the limit, after reading no more than the limit;
// one of exactly MaxFileBytes is read.
func TestReadLimit(t *testing.T) {
	dir := t.TempDir()
	pad := func(body string, n int) []byte {
		return []byte(body + strings.Repeat("#", n-len(body)-1) + "\n")
	}
	atLimit := filepath.Join(dir, "limit.yaml")
	if err := os.WriteFile(atLimit, pad(deployment, MaxFileBytes), 0o644); err != nil {
		t.Fatal(err)
	}
	if objs, err := Read(t.Context(), []string{atLimit}, false, nil, "", nil); err != nil || len(objs) != 1 {
		t.Errorf("a file of exactly MaxFileBytes: %d objects, %v", len(objs), err)
	}
	over := filepath.Join(dir, "over.yaml")
	if err := os.WriteFile(over, pad(deployment, MaxFileBytes+1), 0o644); err != nil {
		t.Fatal(err)
	}
	zero := filepath.Join(dir, "zero.yaml")
	if err := os.Symlink("/dev/zero", zero); err != nil {
		t.Fatal(err)
	}
	limit := fmt.Sprintf("larger than %d bytes", MaxFileBytes)
	for _, tc := range []struct {
		name  string
		path  string
		stdin io.Reader
		want  string
	}{
		{"a file over the limit", over, nil, over + ": " + limit},
		{"a link to /dev/zero", zero, nil, zero + ": " + limit},
		{"stdin without an end", Stdin, &endless{max: 64 << 20}, "<stdin>: " + limit},
	} {
		t.Run(tc.name, func(t *testing.T) {
			objs, err := Read(t.Context(), []string{tc.path}, false, tc.stdin, "", nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Read = %d objects, %v; want an error with %q", len(objs), err, tc.want)
			}
			if r, ok := tc.stdin.(*endless); ok && r.n > MaxFileBytes+64<<10 {
				t.Errorf("read %d bytes of stdin, limit %d", r.n, MaxFileBytes)
			}
		})
	}
}
