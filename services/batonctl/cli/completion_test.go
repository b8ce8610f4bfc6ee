package cli

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	queueclient "github.com/batonrun/baton/client/queue"
)

// completionStack is what the completion tests complete against: an etcd
// with a deployment and two pods, and a queue with a key in "jobs".
func completionStack(t *testing.T) env {
	t.Helper()
	qaddr, _ := startQueue(t)
	e := env{etcd: startEtcd(t), queue: qaddr}
	e.run(t, "", "apply", "-f", writeFile(t, t.TempDir(), "web.yaml", webDeployment)).mustSucceed(t)
	for _, p := range []string{"web-a", "web-b"} {
		e.run(t, `{"kind":"Pod","metadata":{"name":"`+p+`"},"spec":{"image":"x"}}`, "apply", "-f", "-").mustSucceed(t)
	}
	q, err := queueclient.Dial(qaddr)
	if err != nil {
		t.Fatal(err)
	}
	defer q.Close()
	if _, err := q.Add(t.Context(), "jobs", []string{"default/a"}, queueclient.AddOptions{}); err != nil {
		t.Fatal(err)
	}
	return e
}

// TestComplete: __complete, what the shell scripts call, answers with the
// candidates for the word at the cursor: commands, subcommands, flags and
// their values, resources, and names of objects and queues from the
// servers the line's global flags point at; files where a file is due.
func TestComplete(t *testing.T) {
	e := completionStack(t)
	line := func(words ...string) []string {
		return append([]string{"--etcd-endpoints", e.etcd, "--queue-addr", e.queue}, words...)
	}
	for _, tc := range []struct {
		words     []string
		want      []string // exactly, in order
		contains  []string // at least
		directive string
	}{
		{words: []string{"ge"}, want: []string{"get"}},
		{words: []string{""}, contains: []string{"apply", "get", "describe", "delete", "scale", "rollout", "queue", "version", "completion", "help"}},
		{words: []string{"qu"}, want: []string{"queue"}},
		{words: []string{"queue", ""}, want: []string{"stats", "list", "inspect", "forget", "members", "move-leader", "snapshot"}},
		{words: []string{"queue", "members", ""}, want: []string{"add", "remove"}},
		{words: []string{"rollout", ""}, want: []string{"status"}},
		{words: line("get", ""), contains: []string{"deployments", "replicasets", "statefulsets", "jobs", "pods", "all"}},
		{words: line("get", "rs"), want: []string{"rs"}},
		{words: line("get", "deploy", ""), want: []string{"web"}},
		{words: line("get", "pods", "web-"), want: []string{"web-a", "web-b"}},
		{words: line("get", "pods", "-n", "other", ""), want: nil},
		{words: line("describe", "po/"), want: []string{"po/web-a", "po/web-b"}},
		{words: line("delete", "pod/web-b", "pod/web-"), want: []string{"pod/web-a", "pod/web-b"}},
		{words: line("scale", ""), want: []string{"deployments", "replicasets", "statefulsets"}},
		{words: line("scale", "deploy/"), want: []string{"deploy/web"}},
		{words: line("rollout", "status", "pods/"), want: nil},
		{words: line("queue", "stats", ""), want: []string{"jobs"}},
		{words: line("get", "-o", ""), want: []string{"json", "yaml", "name", "wide"}},
		{words: line("get", "-o=y"), want: []string{"-o=yaml"}},
		{words: line("queue", "list", "jobs", "--state", "p"), want: []string{"pending", "parked"}},
		{words: line("get", "--watch-o"), want: []string{"--watch-only"}},
		{words: line("get", "pods", "--queue-a"), want: []string{"--queue-addr"}},
		{words: []string{"completion", ""}, want: []string{"bash", "zsh", "fish"}},
		{words: []string{"help", "queue", "mem"}, want: []string{"members"}},
		{words: []string{"apply", "-f", ""}, directive: ":files"},
		{words: []string{"--cacert", ""}, directive: ":files"},
		{words: []string{"certs", "init", ""}, directive: ":dirs"},
		{words: []string{"experiment", "b"}, want: []string{"burst"}},
		{words: []string{"__comp"}, want: nil},
	} {
		r := runCtx(t, t.Context(), "", append([]string{completeCommand}, tc.words...)...)
		lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n")
		got, directive := lines[:len(lines)-1], lines[len(lines)-1]
		want := tc.directive
		if want == "" {
			want = ":default"
		}
		switch {
		case r.code != 0 || r.stderr != "":
			t.Errorf("complete %q: exit %d, stderr %q", tc.words, r.code, r.stderr)
		case directive != want:
			t.Errorf("complete %q: directive %q, want %q", tc.words, directive, want)
		case tc.contains == nil && !slices.Equal(got, tc.want):
			t.Errorf("complete %q = %q, want %q", tc.words, got, tc.want)
		}
		for _, c := range tc.contains {
			if !slices.Contains(got, c) {
				t.Errorf("complete %q = %q, lacks %q", tc.words, got, c)
			}
		}
	}
}

