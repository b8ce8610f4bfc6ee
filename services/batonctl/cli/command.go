package cli

// The command tree: every command and subcommand with its one-line
// description, usage, example and flags, which dispatch, --help, "did you
// mean" and shell completion all read, so a command added to the table
// (commands.go) has each of them.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/batonrun/baton/services/batonctl/internal/printer"
	"github.com/batonrun/baton/services/batonctl/internal/suggest"
)

// runFunc is a command's body. It gets the positional arguments; its flags
// are parsed into the variables its setup bound.
type runFunc func(ctx context.Context, pos []string) error

// command is one command or subcommand of batonctl.
type command struct {
	name string
	// short is the one-line description: lower case, no full stop.
	short string
	// usage are the synopsis lines, each after "batonctl ".
	usage []string
	// long says more, in paragraphs; optional.
	long string
	// example is lines of commands and "# " comments.
	example string
	// hidden keeps the command out of help and completion (__complete).
	hidden bool
	// subs are the subcommands. A command with subs and a setup runs
	// itself when its first argument names none of them (queue members).
	subs []*command
	// setup defines the command's flags on fs and returns its body. It
	// must have no other effect: it also runs to list the flags (help,
	// completion), on an app whose global flags may not be parsed yet.
	setup func(fs *flag.FlagSet, a *app) runFunc
	// raw, instead of setup, takes the arguments as given (experiment
	// hands them to another program).
	raw func(ctx context.Context, a *app, args []string) error
	// complete lists the candidates for the positional argument being
	// typed, cur, after the positional arguments pos (completion.go).
	complete completer
	// values completes the values of the command's flags, by flag name.
	values map[string]completer
}

// sub returns the subcommand called name, nil if none.
func (c *command) sub(name string) *command {
	for _, s := range c.subs {
		if s.name == name {
			return s
		}
	}
	return nil
}

// visibleSubs are the subcommands help and completion show.
func (c *command) visibleSubs() []*command {
	var out []*command
	for _, s := range c.subs {
		if !s.hidden {
			out = append(out, s)
		}
	}
	return out
}

// subNames are the names of the visible subcommands.
func (c *command) subNames() []string {
	var out []string
	for _, s := range c.visibleSubs() {
		out = append(out, s.name)
	}
	return out
}

// path is a command and the commands above it, from the root (batonctl
// itself) down.
type path []*command

// String is the path as typed after "batonctl": "queue members add".
func (p path) String() string {
	names := make([]string, 0, len(p))
	for _, c := range p[1:] {
		names = append(names, c.name)
	}
	return strings.Join(names, " ")
}

// leaf is the last command of p.
func (p path) leaf() *command { return p[len(p)-1] }

// isRoot reports whether p names no command, only batonctl.
func (p path) isRoot() bool { return len(p) == 1 }

// walk descends from root along words as long as each names a subcommand,
// and returns the path and the words left.
func walk(root *command, words []string) (path, []string) {
	p := path{root}
	for len(words) > 0 {
		s := p.leaf().sub(words[0])
		if s == nil {
			break
		}
		p, words = append(p, s), words[1:]
	}
	return p, words
}

// pathOf is the path that names name, as far as they name commands.
func (a *app) pathOf(names ...string) path {
	p, _ := walk(a.root, names)
	return p
}

// isHelpFlag reports whether arg asks for help.
func isHelpFlag(arg string) bool { return arg == "-h" || arg == "-help" || arg == "--help" }

