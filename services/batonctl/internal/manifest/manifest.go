// Package manifest reads batonctl's input: YAML or JSON files holding one or
// more objects (multi-document YAML, a top-level list, or a {"kind": "List",
// "items": [...]} wrapper), from files, folders or stdin. Every object is
// defaulted and checked against its kind's structural schema
// (client/schema: a reference kind's built-in one, or the one its
// controller's declaration carries) before anything is written, and every
// problem is reported with the file, line, column and field path, in the
// API server's words, so
//
//	web.yaml:7:13: The Deployment "web" is invalid: spec.replicas: Invalid value: "three": must be of type integer
//
// tells the user exactly what to fix. JSON is read by the YAML parser (JSON
// is YAML's flow style), which gives both formats line numbers. Inputs are
// read with the command's context, so that Ctrl-C ends a read that waits
// (a FIFO without a writer, stdin that does not end).
package manifest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"

	"gopkg.in/yaml.v3"

	"github.com/batonrun/baton/client/schema"
	"github.com/batonrun/baton/services/batonctl/internal/resource"
)

// Object is one decoded, validated manifest.
type Object struct {
	// Type is the object's kind.
	Type resource.Type
	// Namespace and Name identify it; Namespace is filled in when the
	// manifest names none.
	Namespace, Name string
	// Value is the object as JSON would decode it (numbers as json.Number),
	// with metadata.namespace set.
	Value map[string]any
	// Source is where the object starts.
	Source Source
}

// Key returns the object's etcd key.
func (o Object) Key() string { return o.Type.Key(o.Namespace, o.Name) }

// Ref is "deployment/web", as kubectl prints an object.
func (o Object) Ref() string { return o.Type.Singular() + "/" + o.Name }

// Source is a place in an input file.
type Source struct {
	File string
	Line int
}

func (s Source) String() string { return fmt.Sprintf("%s:%d", s.File, s.Line) }

// Error is a problem at one place of a manifest.
type Error struct {
	File         string
	Line, Column int
	// Field is the path of the offending field, e.g. "spec.template.spec.image";
	// empty for syntax errors and whole documents.
	Field string
	Msg   string
}

func (e *Error) Error() string {
	var b strings.Builder
	b.WriteString(e.File)
	if e.Line > 0 {
		fmt.Fprintf(&b, ":%d", e.Line)
		if e.Column > 0 {
			fmt.Fprintf(&b, ":%d", e.Column)
		}
	}
	b.WriteString(": ")
	if e.Field != "" {
		b.WriteString(e.Field + ": ")
	}
	b.WriteString(e.Msg)
	return b.String()
}

// Stdin is the file name that means standard input.
const Stdin = "-"

// MaxFileBytes is the most one manifest file, or stdin, may hold: etcd's
// default limit of a request (its --max-request-bytes, 1.5 MiB), which no
// object of a larger file could have been stored under anyway. Reading
// stops there, so a file that never ends (a link to /dev/zero) costs no
// more.
const MaxFileBytes = 1536 << 10

// StdinName names stdin in messages.
const StdinName = "<stdin>"

