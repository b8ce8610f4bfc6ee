// Package schema is the structural schema of a kind's objects, as a
// CustomResourceDefinition carries one: the subset of OpenAPI v3 that
// Kubernetes calls structural (a type at every node, properties, items,
// additionalProperties as a map, required, enum, bounds, lengths, pattern,
// a few formats, default, nullable, x-kubernetes-preserve-unknown-fields
// for an open subtree, x-kubernetes-int-or-string), and the printer
// columns that batonctl get shows for the kind.
//
// A controller's declaration (client/kinds.Declaration) may carry a
// structural schema and printer columns; the reference kinds carry theirs
// the same way. Every writer that knows a kind's schema (batonctl, the Go
// SDK's objects.Client) runs the same Validator before it writes: nulls of
// fields that are not nullable are dropped and defaults filled in (as the
// API server defaults a custom resource), then the object is checked, and
// an object with any error is not written. etcd itself checks nothing: a
// value put with etcdctl, or by a writer that knows no schema, is stored as
// it is.
//
// # Unknown fields
//
// A field the schema does not declare is refused, not pruned: the API
// server's other choice, dropping it silently, turns a typo ("replcias")
// into a field that is stored nowhere and a controller that ignores the
// user. An open subtree says so with x-kubernetes-preserve-unknown-fields.
//
// # Errors
//
// Errors read as the API server's field errors, every error of an object
// at once (up to MaxErrors):
//
//	Foo "x" is invalid: [spec.replicas: Invalid value: "three": must be of type integer, spec.bogusField: Unknown field: not in the schema of Foo (known: replicas, size)]
package schema

import (
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"
)

// Limits of a schema, so that what anyone who may write a declaration
// publishes cannot make a writer or the observer spend without bound
// compiling or walking it (the declaration's bytes are bounded too, by
// client/kinds.MaxDeclarationBytes).
const (
	// MaxDepth bounds the nesting of a schema: properties, items and
	// additionalProperties below the spec's or status's root.
	MaxDepth = 32
	// MaxNodes bounds the schema nodes of one kind (spec and status
	// together).
	MaxNodes = 2000
	// MaxColumns bounds the printer columns of one kind.
	MaxColumns = 16
	// MaxErrors bounds the errors reported for one object; the rest are
	// counted.
	MaxErrors = 20
)

// Schema is one node of a structural schema: OpenAPI v3's JSONSchemaProps,
// the part of it a CustomResourceDefinition's structural schema uses.
type Schema struct {
	// Type is "object", "array", "string", "integer", "number" or
	// "boolean"; it may be empty only with XPreserveUnknownFields or
	// XIntOrString.
	Type string `json:"type,omitempty"`
	// Description says what the field means; batonctl explain prints it.
	Description string `json:"description,omitempty"`

	// Properties are an object's fields.
	Properties map[string]*Schema `json:"properties,omitempty"`
	// Required names the properties that must be present (and not null).
	Required []string `json:"required,omitempty"`
	// AdditionalProperties makes an object a map: any key, each value of
	// this schema. It excludes Properties.
	AdditionalProperties *Schema `json:"additionalProperties,omitempty"`
	// XPreserveUnknownFields keeps, unchecked, the fields Properties does
	// not name (an open subtree).
	XPreserveUnknownFields bool `json:"x-kubernetes-preserve-unknown-fields,omitempty"`

	// Items is the schema of an array's elements.
	Items *Schema `json:"items,omitempty"`
	// MinItems and MaxItems bound an array's length.
	MinItems *int64 `json:"minItems,omitempty"`
	MaxItems *int64 `json:"maxItems,omitempty"`

	// Enum lists the only values allowed.
	Enum []any `json:"enum,omitempty"`

	// Minimum and Maximum bound a number; ExclusiveMinimum and
	// ExclusiveMaximum make the bound itself not allowed.
	Minimum          *float64 `json:"minimum,omitempty"`
	Maximum          *float64 `json:"maximum,omitempty"`
	ExclusiveMinimum bool     `json:"exclusiveMinimum,omitempty"`
	ExclusiveMaximum bool     `json:"exclusiveMaximum,omitempty"`

	// MinLength and MaxLength bound a string's length in characters.
	MinLength *int64 `json:"minLength,omitempty"`
	MaxLength *int64 `json:"maxLength,omitempty"`
	// Pattern is a regular expression (Go's RE2 syntax, as the API server
	// uses) a string must match somewhere; anchor it with ^ and $.
	Pattern string `json:"pattern,omitempty"`
	// Format is one of Formats.
	Format string `json:"format,omitempty"`

	// XIntOrString takes an integer or a string (a count or "25%"); the
	// string keywords check strings, the number keywords integers.
	XIntOrString bool `json:"x-kubernetes-int-or-string,omitempty"`

	// Default is the value a writer fills in when the field is absent (or
	// null and not nullable) in an object that is present.
	Default any `json:"default,omitempty"`
	// Nullable lets the value be null. Without it a null is taken as
	// absent: dropped, then defaulted.
	Nullable bool `json:"nullable,omitempty"`
}

