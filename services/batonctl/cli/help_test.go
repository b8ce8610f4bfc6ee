package cli

import (
	"slices"
	"strings"
	"testing"
)

// commandPaths returns every visible command and subcommand, as typed
// after batonctl.
func commandPaths() [][]string {
	var out [][]string
	var walkTree func(prefix []string, c *command)
	walkTree = func(prefix []string, c *command) {
		for _, s := range c.visibleSubs() {
			p := append(slices.Clone(prefix), s.name)
			out = append(out, p)
			walkTree(p, s)
		}
	}
	walkTree(nil, newTree())
	return out
}

// TestHelpEveryCommand walks every command and subcommand: --help, -h and
// `help CMD` each exit 0 and print, on stdout, its description, its usage
// and an example of it; and batonctl's own help lists each.
func TestHelpEveryCommand(t *testing.T) {
	paths := commandPaths()
	if len(paths) < 20 {
		t.Fatalf("only %d commands in the tree: %q", len(paths), paths)
	}
	root := runCtx(t, t.Context(), "", "--help")
	if root.code != 0 {
		t.Fatalf("batonctl --help: exit %d\n%s", root.code, root.stderr)
	}
	tree := newTree()
	for _, p := range paths {
		name := strings.Join(p, " ")
		c := tree
		for _, w := range p {
			c = c.sub(w)
		}
		for _, args := range [][]string{append(slices.Clone(p), "--help"), append(slices.Clone(p), "-h"), append([]string{"help"}, p...)} {
			r := runCtx(t, t.Context(), "", args...)
			switch {
			case r.code != 0 || r.stderr != "":
				t.Errorf("batonctl %s: exit %d, stderr %q", strings.Join(args, " "), r.code, r.stderr)
			case !strings.HasPrefix(r.stdout, "batonctl "+name+": "+c.short+"\n"):
				t.Errorf("batonctl %s does not begin with the command and its description:\n%s", strings.Join(args, " "), r.stdout)
			case !strings.Contains(r.stdout, "\nUsage:\n  batonctl "+name):
				t.Errorf("batonctl %s shows no usage of %s:\n%s", strings.Join(args, " "), name, r.stdout)
			case !strings.Contains(r.stdout, "\nExamples:\n") || !strings.Contains(r.stdout[strings.Index(r.stdout, "\nExamples:\n"):], "  batonctl "+name):
				t.Errorf("batonctl %s shows no example of %s:\n%s", strings.Join(args, " "), name, r.stdout)
			}
		}
		if c.setup != nil || c.raw != nil {
			if !hasRow(root.stdout, p...) {
				t.Errorf("batonctl --help does not list %s:\n%s", name, root.stdout)
			}
		}
	}
	// The flags of a command are in its help, and the subcommands of a
	// group in its.
	if r := runCtx(t, t.Context(), "", "get", "--help"); !strings.Contains(r.stdout, "\nFlags:\n") || !strings.Contains(r.stdout, "-watch-only") {
		t.Errorf("get --help lacks its flags:\n%s", r.stdout)
	}
	if r := runCtx(t, t.Context(), "", "queue", "--help"); !hasRow(r.stdout, "stats", "every", "queue's", "counters") || !hasRow(r.stdout, "members") {
		t.Errorf("queue --help lacks its commands:\n%s", r.stdout)
	}
	// The hidden command completion calls is in no help.
	if strings.Contains(root.stdout, completeCommand) {
		t.Errorf("batonctl --help lists %s:\n%s", completeCommand, root.stdout)
	}
}

// TestDidYouMean: an unknown command, subcommand or resource is a usage
// error (exit 2) of one line that names what it was probably meant to be,
// if anything is close.
func TestDidYouMean(t *testing.T) {
	live := env{etcd: startEtcd(t)}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"gt", "pods"}, `unknown command "gt": did you mean get? (batonctl help lists the commands)`},
		{[]string{"stauts"}, `unknown command "stauts": did you mean status?`},
		{[]string{"frobnicate"}, `unknown command "frobnicate" (batonctl help lists the commands)`},
		{[]string{"queue", "statz"}, `unknown queue command "statz": did you mean stats? (batonctl queue --help lists them)`},
		{[]string{"queue", "members", "ad", "x"}, `unknown queue members command "ad": did you mean add?`},
		{[]string{"queue", "snapshot", "sav", "f"}, `unknown queue snapshot command "sav": did you mean save?`},
		{[]string{"certs", "inti", "d"}, `unknown certs command "inti": did you mean init?`},
		{[]string{"rollout", "stauts", "deploy/web"}, `unknown rollout command "stauts": did you mean status?`},
		{[]string{"get", "deploymnets"}, `unknown resource "deploymnets": did you mean deployments or deployment?`},
		{[]string{"describe", "rss/web"}, `unknown resource "rss": did you mean rs?`},
		{[]string{"help", "gte"}, `unknown command "gte": did you mean get?`},
		{[]string{"help", "queue", "lsit"}, `unknown queue command "lsit": did you mean list?`},
		{[]string{"queue"}, "batonctl queue needs a command (stats, list, inspect, forget, members, move-leader, snapshot)"},
		{[]string{"rollout"}, "batonctl rollout needs a command (status); usage: batonctl rollout status TYPE/NAME"},
	} {
		r := live.run(t, "", tc.args...)
		if r.code != 2 || !strings.HasPrefix(r.stderr, "error: ") || !strings.Contains(r.stderr, tc.want) || strings.Count(r.stderr, "\n") != 1 {
			t.Errorf("batonctl %q: exit %d, stderr %q; want 2 and one line with %q", tc.args, r.code, r.stderr, tc.want)
		}
	}
}