// TestBashCompletion runs bash's completion of batonctl with the script
// `batonctl completion bash` prints, as bash runs it on a Tab: the
// function it registers, given the line, fills COMPREPLY by calling
// batonctl (this test binary, under that name).
func TestBashCompletion(t *testing.T) {
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash here")
	}
	e := completionStack(t)
	shellEnv := asBatonctlOnPath(t, e)
	script := runCtx(t, t.Context(), "", "completion", "bash").mustSucceed(t).stdout
	scriptFile := writeFile(t, t.TempDir(), "batonctl.bash", script)

	complete := func(line string) []string {
		t.Helper()
		// COMP_WORDS as bash splits the line (":" and "=" break words);
		// the script reads COMP_LINE up to COMP_POINT.
		prog := `source "$1"
COMP_LINE="$2"; COMP_POINT=${#COMP_LINE}
COMP_WORDS=($2); [[ $2 == *" " ]] && COMP_WORDS+=("")
COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 ))
complete -p batonctl >/dev/null || exit 3
_batonctl batonctl
printf '%s\n' "${COMPREPLY[@]}"`
		cmd := exec.CommandContext(t.Context(), bash, "--norc", "--noprofile", "-c", prog, "bash", scriptFile, line)
		cmd.Env = shellEnv
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("bash completion of %q: %v\n%s", line, err, out)
		}
		var got []string
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if l != "" {
				got = append(got, l)
			}
		}
		return got
	}
	etcd := "--etcd-endpoints " + e.etcd + " "
	for _, tc := range []struct {
		line string
		want []string
	}{
		{"batonctl ge", []string{"get"}},
		{"batonctl queue mem", []string{"members"}},
		{"batonctl queue members ", []string{"add", "remove"}},
		{"batonctl " + etcd + "get deploy ", []string{"web"}},
		{"batonctl get " + etcd + "pods web-", []string{"web-a", "web-b"}},
		{"batonctl " + etcd + "describe deploy/w", []string{"deploy/web"}},
		{"batonctl --etcd-endpoints=" + e.etcd + " delete po", []string{"pods"}},
		{"batonctl queue list ", []string{"jobs"}},
		{"batonctl get -o y", []string{"yaml"}},
		{"batonctl get --watch-", []string{"--watch-only"}},
		{"batonctl completion ", []string{"bash", "zsh", "fish"}},
		{"batonctl apply -f ", nil}, // bash's own file names, not batonctl's words
		{"batonctl", nil},           // the program's name itself
	} {
		if got := complete(tc.line); !slices.Equal(got, tc.want) {
			t.Errorf("bash completion of %q = %q, want %q", tc.line, got, tc.want)
		}
	}
	// bash replaces only what follows the word's last '=' (or ':', both
	// word breaks): the candidates are cut to that.
	if got := complete("batonctl get -o=y"); !slices.Equal(got, []string{"yaml"}) {
		t.Errorf("completion after '=': %q, want [yaml]", got)
	}
}

// asBatonctlOnPath puts this test binary on PATH as batonctl, and returns
// the environment a shell runs it with: as batonctl, with e's queue.
func asBatonctlOnPath(t *testing.T, e env) []string {
	t.Helper()
	bin := t.TempDir()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(self, filepath.Join(bin, "batonctl")); err != nil {
		t.Fatal(err)
	}
	return append(os.Environ(), "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"), asBatonctl+"=1",
		"BATON_BATONCTL_ETCD_ENDPOINTS="+e.etcd, "BATON_BATONCTL_QUEUE_ADDR="+e.queue, "BATON_BATONCTL_TIMEOUT=3s")
}

// TestZshAndFishCompletion runs the zsh and fish scripts, where those
// shells are: fish's own `complete -C` completes a line as a Tab would;
// zsh's completion system runs only at a prompt, so its compadd and
// _files, which receive the candidates, are stood in for by functions
// that print them.
func TestZshAndFishCompletion(t *testing.T) {
	zsh, zerr := exec.LookPath("zsh")
	fish, ferr := exec.LookPath("fish")
	if zerr != nil && ferr != nil {
		t.Skip("neither zsh nor fish here")
	}
	e := completionStack(t)
	shellEnv := asBatonctlOnPath(t, e)
	cases := []struct {
		line string
		want []string
	}{
		{"batonctl ge", []string{"get"}},
		{"batonctl queue members ", []string{"add", "remove"}},
		{"batonctl get deploy ", []string{"web"}},
		{"batonctl describe pod/web-", []string{"pod/web-a", "pod/web-b"}},
		{"batonctl get -o ", []string{"json", "name", "wide", "yaml"}},
	}
	run := func(shell string, args ...string) []string {
		t.Helper()
		cmd := exec.CommandContext(t.Context(), shell, args...)
		cmd.Env = shellEnv
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %q: %v\n%s", shell, args, err, out)
		}
		var got []string
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if l != "" {
				got = append(got, l)
			}
		}
		slices.Sort(got)
		return got
	}
	if ferr == nil {
		script := writeFile(t, t.TempDir(), "batonctl.fish", runCtx(t, t.Context(), "", "completion", "fish").mustSucceed(t).stdout)
		for _, tc := range cases {
			if got := run(fish, "--no-config", "-c", `source $argv[1]; complete -C $argv[2]`, script, tc.line); !slices.Equal(got, tc.want) {
				t.Errorf("fish completion of %q = %q, want %q", tc.line, got, tc.want)
			}
		}
	}
	if zerr == nil {
		script := writeFile(t, t.TempDir(), "_batonctl", runCtx(t, t.Context(), "", "completion", "zsh").mustSucceed(t).stdout)
		const prog = `compdef() { :; }
compadd() { local words=0; for a in "$@"; do if (( words )); then print -r -- "$a"; elif [[ $a == -- ]]; then words=1; fi; done; }
_files() { print -r -- "(files)"; }
source "$1"
words=(${=2}); [[ $2 == *" " ]] && words+=("")
CURRENT=${#words}
_batonctl`
		for _, tc := range append(cases, struct {
			line string
			want []string
		}{"batonctl apply -f ", []string{"(files)"}}) {
			if got := run(zsh, "-f", "-c", prog, "zsh", script, tc.line); !slices.Equal(got, tc.want) {
				t.Errorf("zsh completion of %q = %q, want %q", tc.line, got, tc.want)
			}
		}
	}
}
