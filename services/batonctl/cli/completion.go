package cli

// Shell completion, as cobra does it: the scripts `batonctl completion
// bash|zsh|fish` prints hand the words of the line being completed to the
// hidden command `batonctl __complete`, which answers with the candidates,
// one a line, and a last line that says what the shell should do with
// them (":default", ":nospace", ":files" or ":dirs"). So the scripts stay
// small, and completion knows what batonctl knows: the command tree, each
// command's flags, the kinds (declared ones too) and, from etcd and the
// queue, the names of objects and queues.

import (
	"context"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonrun/baton/client/kinds"
	"github.com/batonrun/baton/client/tlsfiles"
	"github.com/batonrun/baton/services/batonctl/internal/printer"
	"github.com/batonrun/baton/services/batonctl/internal/resource"
	"github.com/batonrun/baton/services/runtime/flagenv"
)

// completeCommand is the hidden command the completion scripts call.
const completeCommand = "__complete"

// completionTimeout bounds each server call of a completion: a key press
// waits for it, so a server that does not answer soon gets no more time,
// whatever --timeout says.
const completionTimeout = 2 * time.Second

// completionNameLimit bounds the object names one completion reads.
const completionNameLimit = 1000

// directive says what the shell does with the candidates.
type directive int

const (
	// dirDefault: offer the candidates, a space after the one chosen.
	dirDefault directive = iota
	// dirNoSpace: offer them with no space after (a word that goes on).
	dirNoSpace
	// dirFiles: complete file names as the shell does.
	dirFiles
	// dirDirs: complete directory names as the shell does.
	dirDirs
)

func (d directive) String() string {
	return [...]string{":default", ":nospace", ":files", ":dirs"}[d]
}

// compContext is what a completer knows of the line: the app, its global
// flags parsed from the line (and the environment), and the command's
// flags as far as they are given.
type compContext struct {
	ctx context.Context
	a   *app
	fs  *flag.FlagSet
}

// completer lists the candidates for the word being typed, cur, after the
// command's positional arguments pos. They need not begin with cur:
// complete keeps those that do.
type completer func(cc *compContext, pos []string, cur string) ([]string, directive)

// words completes fixed words.
func words(w ...string) completer {
	return func(*compContext, []string, string) ([]string, directive) { return w, dirDefault }
}

func completeFiles(*compContext, []string, string) ([]string, directive) { return nil, dirFiles }
func completeDirs(*compContext, []string, string) ([]string, directive)  { return nil, dirDirs }

func completeShells(_ *compContext, pos []string, _ string) ([]string, directive) {
	if len(pos) > 0 {
		return nil, dirDefault
	}
	return []string{"bash", "zsh", "fish"}, dirDefault
}

// completeCommands completes the command help is asked about.
func completeCommands(cc *compContext, pos []string, _ string) ([]string, directive) {
	p, rest := walk(cc.a.root, pos)
	if len(rest) > 0 {
		return nil, dirDefault
	}
	return p.leaf().subNames(), dirDefault
}

// knownRoles are the roles certs issue --roles offers.
func knownRoles() []string { return tlsfiles.KnownRoles() }

// The kinds scale and rollout status take; the others take every kind.
var (
	scalable = []string{kinds.Deployment, kinds.ReplicaSet, kinds.StatefulSet}
	rollable = []string{kinds.Deployment}
)

