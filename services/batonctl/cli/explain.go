package cli

// explain, and what else batonctl takes from a kind's schema: the columns
// of get's table.

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/batonrun/baton/client/schema"
	"github.com/batonrun/baton/services/batonctl/internal/printer"
	"github.com/batonrun/baton/services/batonctl/internal/resource"
	"github.com/batonrun/baton/services/batonctl/internal/suggest"
)

// columns returns the headers of typ's table and the function that renders
// an object as its row: the printer columns its controller's declaration
// gives (NAME, those columns, AGE; wide adds those of higher priority), or
// else printer's table of the kind.
func (a *app) columns(typ resource.Type, wide bool) ([]string, func(obj map[string]any) []string) {
	if cols := a.kinds().PrinterColumns(typ); len(cols) > 0 {
		return printer.Declared(cols, wide, a.now())
	}
	return printer.Columns(typ.Kind, a.now())
}

func setupExplain(fs *flag.FlagSet, a *app) runFunc {
	recursive := fs.Bool("recursive", false, "list the fields of every level, not only the first, without descriptions")
	return func(ctx context.Context, pos []string) error {
		if len(pos) != 1 {
			return usagef("usage: batonctl explain <resource>[.FIELD…] [--recursive]")
		}
		word, rest, _ := strings.Cut(pos[0], ".")
		typ, err := a.lookup(ctx, word)
		if err != nil {
			return err
		}
		v, err := a.kinds().Validator(typ)
		if err != nil {
			return err
		}
		var fields []string
		if rest != "" {
			fields = strings.Split(rest, ".")
		}
		f, err := findField(v.Schema(), typ.Kind, fields)
		if err != nil {
			return usageError{err.Error()}
		}
		return writeExplain(a.Stdout, typ, f, *recursive)
	}
}

// schemaField is a node of a kind's schema that explain prints.
type schemaField struct {
	// path is where it is, "" for the whole object.
	path     string
	s        *schema.Schema
	required bool
}

// findField walks root, the schema of a whole object of kind, along
// names, passing through arrays to their elements (as kubectl explain
// does: deploy.spec.template reads the same as a list's field).
func findField(root *schema.Schema, kind string, names []string) (schemaField, error) {
	f := schemaField{s: root}
	var trail []string
	for _, name := range names {
		s := elem(f.s)
		child, ok := s.Properties[name]
		if !ok || name == "" {
			at := strings.Join(append([]string{kind}, trail...), ".")
			known := sortedKeys(s.Properties)
			msg := fmt.Sprintf("field %q does not exist in %s", name, at)
			if p := suggest.Phrase(suggest.Closest(name, known)); p != "" {
				msg += ": " + p
			}
			if len(known) == 0 {
				return schemaField{}, fmt.Errorf("%s (%s has no fields to explain: it is %s)", msg, at, typeName(s))
			}
			return schemaField{}, fmt.Errorf("%s (fields: %s)", msg, strings.Join(known, ", "))
		}
		f = schemaField{path: strings.Join(append(trail, name), "."), s: child, required: slices.Contains(s.Required, name)}
		trail = append(trail, name)
	}
	return f, nil
}

// elem is s, or for an array (of arrays) the schema of its elements.
func elem(s *schema.Schema) *schema.Schema {
	for s.Type == schema.TypeArray && s.Items != nil {
		s = s.Items
	}
	return s
}

// typeName is a node's type as kubectl explain writes it: string,
// integer, Object, []Object, map[string]string, IntOrString.
func typeName(s *schema.Schema) string {
	switch {
	case s.XIntOrString:
		return "IntOrString"
	case s.Type == schema.TypeArray && s.Items != nil:
		return "[]" + typeName(s.Items)
	case s.Type == schema.TypeObject && s.AdditionalProperties != nil:
		return "map[string]" + typeName(s.AdditionalProperties)
	case s.Type == schema.TypeObject:
		return "Object"
	case s.Type == "":
		return "any"
	}
	return s.Type
}

