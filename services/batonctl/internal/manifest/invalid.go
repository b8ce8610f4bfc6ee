package manifest

import (
	"errors"
	"fmt"
	"sort"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/batonrun/baton/client/schema"
)

// Invalid is an object its kind's schema refuses: every field error, each
// where it is in the manifest, in the API server's words (kubectl prints
// them the same way), one a line in the manifest's order:
//
//	foo.yaml:5:3: The Foo "x" is invalid: spec.bogusField: Unknown field: not in the schema of Foo (known: replicas, size)
//	foo.yaml:6:13: The Foo "x" is invalid: spec.replicas: Invalid value: "three": must be of type integer
type Invalid struct {
	// Kind and Name name the object.
	Kind, Name string
	// At is where the object begins.
	At *Error
	// Fields are the errors, each with its place and field path.
	Fields []*Error
	// Omitted counts the errors beyond schema.MaxErrors.
	Omitted int
	// err is the validator's error.
	err *schema.Errors
}

func (e *Invalid) Error() string {
	head := fmt.Sprintf("The %s %q is invalid: ", e.Kind, e.Name)
	lines := make([]string, 0, len(e.Fields)+1)
	for _, f := range e.Fields {
		f := *f
		f.Field = head + f.Field
		lines = append(lines, f.Error())
	}
	if e.Omitted > 0 {
		at := *e.At
		at.Msg = fmt.Sprintf("%sand %d more errors", head, e.Omitted)
		lines = append(lines, at.Error())
	}
	return strings.Join(lines, "\n")
}

// Unwrap returns the validator's *schema.Errors, so errors.Is(err,
// schema.ErrInvalid) holds.
func (e *Invalid) Unwrap() error { return e.err }

// invalid places the validator's error err of the object at n in file.
func invalid(file string, n *yaml.Node, err error) error {
	var se *schema.Errors
	if !errors.As(err, &se) {
		return &Error{File: file, Line: n.Line, Column: n.Column, Msg: err.Error()}
	}
	out := &Invalid{Kind: se.Kind, Name: se.Name, Omitted: se.Omitted, err: se,
		At: &Error{File: file, Line: n.Line, Column: n.Column}}
	for _, fe := range se.List {
		at := locate(n, fe)
		out.Fields = append(out.Fields, &Error{File: file, Line: at.Line, Column: at.Column, Field: fe.Path.String(), Msg: fe.Body()})
	}
	// In the order of the manifest, top to bottom, as the user reads it.
	sort.SliceStable(out.Fields, func(i, j int) bool {
		a, b := out.Fields[i], out.Fields[j]
		return a.Line < b.Line || a.Line == b.Line && a.Column < b.Column
	})
	return out
}

// locate finds the node a field error is about: the value at its path;
// for an unknown field, its key; for a field that is absent (a required
// one), the mapping it is missing from.
func locate(root *yaml.Node, fe *schema.FieldError) *yaml.Node {
	cur := root
	for i, e := range fe.Path {
		last := i == len(fe.Path)-1
		var next *yaml.Node
		switch t := e.(type) {
		case string:
			next = member(cur, t, last && fe.Type == schema.ErrorUnknown)
		case schema.MapKey:
			next = member(cur, string(t), false)
		case int:
			if cur.Kind == yaml.SequenceNode && t < len(cur.Content) {
				next = deref(cur.Content[t])
			}
		}
		if next == nil {
			return cur
		}
		cur = next
	}
	return cur
}

// member returns the value of key in mapping n (its key node when
// wantKey), or nil.
func member(n *yaml.Node, key string, wantKey bool) *yaml.Node {
	if n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key {
			if wantKey {
				return n.Content[i]
			}
			return deref(n.Content[i+1])
		}
	}
	return nil
}