// completeObjects completes what get, describe, delete, scale and rollout
// status take: a resource first, then names of its objects (in -n's
// namespace, or every one with -A); or TYPE/NAME, the names of TYPE. only,
// if set, are the kinds the command takes.
func completeObjects(only []string) completer {
	return func(cc *compContext, pos []string, cur string) ([]string, directive) {
		takes := func(t resource.Type) bool { return only == nil || slices.Contains(only, t.Kind) }
		if word, _, ok := strings.Cut(cur, "/"); ok {
			t, err := cc.a.kinds().Lookup(cc.ctx, word)
			if err != nil || !takes(t) {
				return nil, dirDefault
			}
			var out []string
			for _, name := range cc.names(t) {
				out = append(out, word+"/"+name)
			}
			return out, dirDefault
		}
		if len(pos) == 0 || strings.Contains(pos[0], "/") {
			var out []string
			for _, t := range cc.resources() {
				if takes(t) {
					out = append(out, resourceWord(t, cur))
				}
			}
			if only == nil && cc.fs != nil && cc.fs.Name() == "get" {
				out = append(out, "all")
			}
			return out, dirDefault
		}
		t, err := cc.a.kinds().Lookup(cc.ctx, pos[0])
		if err != nil || !takes(t) {
			return nil, dirDefault
		}
		return cc.names(t), dirDefault
	}
}

// resourceWord is the name of t to offer for cur: its resource, or, when
// cur begins only an alias of it (rs), that alias.
func resourceWord(t resource.Type, cur string) string {
	if strings.HasPrefix(t.Resource, cur) {
		return t.Resource
	}
	for _, n := range t.Names() {
		if strings.HasPrefix(n, cur) {
			return n
		}
	}
	return t.Resource
}

// resources are the kinds known, the declared ones too if etcd answers.
func (cc *compContext) resources() []resource.Type {
	tbl := cc.a.kinds()
	_ = tbl.Discover(cc.ctx) // without etcd, the reference kinds
	return tbl.Known()
}

// names lists the names of t's objects in the namespace of the line's -n
// (every namespace with -A), at most completionNameLimit of them.
func (cc *compContext) names(t resource.Type) []string {
	ns := resource.DefaultNamespace
	if cc.fs != nil {
		if f := cc.fs.Lookup("n"); f != nil {
			ns = f.Value.String()
		}
		if f := cc.fs.Lookup("A"); f != nil && f.Value.String() == "true" {
			ns = ""
		}
	}
	cli, err := cc.a.etcd(cc.ctx)
	if err != nil {
		return nil
	}
	octx, cancel := cc.a.opCtx(cc.ctx)
	defer cancel()
	resp, err := cli.Get(octx, t.NamespacePrefix(ns), clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithLimit(completionNameLimit))
	if err != nil {
		return nil
	}
	var out []string
	for _, kv := range resp.Kvs {
		name := string(kv.Key)[strings.LastIndexByte(string(kv.Key), '/')+1:]
		if name != "" && !slices.Contains(out, name) {
			out = append(out, name)
		}
	}
	return out
}

// completeQueues completes a queue's name, the first argument of the
// queue commands, from the queue's Stats.
func completeQueues(cc *compContext, pos []string, _ string) ([]string, directive) {
	if len(pos) > 0 {
		return nil, dirDefault
	}
	q, err := cc.a.queue()
	if err != nil {
		return nil, dirDefault
	}
	octx, cancel := cc.a.opCtx(cc.ctx)
	defer cancel()
	stats, err := q.Stats(octx, "")
	if err != nil {
		return nil, dirDefault
	}
	var out []string
	for _, s := range stats {
		out = append(out, s.GetQueue())
	}
	return out, dirDefault
}

// globalValues completes the values of the global flags.
var globalValues = map[string]completer{
	"cacert": completeFiles, "cert": completeFiles, "key": completeFiles,
	"etcd-cacert": completeFiles, "etcd-cert": completeFiles, "etcd-key": completeFiles, "etcd-password-file": completeFiles,
}

// cmdComplete is `batonctl __complete WORD… CURRENT`: the candidates for
// CURRENT, the word at the cursor ("" at a new word), after the words
// before it, one a line, and the directive last.
func cmdComplete(ctx context.Context, a *app, args []string) error {
	if len(args) == 0 {
		args = []string{""}
	}
	cands, dir := a.complete(ctx, args[:len(args)-1], args[len(args)-1])
	for _, c := range cands {
		// A name another writer stored may hold characters a terminal
		// acts on (or a line break, which would end the candidate): it
		// cannot be typed either, so it is left out rather than escaped
		// into a word that names nothing.
		if printer.Escape(c) != c {
			continue
		}
		fmt.Fprintln(a.Stdout, c)
	}
	fmt.Fprintln(a.Stdout, dir)
	return nil
}