// Kind is the schema of one kind's objects: of their spec and of their
// status. Either may be nil: that part is an object with any fields. An
// object's kind, apiVersion and metadata are checked the same for every
// kind (Metadata).
type Kind struct {
	Spec   *Schema `json:"spec,omitempty"`
	Status *Schema `json:"status,omitempty"`
}

// The types of a schema node.
const (
	TypeObject  = "object"
	TypeArray   = "array"
	TypeString  = "string"
	TypeInteger = "integer"
	TypeNumber  = "number"
	TypeBoolean = "boolean"
)

var types = []string{TypeObject, TypeArray, TypeString, TypeInteger, TypeNumber, TypeBoolean}

// Formats are the formats a string may be held to.
var Formats = []string{"date-time", "date"}

// Check names the first way k is not a structural schema within the
// limits: each part's root an object, every node typed, each keyword on a
// type it applies to, every pattern compiled, every default and enum value
// valid against its own node.
func (k *Kind) Check() error {
	_, _, err := compileKind(k)
	return err
}

// compileKind checks k and compiles its parts; nil parts stay nil.
func compileKind(k *Kind) (spec, status *node, err error) {
	if k == nil {
		return nil, nil, nil
	}
	if k.Spec == nil && k.Status == nil {
		return nil, nil, errors.New("schema: declares neither spec nor status")
	}
	c := &compiler{}
	if k.Spec != nil {
		if spec, err = c.root(k.Spec, "spec"); err != nil {
			return nil, nil, err
		}
	}
	if k.Status != nil {
		if status, err = c.root(k.Status, "status"); err != nil {
			return nil, nil, err
		}
	}
	return spec, status, nil
}

// node is one schema node, compiled: its pattern, enum and default ready,
// its children compiled.
type node struct {
	s          *Schema
	props      map[string]*node
	additional *node
	items      *node
	pattern    *regexp.Regexp
	enum       map[string]bool // canonical JSON of each value
	def        any             // Default, as JSON decodes it (numbers as json.Number)
	hasDef     bool
}

// open reports whether n keeps fields it does not declare.
func (n *node) open() bool { return n.s.XPreserveUnknownFields }

// compiler compiles one kind's schema, counting its nodes.
type compiler struct{ nodes int }

func (c *compiler) root(s *Schema, path string) (*node, error) {
	if s.Type != TypeObject {
		return nil, fmt.Errorf("schema: %s: the root must be of type object, not %s", path, typeName(s.Type))
	}
	if s.Nullable {
		return nil, fmt.Errorf("schema: %s: the root may not be nullable", path)
	}
	return c.compile(s, path, 0)
}

func typeName(t string) string {
	if t == "" {
		return "untyped"
	}
	return fmt.Sprintf("%q", t)
}