// writeExplain prints f of typ as kubectl explain does: the kind, the
// field and its type, its description and constraints, and its fields.
// A declaration's author wrote the names, descriptions and constraints:
// they are escaped (printer.Escape), a description keeping its lines and
// tabs.
func writeExplain(w io.Writer, typ resource.Type, f schemaField, recursive bool) error {
	var b strings.Builder
	fmt.Fprintf(&b, "KIND:       %s\nRESOURCE:   %s\n\n", printer.Escape(typ.Kind), printer.Escape(typ.Resource))
	if f.path != "" {
		fmt.Fprintf(&b, "FIELD: %s <%s>%s\n\n", printer.Escape(f.path[strings.LastIndexByte(f.path, '.')+1:]), printer.Escape(typeName(f.s)), requiredMark(f.required))
	}
	b.WriteString("DESCRIPTION:\n")
	desc := f.s.Description
	if desc == "" {
		desc = "<empty>"
	}
	for _, line := range describeLines(desc, f.s) {
		b.WriteString("    " + line + "\n")
	}
	if s := elem(f.s); len(s.Properties) > 0 {
		b.WriteString("\nFIELDS:\n")
		writeFields(&b, s, "  ", recursive)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// writeFields lists the fields of s, in name order, indented by indent:
// each with its type and, unless recursive, its description; recursive
// lists their fields under them instead.
func writeFields(b *strings.Builder, s *schema.Schema, indent string, recursive bool) {
	for i, name := range sortedKeys(s.Properties) {
		child := s.Properties[name]
		if i > 0 && !recursive {
			b.WriteString("\n")
		}
		fmt.Fprintf(b, "%s%s\t<%s>%s\n", indent, printer.Escape(name), printer.Escape(typeName(child)), requiredMark(slices.Contains(s.Required, name)))
		if recursive {
			if e := elem(child); len(e.Properties) > 0 {
				writeFields(b, e, indent+"  ", true)
			}
			continue
		}
		desc := child.Description
		if desc == "" {
			desc = "<no description>"
		}
		for _, line := range describeLines(desc, child) {
			b.WriteString(indent + "  " + line + "\n")
		}
	}
}

// describeLines are the lines that describe s, escaped: desc's, then its
// constraints'.
func describeLines(desc string, s *schema.Schema) []string {
	lines := strings.Split(printer.EscapeText(desc), "\n")
	for _, c := range constraints(s) {
		lines = append(lines, printer.Escape(c))
	}
	return lines
}

func requiredMark(required bool) string {
	if required {
		return " -required-"
	}
	return ""
}

// constraints are the lines that say what else a value must be: its
// default, its enum, its bounds, its pattern and format.
func constraints(s *schema.Schema) []string {
	var out []string
	add := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	if s.Default != nil {
		add("default: %s", jsonOf(s.Default))
	}
	if len(s.Enum) > 0 {
		vals := make([]string, len(s.Enum))
		for i, e := range s.Enum {
			vals[i] = jsonOf(e)
		}
		add("enum: %s", strings.Join(vals, ", "))
	}
	if s.Minimum != nil {
		op := ">="
		if s.ExclusiveMinimum {
			op = ">"
		}
		add("minimum: %s %v", op, *s.Minimum)
	}
	if s.Maximum != nil {
		op := "<="
		if s.ExclusiveMaximum {
			op = "<"
		}
		add("maximum: %s %v", op, *s.Maximum)
	}
	for _, l := range []struct {
		name string
		v    *int64
	}{{"minLength", s.MinLength}, {"maxLength", s.MaxLength}, {"minItems", s.MinItems}, {"maxItems", s.MaxItems}} {
		if l.v != nil {
			add("%s: %d", l.name, *l.v)
		}
	}
	if s.Pattern != "" {
		add("pattern: %s", s.Pattern)
	}
	if s.Format != "" {
		add("format: %s", s.Format)
	}
	if s.Nullable {
		add("nullable: true")
	}
	if s.XPreserveUnknownFields && s.Type == schema.TypeObject {
		add("any other fields are kept unchecked")
	}
	return out
}

func jsonOf(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// completeExplain completes explain's argument: a resource, then, after a
// '.', the fields of what comes before it.
func completeExplain(cc *compContext, pos []string, cur string) ([]string, directive) {
	if len(pos) > 0 {
		return nil, dirDefault
	}
	dot := strings.LastIndexByte(cur, '.')
	if dot < 0 {
		var out []string
		for _, t := range cc.resources() {
			out = append(out, resourceWord(t, cur))
		}
		return out, dirDefault
	}
	head := cur[:dot]
	word, rest, _ := strings.Cut(head, ".")
	typ, err := cc.a.kinds().Lookup(cc.ctx, word)
	if err != nil {
		return nil, dirDefault
	}
	v, err := cc.a.kinds().Validator(typ)
	if err != nil {
		return nil, dirDefault
	}
	var names []string
	if rest != "" {
		names = strings.Split(rest, ".")
	}
	f, err := findField(v.Schema(), typ.Kind, names)
	if err != nil {
		return nil, dirDefault
	}
	var out []string
	for _, name := range sortedKeys(elem(f.s).Properties) {
		out = append(out, head+"."+name)
	}
	// No space after a field: a '.' and one of its fields may follow.
	return out, dirNoSpace
}