// complete returns the candidates for cur after the words before it.
func (a *app) complete(ctx context.Context, before []string, cur string) ([]string, directive) {
	p := path{a.root}
	var (
		fs            *flag.FlagSet
		pos, globals  []string
		own           []string
		valueOf       string // the flag whose value cur is, when the word before is one
		valueOfGlobal bool
	)
	takesValue := func(f *flag.Flag) bool {
		b, ok := f.Value.(interface{ IsBoolFlag() bool })
		return !ok || !b.IsBoolFlag()
	}
	for i := 0; i < len(before); i++ {
		w := before[i]
		if w == "--" {
			pos = append(pos, before[i+1:]...)
			break
		}
		if strings.HasPrefix(w, "-") && len(w) > 1 {
			name, _, hasValue := strings.Cut(strings.TrimLeft(w, "-"), "=")
			var f *flag.Flag
			global := false
			if fs != nil {
				f = fs.Lookup(name)
			}
			if f == nil {
				f, global = a.globals.Lookup(name), true
			}
			if f == nil {
				continue // a flag batonctl does not know: no value to skip
			}
			args := []string{w}
			if !hasValue && takesValue(f) {
				if i+1 == len(before) {
					valueOf, valueOfGlobal = name, global
				} else {
					i++
					args = append(args, before[i])
				}
			}
			if global {
				globals = append(globals, args...)
			} else {
				own = append(own, args...)
			}
			continue
		}
		if len(pos) == 0 {
			if s := p.leaf().sub(w); s != nil {
				p = append(p, s)
				fs, _ = flagsOf(p, a)
				continue
			}
		}
		pos = append(pos, w)
	}
	// The line's global flags say where the servers are; a mistake in
	// them only leaves fewer candidates.
	_ = flagenv.Parse(a.globals, EnvPrefix, globals, a.lookupWithAliases)
	if a.timeout <= 0 || a.timeout > completionTimeout {
		a.timeout = completionTimeout
	}
	if fs != nil {
		_, _ = parse(fs, own)
	}
	cc := &compContext{ctx: ctx, a: a, fs: fs}
	leaf := p.leaf()

	// A flag's value: after the flag, or after its "=".
	prefix := ""
	if valueOf == "" && strings.HasPrefix(cur, "-") {
		name, value, hasValue := strings.Cut(strings.TrimLeft(cur, "-"), "=")
		if !hasValue {
			return filter(a.flagNames(fs), cur), dirDefault
		}
		valueOf, valueOfGlobal = name, fs == nil || fs.Lookup(name) == nil
		prefix, cur = cur[:len(cur)-len(value)], value
	}
	if valueOf != "" {
		values := globalValues
		if !valueOfGlobal {
			values = leaf.values
		}
		comp, ok := values[valueOf]
		if !ok {
			return nil, dirDefault
		}
		cands, dir := comp(cc, nil, cur)
		out := filter(cands, cur)
		for i := range out {
			out[i] = prefix + out[i]
		}
		return out, dir
	}

	// A subcommand, then the command's arguments.
	var cands []string
	if len(pos) == 0 {
		cands = leaf.subNames()
	}
	dir := dirDefault
	if leaf.complete != nil && (leaf.setup != nil || leaf.raw != nil) {
		var more []string
		more, dir = leaf.complete(cc, pos, cur)
		if dir == dirFiles || dir == dirDirs {
			return nil, dir
		}
		cands = append(cands, more...)
	}
	return filter(cands, cur), dir
}