func (c *compiler) compile(s *Schema, path string, depth int) (*node, error) {
	fail := func(format string, args ...any) (*node, error) {
		return nil, fmt.Errorf("schema: %s: %s", path, fmt.Sprintf(format, args...))
	}
	if s == nil {
		return fail("is empty (null)")
	}
	c.nodes++
	if c.nodes > MaxNodes {
		return fail("more than %d schema nodes in one kind", MaxNodes)
	}
	if depth > MaxDepth {
		return fail("nested deeper than %d levels", MaxDepth)
	}
	n := &node{s: s}
	switch {
	case s.XIntOrString:
		if s.Type != "" {
			return fail("x-kubernetes-int-or-string takes no type (it is an integer or a string), not %q", s.Type)
		}
	case s.Type == "":
		if !s.XPreserveUnknownFields {
			return fail("has no type: give one of %s (or x-kubernetes-preserve-unknown-fields for any value)", strings.Join(types, ", "))
		}
	case !slices.Contains(types, s.Type):
		return fail("type %q is not one of %s", s.Type, strings.Join(types, ", "))
	}
	isObject := s.Type == TypeObject
	isString := s.Type == TypeString || s.XIntOrString
	isNumber := s.Type == TypeInteger || s.Type == TypeNumber || s.XIntOrString
	only := func(set bool, keyword, types string) error {
		if set {
			return fmt.Errorf("schema: %s: %s: only for %s, not for type %s", path, keyword, types, typeName(s.Type))
		}
		return nil
	}
	for _, e := range []error{
		only(!isObject && len(s.Properties) > 0, "properties", "objects"),
		only(!isObject && len(s.Required) > 0, "required", "objects"),
		only(!isObject && s.AdditionalProperties != nil, "additionalProperties", "objects"),
		only(s.Type != TypeObject && s.Type != "" && s.XPreserveUnknownFields, "x-kubernetes-preserve-unknown-fields", "objects"),
		only(s.Type != TypeArray && s.Items != nil, "items", "arrays"),
		only(s.Type != TypeArray && (s.MinItems != nil || s.MaxItems != nil), "minItems and maxItems", "arrays"),
		only(!isString && (s.MinLength != nil || s.MaxLength != nil), "minLength and maxLength", "strings"),
		only(!isString && s.Pattern != "", "pattern", "strings"),
		only(!isString && s.Format != "", "format", "strings"),
		only(!isNumber && (s.Minimum != nil || s.Maximum != nil || s.ExclusiveMinimum || s.ExclusiveMaximum), "minimum and maximum", "integers and numbers"),
	} {
		if e != nil {
			return nil, e
		}
	}
	if s.Type == TypeArray && s.Items == nil {
		return fail("an array needs items, the schema of its elements")
	}
	if len(s.Properties) > 0 && s.AdditionalProperties != nil {
		return fail("properties and additionalProperties exclude each other (a map has no fixed fields)")
	}
	if s.ExclusiveMinimum && s.Minimum == nil {
		return fail("exclusiveMinimum needs minimum")
	}
	if s.ExclusiveMaximum && s.Maximum == nil {
		return fail("exclusiveMaximum needs maximum")
	}
	if s.Minimum != nil && s.Maximum != nil && *s.Minimum > *s.Maximum {
		return fail("minimum %v is above maximum %v", *s.Minimum, *s.Maximum)
	}
	for _, b := range []struct {
		name     string
		min, max *int64
	}{{"Length", s.MinLength, s.MaxLength}, {"Items", s.MinItems, s.MaxItems}} {
		if b.min != nil && *b.min < 0 || b.max != nil && *b.max < 0 {
			return fail("min%s and max%s may not be negative", b.name, b.name)
		}
		if b.min != nil && b.max != nil && *b.min > *b.max {
			return fail("min%s %d is above max%s %d", b.name, *b.min, b.name, *b.max)
		}
	}
	if s.Format != "" && !slices.Contains(Formats, s.Format) {
		return fail("format %q is not one of %s", s.Format, strings.Join(Formats, ", "))
	}
	if s.Pattern != "" {
		re, err := regexp.Compile(s.Pattern)
		if err != nil {
			return fail("pattern %q does not compile: %v", s.Pattern, err)
		}
		n.pattern = re
	}
	names := make([]string, 0, len(s.Properties))
	for name := range s.Properties {
		names = append(names, name)
	}
	sort.Strings(names) // the first error is the same each time
	if len(names) > 0 {
		n.props = make(map[string]*node, len(names))
	}
	for _, name := range names {
		if name == "" {
			return fail("a property has an empty name")
		}
		child, err := c.compile(s.Properties[name], join(path, name), depth+1)
		if err != nil {
			return nil, err
		}
		n.props[name] = child
	}
	seen := map[string]bool{}
	for _, r := range s.Required {
		if seen[r] {
			return fail("required names %q twice", r)
		}
		seen[r] = true
		if _, ok := s.Properties[r]; !ok && !s.XPreserveUnknownFields {
			return fail("required names %q, which is not among its properties", r)
		}
	}
	var err error
	if s.AdditionalProperties != nil {
		if n.additional, err = c.compile(s.AdditionalProperties, path+".additionalProperties", depth+1); err != nil {
			return nil, err
		}
	}
	if s.Items != nil {
		if n.items, err = c.compile(s.Items, path+"[*]", depth+1); err != nil {
			return nil, err
		}
	}
	if s.Enum != nil {
		if len(s.Enum) == 0 {
			return fail("enum is empty: no value could be valid")
		}
		n.enum = make(map[string]bool, len(s.Enum))
		for _, v := range s.Enum {
			nv, err := normalize(v)
			if err != nil {
				return fail("enum value %v: %v", v, err)
			}
			if errs := validateOne(n, nv, path, true); errs != nil {
				return fail("enum value %s is not valid here: %s", render(nv), errs.List[0].body())
			}
			n.enum[canonical(nv)] = true
		}
	}
	if s.Default != nil {
		nv, err := normalize(s.Default)
		if err != nil {
			return fail("default %v: %v", s.Default, err)
		}
		applyDefaults(n, &nv)
		if errs := validateOne(n, nv, path, false); errs != nil {
			return fail("default %s is not valid here: %s", render(nv), errs.List[0].body())
		}
		n.def, n.hasDef = nv, true
	}
	return n, nil
}

// normalize turns v into what encoding/json decodes with UseNumber: maps,
// slices, strings, bools, json.Number and nil.
func normalize(v any) (any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	return decodeJSON(b)
}

// deepCopy copies a normalized value.
func deepCopy(v any) any {
	switch t := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, e := range t {
			out[k] = deepCopy(e)
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, e := range t {
			out[i] = deepCopy(e)
		}
		return out
	}
	return v
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}