// Read decodes every manifest in paths: files, folders (their .yaml, .yml and
// .json files, in name order; recursive descends into sub-folders) or "-" for
// stdin. namespace is used for objects whose manifest names none; kinds
// resolves their kinds (nil: the reference kinds only). All errors are
// returned together, joined.
//
// Each input is read until ctx ends (readAll): a FIFO no one writes to,
// or stdin that never closes, would otherwise hold the command forever,
// deaf to Ctrl-C. Read then returns at once an *Interrupted error, and
// no objects.
func Read(ctx context.Context, paths []string, recursive bool, stdin io.Reader, namespace string, kinds Kinds) ([]Object, error) {
	var (
		out  []Object
		errs []error
	)
	read := func(name string, open func() (io.Reader, func(), error)) error {
		data, err := readAll(ctx, name, open)
		if err != nil {
			return err
		}
		objs, err := decode(name, data, namespace, kinds)
		out = append(out, objs...)
		errs = append(errs, err)
		return nil
	}
	for _, p := range paths {
		if p == Stdin {
			err := read(StdinName, func() (io.Reader, func(), error) { return stdin, func() {}, nil })
			if errors.As(err, new(*Interrupted)) {
				return nil, err
			}
			errs = append(errs, err)
			continue
		}
		files, err := expand(p, recursive)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		for _, f := range files {
			err := read(f, func() (io.Reader, func(), error) {
				fh, err := os.Open(f)
				if err != nil {
					return nil, nil, err
				}
				// Closing a FIFO or a pipe also ends a read of it that
				// waits.
				return fh, func() { fh.Close() }, nil
			})
			if errors.As(err, new(*Interrupted)) {
				return nil, err
			}
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return out, err
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no objects found in %s", strings.Join(paths, ", "))
	}
	return out, nil
}

func isManifest(name string) bool {
	switch strings.ToLower(filepath.Ext(name)) {
	case ".yaml", ".yml", ".json":
		return true
	}
	return false
}

// expand turns a path into the files to read.
func expand(p string, recursive bool) ([]string, error) {
	st, err := os.Stat(p)
	if err != nil {
		return nil, err
	}
	if !st.IsDir() {
		return []string{p}, nil
	}
	var files []string
	err = filepath.WalkDir(p, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != p && !recursive {
				return filepath.SkipDir
			}
			return nil
		}
		if isManifest(path) {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	if len(files) == 0 {
		return nil, fmt.Errorf("%s: no .yaml, .yml or .json files", p)
	}
	return files, nil
}

var yamlLine = regexp.MustCompile(`^yaml: line (\d+): (.*)$`)

// Kinds resolves a manifest's kind field: its type and the validator of
// its objects (resource.Table's Validator), or says why it cannot (naming
// the known kinds). A command passes its resource.Table's, which
// discovers the kinds controllers declare and their schemas.
type Kinds func(kind string) (resource.Type, *schema.Validator, error)

// TableKinds resolves kinds through t: ByKind, then Validator.
func TableKinds(ctx context.Context, t *resource.Table) Kinds {
	return func(kind string) (resource.Type, *schema.Validator, error) {
		typ, err := t.ByKind(ctx, kind)
		if err != nil {
			return resource.Type{}, nil, err
		}
		v, err := t.Validator(typ)
		return typ, v, err
	}
}

// referenceKinds resolves the reference kinds only.
func referenceKinds(kind string) (resource.Type, *schema.Validator, error) {
	return TableKinds(context.Background(), resource.NewTable(nil))(kind)
}

// Interrupted is the error of an input whose reading the command's
// context ended (Ctrl-C, SIGTERM) before its end: nothing of it is used.
type Interrupted struct {
	// Name is the input's: its path, or StdinName.
	Name string
	// Cause is why the context ended (context.Cause): the signal's
	// "interrupt signal received" for a Ctrl-C.
	Cause error
}

func (e *Interrupted) Error() string {
	return fmt.Sprintf("%s: reading stopped before its end: %v", e.Name, e.Cause)
}

// Unwrap returns the cause, so errors.Is(err, context.Canceled) holds.
func (e *Interrupted) Unwrap() error { return e.Cause }

// readAll reads the input open opens (a reader, and what ends a read of it
// that waits), at most MaxFileBytes+1 bytes, until ctx ends. Opening a
// FIFO waits for a writer, and reading stdin or a pipe for its writer to
// close it, inside a system call that nothing in the process can
// interrupt: so both run in a goroutine, which ctx's end abandons,
// closing the file (which ends a read of a FIFO at once). A goroutine
// still waiting in an open, or in a read of stdin, then waits on until
// its writer comes or the process exits, which, for batonctl, is next.
func readAll(ctx context.Context, name string, open func() (io.Reader, func(), error)) ([]byte, error) {
	if ctx.Err() != nil {
		return nil, &Interrupted{Name: name, Cause: context.Cause(ctx)}
	}
	type result struct {
		data []byte
		err  error
		read bool // err is the read's, not the open's
	}
	var (
		mu        sync.Mutex
		stop      func() // closes the input, once it is open
		abandoned bool
		done      = make(chan result, 1)
	)
	go func() {
		r, closeIt, err := open()
		if err != nil {
			done <- result{err: err}
			return
		}
		mu.Lock()
		if abandoned {
			mu.Unlock()
			closeIt()
			return
		}
		stop = closeIt
		mu.Unlock()
		data, err := io.ReadAll(io.LimitReader(r, MaxFileBytes+1))
		closeIt()
		done <- result{data, err, true}
	}()
	select {
	case res := <-done:
		switch {
		case res.err != nil && ctx.Err() != nil:
			return nil, &Interrupted{Name: name, Cause: context.Cause(ctx)}
		case res.err != nil && res.read:
			return nil, fmt.Errorf("%s: %w", name, res.err)
		case res.err != nil:
			return nil, res.err // os.Open's names the file
		}
		return res.data, nil
	case <-ctx.Done():
		mu.Lock()
		abandoned = true
		if stop != nil {
			stop()
		}
		mu.Unlock()
		return nil, &Interrupted{Name: name, Cause: context.Cause(ctx)}
	}
}

// Decode reads every object in one input named file (for messages). kinds
// resolves their kinds; nil knows the reference kinds only. An input of more
// than MaxFileBytes is an error naming file and the limit, and no more than
// that is read of it.
func Decode(file string, r io.Reader, namespace string, kinds Kinds) ([]Object, error) {
	data, err := io.ReadAll(io.LimitReader(r, MaxFileBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	return decode(file, data, namespace, kinds)
}

// decode is Decode of the input data, read already (at most MaxFileBytes+1
// bytes of it).
func decode(file string, data []byte, namespace string, kinds Kinds) ([]Object, error) {
	if kinds == nil {
		kinds = referenceKinds
	}
	if len(data) > MaxFileBytes {
		return nil, fmt.Errorf("%s: larger than %d bytes (1.5 MiB), the most a manifest file may hold: etcd takes no larger request", file, MaxFileBytes)
	}
	if t := bytes.TrimSpace(data); len(t) > 0 && (t[0] == '{' || t[0] == '[') {
		// JSON: a tab is whitespace there but may not indent YAML. Tabs
		// cannot occur unescaped inside JSON strings, so replacing them
		// changes no value and keeps every line number.
		data = bytes.ReplaceAll(data, []byte{'\t'}, []byte{' '})
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var (
		out  []Object
		errs []error
	)
	for {
		var doc yaml.Node
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			e := &Error{File: file, Msg: strings.TrimPrefix(err.Error(), "yaml: ")}
			if m := yamlLine.FindStringSubmatch(err.Error()); m != nil {
				e.Line, _ = strconv.Atoi(m[1])
				e.Msg = m[2]
			}
			errs = append(errs, e)
			break // the parser cannot resynchronise after a syntax error
		}
		if doc.Kind != yaml.DocumentNode || len(doc.Content) == 0 || deref(doc.Content[0]).Tag == "!!null" {
			continue // an empty document, e.g. around a "---"
		}
		for _, n := range items(deref(doc.Content[0])) {
			obj, err := decodeObject(file, n, namespace, kinds)
			if err != nil {
				errs = append(errs, err)
				continue
			}
			out = append(out, obj)
		}
	}
	return out, errors.Join(errs...)
}

// items unwraps a top-level list or a {"kind": "List", "items": [...]}.
func items(n *yaml.Node) []*yaml.Node {
	if n.Kind == yaml.SequenceNode {
		return derefAll(n.Content)
	}
	if n.Kind == yaml.MappingNode {
		if k := lookup(n, "kind"); k != nil && k.Kind == yaml.ScalarNode && k.Value == "List" {
			if it := lookup(n, "items"); it != nil && it.Kind == yaml.SequenceNode {
				return derefAll(it.Content)
			}
		}
	}
	return []*yaml.Node{n}
}

func deref(n *yaml.Node) *yaml.Node {
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	return n
}

func derefAll(ns []*yaml.Node) []*yaml.Node {
	out := make([]*yaml.Node, len(ns))
	for i, n := range ns {
		out[i] = deref(n)
	}
	return out
}

// lookup returns the value of key in mapping n, or nil.
func lookup(n *yaml.Node, key string) *yaml.Node {
	if n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			return deref(n.Content[i+1])
		}
	}
	return nil
}

var (
	// dnsSubdomain is Kubernetes' rule for object names.
	dnsSubdomain = regexp.MustCompile(`^[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?$`)
	// dnsLabel is Kubernetes' rule for namespaces.
	dnsLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)
)

func decodeObject(file string, n *yaml.Node, namespace string, kinds Kinds) (Object, error) {
	at := func(n *yaml.Node, field, format string, args ...any) error {
		return &Error{File: file, Line: n.Line, Column: n.Column, Field: field, Msg: fmt.Sprintf(format, args...)}
	}
	if n.Kind != yaml.MappingNode {
		return Object{}, at(n, "", "an object must be a mapping, got %s", describe(n))
	}
	kn := lookup(n, "kind")
	if kn == nil || kn.Tag == "!!null" {
		return Object{}, at(n, "kind", "missing required field")
	}
	if kn.Kind != yaml.ScalarNode || kn.Tag != "!!str" {
		return Object{}, at(kn, "kind", "must be a string, got %s", describe(kn))
	}
	typ, v, err := kinds(kn.Value)
	if err != nil {
		return Object{}, at(kn, "kind", "%v", err)
	}
	value, _ := toValue(n).(map[string]any)
	// status has one writer, the controller: apply ignores a manifest's
	// (so that get -o yaml round-trips), and it is not checked either.
	delete(value, "status")
	if err := v.Admit(value); err != nil {
		return Object{}, invalid(file, n, err)
	}
	md := lookup(n, "metadata")
	nameNode := lookup(md, "name")
	if !dnsSubdomain.MatchString(nameNode.Value) {
		return Object{}, at(nameNode, "metadata.name", "%q is not a valid name (lower-case letters, digits, '-' and '.', starting and ending with a letter or digit, at most 253 characters)", nameNode.Value)
	}
	ns := namespace
	if nsNode := lookup(md, "namespace"); nsNode != nil && nsNode.Tag == "!!str" {
		if !dnsLabel.MatchString(nsNode.Value) {
			return Object{}, at(nsNode, "metadata.namespace", "%q is not a valid namespace (a DNS label: lower-case letters, digits and '-', at most 63 characters)", nsNode.Value)
		}
		ns = nsNode.Value
	}
	if ns == "" {
		ns = resource.DefaultNamespace
	}
	meta, _ := value["metadata"].(map[string]any)
	meta["namespace"] = ns
	return Object{
		Type: typ, Namespace: ns, Name: nameNode.Value, Value: value,
		Source: Source{File: file, Line: n.Line},
	}, nil
}

// describe names a node's type and, for scalars, its value.
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		switch n.Tag {
		case "!!str":
			return fmt.Sprintf("string %q", n.Value)
		case "!!int":
			return "integer " + n.Value
		case "!!float":
			return "number " + n.Value
		case "!!bool":
			return "boolean " + n.Value
		case "!!null":
			return "null"
		}
		return fmt.Sprintf("%s %q", strings.TrimPrefix(n.Tag, "!!"), n.Value)
	}
	return "an unsupported node"
}

// toValue converts a node to what encoding/json would decode from the same
// document with UseNumber: maps, slices, strings, bools, json.Number, nil.
// Null fields are dropped (unset), so they are not stored.
func toValue(n *yaml.Node) any {
	n = deref(n)
	switch n.Kind {
	case yaml.MappingNode:
		m := make(map[string]any, len(n.Content)/2)
		for i := 0; i+1 < len(n.Content); i += 2 {
			if val := toValue(n.Content[i+1]); val != nil {
				m[n.Content[i].Value] = val
			}
		}
		return m
	case yaml.SequenceNode:
		s := make([]any, 0, len(n.Content))
		for _, e := range n.Content {
			s = append(s, toValue(e))
		}
		return s
	case yaml.ScalarNode:
		switch n.Tag {
		case "!!null":
			return nil
		case "!!bool":
			var b bool
			_ = n.Decode(&b)
			return b
		case "!!int":
			var i int64
			if n.Decode(&i) == nil {
				return json.Number(strconv.FormatInt(i, 10))
			}
			return n.Value
		case "!!float":
			var f float64
			if n.Decode(&f) == nil {
				return json.Number(strconv.FormatFloat(f, 'g', -1, 64))
			}
			return n.Value
		}
		return n.Value
	}
	return nil
}