// flagsOf returns the flag set of the command at p, defined by its setup
// on a; nil for a command without flags of its own.
func flagsOf(p path, a *app) (*flag.FlagSet, runFunc) {
	c := p.leaf()
	if c.setup == nil {
		return nil, nil
	}
	fs := flag.NewFlagSet(p.String(), flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	run := c.setup(fs, a)
	return fs, run
}

// dispatch runs the command words name (the global flags parsed) and
// returns the exit status.
func (a *app) dispatch(ctx context.Context, words []string) int {
	if len(words) == 0 {
		writeRootHelp(a.Stderr, a)
		return 2
	}
	p, rest := walk(a.root, words)
	if p.isRoot() {
		return a.fail(unknownCommand(p, words[0]))
	}
	c := p.leaf()
	switch {
	case c.raw != nil:
		if len(rest) > 0 && isHelpFlag(rest[0]) {
			writeHelp(a.Stdout, p, a)
			return 0
		}
		return a.fail(c.raw(ctx, a, rest))
	case c.setup == nil:
		// A group: its first word is the subcommand.
		switch {
		case len(rest) == 0:
			return a.fail(usagef("batonctl %s needs a command (%s); usage: batonctl %s", p, strings.Join(c.subNames(), ", "), strings.Join(c.usage, " | batonctl ")))
		case isHelpFlag(rest[0]):
			writeHelp(a.Stdout, p, a)
			return 0
		}
		return a.fail(unknownCommand(p, rest[0]))
	}
	fs, run := flagsOf(p, a)
	pos, err := parse(fs, rest)
	if errors.Is(err, flag.ErrHelp) {
		writeHelp(a.Stdout, p, a)
		return 0
	}
	if err == nil {
		err = run(ctx, pos)
	}
	return a.fail(err)
}

// fail prints err, if any, and returns the exit status it calls for: 0, 1
// for a failure, 2 for a usage error.
func (a *app) fail(err error) int {
	var (
		ue usageError
		es exitStatus
	)
	switch {
	case err == nil:
		return 0
	case errors.As(err, &es):
		return int(es)
	case errors.As(err, &ue):
		printError(a.Stderr, err)
		return 2
	case errors.Is(err, flag.ErrHelp):
		return 0
	}
	printError(a.Stderr, err)
	return 1
}

// printError prints err as one "error:" line per line of its message
// (errors.Join's, one per problem). The message quotes what users and
// servers wrote (names, keys, a server's refusal), so it is escaped
// (printer.EscapeText): a line of it can start no line but its own.
func printError(w io.Writer, err error) {
	for _, line := range strings.Split(printer.EscapeText(err.Error()), "\n") {
		fmt.Fprintln(w, "error:", line)
	}
}

// unknownCommand is the usage error of a word that names no subcommand of
// the command at p, with the names it was probably meant to be.
func unknownCommand(p path, word string) error {
	c, what, list := p.leaf(), "command", "batonctl help lists the commands"
	if !p.isRoot() {
		what = p.String() + " command"
		list = "batonctl " + p.String() + " --help lists them"
	}
	msg := fmt.Sprintf("unknown %s %q", what, word)
	if s := suggest.Phrase(suggest.Closest(word, c.subNames())); s != "" {
		msg += ": " + s
	}
	return usagef("%s (%s)", msg, list)
}

// setupHelp is `batonctl help [command…]`: the help of a command, as its
// --help prints it.
func setupHelp(_ *flag.FlagSet, a *app) runFunc {
	return func(_ context.Context, pos []string) error {
		if len(pos) == 0 {
			writeRootHelp(a.Stdout, a)
			return nil
		}
		p, rest := walk(a.root, pos)
		if p.isRoot() {
			return unknownCommand(p, pos[0])
		}
		if len(rest) > 0 {
			if p.leaf().raw == nil && len(p.leaf().subs) > 0 {
				return unknownCommand(p, rest[0])
			}
			return usagef("batonctl %s has no command %q (batonctl help %s)", p, rest[0], p)
		}
		writeHelp(a.Stdout, p, a)
		return nil
	}
}

// writeRootHelp prints batonctl's own help: every command, the resources,
// examples and the global flags.
func writeRootHelp(w io.Writer, a *app) {
	fmt.Fprint(w, "batonctl controls a Baton stack: objects in etcd, the queue and the observer.\n\n")
	fmt.Fprint(w, "Usage: batonctl [global flags] <command> [flags] [args]\n\nCommands:\n")
	var rows [][2]string
	var leaves func(p path)
	leaves = func(p path) {
		for _, s := range p.leaf().visibleSubs() {
			sp := append(slices.Clone(p), s)
			if s.setup != nil || s.raw != nil {
				rows = append(rows, [2]string{sp.String(), s.short})
			}
			leaves(sp)
		}
	}
	leaves(path{a.root})
	width := 0
	for _, r := range rows {
		width = max(width, len(r[0]))
	}
	for _, r := range rows {
		fmt.Fprintf(w, "  %-*s   %s\n", width, r[0], r[1])
	}
	fmt.Fprint(w, "\nResources: deployments (deploy), replicasets (rs), statefulsets (sts), jobs (job), pods (po), events (ev),\n"+
		"  all (get only: every one but events), and the kinds controllers declare;\n"+
		"  TYPE/NAME names one object (deploy/web)\n\n")
	fmt.Fprint(w, "Examples:\n")
	writeIndented(w, a.root.example)
	fmt.Fprint(w, "\nUse \"batonctl <command> --help\" for more about a command.\n\n")
	fmt.Fprint(w, "Global flags (also BATON_BATONCTL_<FLAG> in the environment; they may follow the command):\n")
	a.globals.SetOutput(w)
	a.globals.PrintDefaults()
	a.globals.SetOutput(io.Discard)
}

// writeHelp prints the help of the command at p: what it does, its usage,
// its subcommands, examples and flags.
func writeHelp(w io.Writer, p path, a *app) {
	c := p.leaf()
	fmt.Fprintf(w, "batonctl %s: %s\n\nUsage:\n", p, c.short)
	for _, u := range c.usage {
		fmt.Fprintf(w, "  batonctl %s\n", u)
	}
	if c.long != "" {
		fmt.Fprintf(w, "\n%s\n", strings.TrimSpace(c.long))
	}
	if subs := c.visibleSubs(); len(subs) > 0 {
		fmt.Fprint(w, "\nCommands:\n")
		width := 0
		for _, s := range subs {
			width = max(width, len(s.name))
		}
		for _, s := range subs {
			fmt.Fprintf(w, "  %-*s   %s\n", width, s.name, s.short)
		}
	}
	fmt.Fprint(w, "\nExamples:\n")
	writeIndented(w, c.example)
	if fs, _ := flagsOf(p, a); fs != nil && hasFlags(fs) {
		fmt.Fprint(w, "\nFlags:\n")
		fs.SetOutput(w)
		fs.PrintDefaults()
	}
	if len(c.visibleSubs()) > 0 {
		fmt.Fprintf(w, "\nUse \"batonctl %s <command> --help\" for more about a command.\n", p)
	}
	fmt.Fprint(w, "\nGlobal flags (--etcd-endpoints, --queue-addr, --observer-addr, --timeout, --cacert …): batonctl --help\n")
}

func hasFlags(fs *flag.FlagSet) bool {
	n := 0
	fs.VisitAll(func(*flag.Flag) { n++ })
	return n > 0
}

// writeIndented writes text's lines indented by two spaces.
func writeIndented(w io.Writer, text string) {
	for _, line := range strings.Split(strings.Trim(text, "\n"), "\n") {
		fmt.Fprintf(w, "  %s\n", strings.TrimLeft(line, "\t"))
	}
}