// flagNames are the flags to offer: the command's, then the global ones,
// each as it is written (-o, --namespace).
func (a *app) flagNames(fs *flag.FlagSet) []string {
	var out []string
	add := func(f *flag.Flag) {
		if len(f.Name) == 1 {
			out = append(out, "-"+f.Name)
		} else {
			out = append(out, "--"+f.Name)
		}
	}
	if fs != nil {
		fs.VisitAll(add)
	}
	a.globals.VisitAll(add)
	return out
}

// filter keeps the candidates that begin with cur, each once.
func filter(cands []string, cur string) []string {
	var out []string
	for _, c := range cands {
		if strings.HasPrefix(c, cur) && !slices.Contains(out, c) {
			out = append(out, c)
		}
	}
	return out
}

func setupCompletion(_ *flag.FlagSet, a *app) runFunc {
	return func(_ context.Context, pos []string) error {
		if len(pos) != 1 {
			return usagef("usage: batonctl completion bash|zsh|fish")
		}
		script, ok := completionScripts[pos[0]]
		if !ok {
			return usagef("no completion for the shell %q (bash, zsh or fish)", pos[0])
		}
		_, err := io.WriteString(a.Stdout, script)
		return err
	}
}

// completionScripts are the scripts, by shell. Each asks the batonctl
// that is being completed (the word the line begins with) for the
// candidates.
var completionScripts = map[string]string{
	"bash": `# bash completion for batonctl: source <(batonctl completion bash)
_batonctl() {
	local line=${COMP_LINE:0:COMP_POINT}
	local -a words
	read -r -a words <<< "$line"
	# A blank before the cursor begins a new, empty word.
	[[ $line =~ [[:space:]]$ ]] && words+=("")
	(( ${#words[@]} > 1 )) || return 0
	local cur=${words[${#words[@]}-1]}
	local out
	out=$("${words[0]}" __complete "${words[@]:1}" 2>/dev/null) || return 0
	local directive=${out##*$'\n'}
	COMPREPLY=()
	case $directive in
	:files) compopt -o default 2>/dev/null; return 0 ;;
	:dirs) compopt -o dirnames 2>/dev/null; return 0 ;;
	esac
	[[ $out == *$'\n'* ]] || return 0
	mapfile -t COMPREPLY <<< "${out%$'\n'*}"
	# bash replaces only what follows the last ':' or '=' of the word.
	if [[ $cur == *[:=]* ]]; then
		local head=${cur%"${cur##*[:=]}"}
		COMPREPLY=("${COMPREPLY[@]#"$head"}")
	fi
	[[ $directive == :nospace ]] && compopt -o nospace 2>/dev/null
	return 0
}
complete -F _batonctl batonctl
`,
	"zsh": `#compdef batonctl
# zsh completion for batonctl: batonctl completion zsh > "${fpath[1]}/_batonctl"
_batonctl() {
	local out directive
	local -a cands
	out=$("${words[1]}" __complete "${(@)words[2,CURRENT]}" 2>/dev/null) || return 1
	directive=${out##*$'\n'}
	cands=()
	[[ $out == *$'\n'* ]] && cands=("${(@f)${out%$'\n'*}}")
	case $directive in
	(:files) _files ;;
	(:dirs) _files -/ ;;
	(:nospace) compadd -S '' -- "${cands[@]}" ;;
	(*) compadd -- "${cands[@]}" ;;
	esac
}
if [[ ${zsh_eval_context[-1]} == loadautofunc ]]; then
	_batonctl "$@"
else
	compdef _batonctl batonctl
fi
`,
	"fish": `# fish completion for batonctl: batonctl completion fish > ~/.config/fish/completions/batonctl.fish
function __batonctl_complete
	set -l words (commandline -opc)
	set -l cur (commandline -ct)
	set -l out (command $words[1] __complete $words[2..-1] "$cur" 2>/dev/null)
	or return
	set -l directive $out[-1]
	set -e out[-1]
	switch $directive
		case :files
			__fish_complete_path "$cur"
		case :dirs
			__fish_complete_directories "$cur"
		case '*'
			printf '%s\n' $out
	end
end
complete -c batonctl -f -a '(__batonctl_complete)'
`,
}
