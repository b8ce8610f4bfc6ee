package schema

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"
)

// Validator defaults and checks the objects of one kind: their kind and
// apiVersion, their metadata (Metadata), and their spec and status as the
// kind's schema says. It is safe for concurrent use; the schema it was
// compiled from must not change after.
type Validator struct {
	kind   string
	schema *Schema
	root   *node
}

// Compile returns the Validator of objects of kind (a kind name, such as
// "ReplicaSet") whose schema is k. A nil k, or a nil part of it, takes
// any fields there: the object around it is still checked.
func Compile(kind string, k *Kind) (*Validator, error) {
	spec, status, err := compileKind(k)
	if err != nil {
		return nil, err
	}
	s := envelope(kind, k)
	c := &compiler{}
	root := &node{s: s, props: map[string]*node{}}
	for _, name := range []string{"apiVersion", "kind", "metadata"} {
		n, err := c.compile(s.Properties[name], name, 1)
		if err != nil {
			return nil, fmt.Errorf("the envelope of %s: %w", kind, err)
		}
		root.props[name] = n
	}
	for name, part := range map[string]*node{"spec": spec, "status": status} {
		if part == nil {
			part = &node{s: s.Properties[name]}
		}
		root.props[name] = part
	}
	return &Validator{kind: kind, schema: s, root: root}, nil
}

// MustCompile is Compile for schemas written in the program (the
// reference kinds'); it panics on an error, which is a programming error.
func MustCompile(kind string, k *Kind) *Validator {
	v, err := Compile(kind, k)
	if err != nil {
		panic(err)
	}
	return v
}

// Kind returns the kind v checks.
func (v *Validator) Kind() string { return v.kind }

// Schema returns the schema of a whole object of v's kind, as Admit
// checks it: kind, apiVersion, metadata, spec and status.
func (v *Validator) Schema() *Schema { return v.schema }

// envelope is the schema of a whole object of kind: what every kind's
// objects share, around k's spec and status.
func envelope(kind string, k *Kind) *Schema {
	spec := &Schema{Type: TypeObject, XPreserveUnknownFields: true,
		Description: "The desired state. The kind declares no schema for it: any fields."}
	status := &Schema{Type: TypeObject, XPreserveUnknownFields: true,
		Description: "The observed state, written by the controller. The kind declares no schema for it: any fields."}
	if k != nil && k.Spec != nil {
		spec = k.Spec
	}
	if k != nil && k.Status != nil {
		status = k.Status
	}
	return &Schema{
		Type:        TypeObject,
		Description: fmt.Sprintf("A %s, stored at /registry/<resource>/<namespace>/<name>.", kind),
		Required:    []string{"kind", "metadata", "spec"},
		Properties: map[string]*Schema{
			"apiVersion": {Type: TypeString, Description: "Accepted for manifests written for Kubernetes; Baton's kinds have no versions."},
			"kind":       {Type: TypeString, Enum: []any{kind}, Description: fmt.Sprintf("The kind of the object: %s. A writer fills it in when empty.", kind)},
			"metadata":   Metadata(),
			"spec":       spec,
			"status":     status,
		},
	}
}

// Admit fills in obj's defaults and checks it (Default, then Validate).
// obj is a whole object as encoding/json decodes it (UseNumber or not).
// The error is nil or an *Errors holding every problem found.
func (v *Validator) Admit(obj map[string]any) error {
	v.Default(obj)
	return v.Validate(obj)
}

// Default fills in obj's defaults in place, as the API server does before
// it validates: an empty kind becomes v's, the null of a field that is not
// nullable is dropped, and an absent field with a default takes it. It
// reports whether it changed anything.
func (v *Validator) Default(obj map[string]any) bool {
	changed := false
	if k, _ := obj["kind"].(string); k == "" {
		obj["kind"] = v.kind
		changed = true
	}
	var val any = obj
	return applyDefaults(v.root, &val) || changed
}

// Validate checks obj: nil, or an *Errors holding every problem found.
func (v *Validator) Validate(obj map[string]any) error {
	w := &walker{errs: &Errors{Kind: v.kind, Name: nameOf(obj)}}
	w.check(v.root, obj, nil)
	return w.result()
}

// AdmitStatus fills in the defaults of *status, the value a status write
// puts into the object named name, and checks it, as Admit does a whole
// object's. It reports whether the defaults changed *status.
func (v *Validator) AdmitStatus(name string, status *any) (changed bool, err error) {
	if *status == nil {
		return false, nil // no status: nothing to check
	}
	n := v.root.props["status"]
	changed = applyDefaults(n, status)
	w := &walker{errs: &Errors{Kind: v.kind, Name: name}}
	w.check(n, *status, Path{"status"})
	return changed, w.result()
}

func nameOf(obj map[string]any) string {
	md, _ := obj["metadata"].(map[string]any)
	name, _ := md["name"].(string)
	return name
}

// applyDefaults drops the nulls of fields that are not nullable and fills
// in the defaults of absent fields, in every object of *v that n
// describes, defaults' own fields included. It reports whether it changed
// anything.
func applyDefaults(n *node, v *any) bool {
	changed := false
	switch t := (*v).(type) {
	case map[string]any:
		for name, p := range n.props {
			val, ok := t[name]
			if ok && val == nil && !p.s.Nullable {
				delete(t, name)
				ok, changed = false, true
			}
			if !ok && p.hasDef {
				t[name] = deepCopy(p.def)
				changed = true
			}
		}
		for k, val := range t {
			child := n.props[k]
			if child == nil {
				child = n.additional
			}
			if child == nil {
				continue
			}
			if val == nil && !child.s.Nullable {
				delete(t, k) // a map's null value: absent too
				changed = true
				continue
			}
			if applyDefaults(child, &val) {
				t[k] = val
				changed = true
			}
		}
	case []any:
		if n.items != nil {
			for i := range t {
				changed = applyDefaults(n.items, &t[i]) || changed
			}
		}
	}
	return changed
}

// validateOne checks v against n alone, for compiling a schema's own enum
// values and default; skipEnum leaves out the enum (an enum value is
// checked against the rest of its node).
func validateOne(n *node, v any, path string, skipEnum bool) *Errors {
	w := &walker{errs: &Errors{}, skipEnum: skipEnum}
	w.check(n, v, Path{path})
	if w.errs.List == nil {
		return nil
	}
	return w.errs
}

// walker collects the errors of one value.
type walker struct {
	errs     *Errors
	skipEnum bool
}

func (w *walker) result() error {
	if len(w.errs.List) == 0 {
		return nil
	}
	return w.errs
}

func (w *walker) add(path Path, typ ErrorType, value any, detail string) {
	if len(w.errs.List) >= MaxErrors {
		w.errs.Omitted++
		return
	}
	w.errs.List = append(w.errs.List, &FieldError{Path: path.clone(), Type: typ, Value: value, Detail: detail})
}

func (w *walker) typeErr(path Path, v any, want string) {
	w.add(path, ErrorInvalid, v, "must be of type "+want)
}

func (w *walker) check(n *node, v any, path Path) {
	s := n.s
	if v == nil {
		if !s.Nullable {
			want := s.Type
			if s.XIntOrString {
				want = "integer or string"
			}
			if want == "" {
				return // any value
			}
			w.typeErr(path, v, want)
		}
		return
	}
	switch {
	case s.XIntOrString:
		if str, ok := v.(string); ok {
			w.checkString(n, str, path)
		} else {
			f, isInt, ok := number(v)
			if !ok || !isInt {
				w.typeErr(path, v, "integer or string")
				return
			}
			w.checkNumber(n, v, f, path)
		}
	case s.Type == TypeObject:
		m, ok := v.(map[string]any)
		if !ok {
			w.typeErr(path, v, TypeObject)
			return
		}
		w.checkObject(n, m, path)
	case s.Type == TypeArray:
		a, ok := v.([]any)
		if !ok {
			w.typeErr(path, v, TypeArray)
			return
		}
		if s.MinItems != nil && int64(len(a)) < *s.MinItems {
			w.add(path, ErrorInvalid, v, fmt.Sprintf("must have at least %d items", *s.MinItems))
		}
		if s.MaxItems != nil && int64(len(a)) > *s.MaxItems {
			w.add(path, ErrorTooMany, len(a), fmt.Sprintf("must have at most %d items", *s.MaxItems))
		}
		for i, e := range a {
			w.check(n.items, e, append(path, i))
		}
	case s.Type == TypeString:
		str, ok := v.(string)
		if !ok {
			w.typeErr(path, v, TypeString)
			return
		}
		w.checkString(n, str, path)
	case s.Type == TypeInteger, s.Type == TypeNumber:
		f, isInt, ok := number(v)
		if !ok || s.Type == TypeInteger && !isInt {
			w.typeErr(path, v, s.Type)
			return
		}
		w.checkNumber(n, v, f, path)
	case s.Type == TypeBoolean:
		if _, ok := v.(bool); !ok {
			w.typeErr(path, v, TypeBoolean)
			return
		}
	}
	if n.enum != nil && !w.skipEnum && !n.enum[canonical(v)] {
		vals := make([]string, len(s.Enum))
		for i, e := range s.Enum {
			ne, _ := normalize(e)
			vals[i] = render(ne)
		}
		w.add(path, ErrorUnsupported, v, "supported values: "+strings.Join(vals, ", "))
	}
}

func (w *walker) checkObject(n *node, m map[string]any, path Path) {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if child, ok := n.props[k]; ok {
			w.check(child, m[k], append(path, k))
			continue
		}
		if n.additional != nil {
			w.check(n.additional, m[k], append(path, MapKey(k)))
			continue
		}
		if n.open() {
			continue
		}
		w.add(append(path, k), ErrorUnknown, nil, w.unknownDetail(n))
	}
	for _, r := range n.s.Required {
		if m[r] == nil {
			w.add(append(path, r), ErrorRequired, nil, "")
		}
	}
}

// maxKnownListed bounds the field names an unknown field's error lists.
const maxKnownListed = 20

func (w *walker) unknownDetail(n *node) string {
	known := make([]string, 0, len(n.props))
	for k := range n.props {
		known = append(known, k)
	}
	sort.Strings(known)
	list := "none"
	if len(known) > maxKnownListed {
		list = strings.Join(known[:maxKnownListed], ", ") + ", …"
	} else if len(known) > 0 {
		list = strings.Join(known, ", ")
	}
	of := "the schema"
	if w.errs.Kind != "" {
		of = "the schema of " + w.errs.Kind
	}
	return fmt.Sprintf("not in %s (known: %s)", of, list)
}

func (w *walker) checkString(n *node, str string, path Path) {
	s := n.s
	if s.MinLength != nil || s.MaxLength != nil {
		l := int64(utf8.RuneCountInString(str))
		if s.MinLength != nil && l < *s.MinLength {
			w.add(path, ErrorInvalid, str, fmt.Sprintf("must be at least %d characters long", *s.MinLength))
		}
		if s.MaxLength != nil && l > *s.MaxLength {
			w.add(path, ErrorTooLong, nil, fmt.Sprintf("may not be longer than %d characters", *s.MaxLength))
		}
	}
	if n.pattern != nil && !n.pattern.MatchString(str) {
		w.add(path, ErrorInvalid, str, fmt.Sprintf("must match the pattern '%s'", s.Pattern))
	}
	switch s.Format {
	case "date-time":
		if _, err := time.Parse(time.RFC3339Nano, str); err != nil {
			w.add(path, ErrorInvalid, str, "must be a date-time in RFC 3339, such as 2026-01-02T15:04:05Z")
		}
	case "date":
		if _, err := time.Parse(time.DateOnly, str); err != nil {
			w.add(path, ErrorInvalid, str, "must be a date, such as 2026-01-02")
		}
	}
}

func (w *walker) checkNumber(n *node, v any, f float64, path Path) {
	s := n.s
	if s.Minimum != nil {
		if s.ExclusiveMinimum && f <= *s.Minimum {
			w.add(path, ErrorInvalid, v, "must be greater than "+formatFloat(*s.Minimum))
		} else if f < *s.Minimum {
			w.add(path, ErrorInvalid, v, "must be greater than or equal to "+formatFloat(*s.Minimum))
		}
	}
	if s.Maximum != nil {
		if s.ExclusiveMaximum && f >= *s.Maximum {
			w.add(path, ErrorInvalid, v, "must be less than "+formatFloat(*s.Maximum))
		} else if f > *s.Maximum {
			w.add(path, ErrorInvalid, v, "must be less than or equal to "+formatFloat(*s.Maximum))
		}
	}
}

func formatFloat(f float64) string { return strconv.FormatFloat(f, 'g', -1, 64) }

// number reads v as a number: its value, and whether it is an integer (a
// JSON number written without a fraction or an exponent, which every
// decoder takes into an integer type).
func number(v any) (f float64, isInt, ok bool) {
	switch t := v.(type) {
	case json.Number:
		s := string(t)
		f, err := strconv.ParseFloat(s, 64)
		if err != nil && !errors.Is(err, strconv.ErrRange) {
			return 0, false, false
		}
		return f, !strings.ContainsAny(s, ".eE"), true
	case float64:
		return t, t == math.Trunc(t) && !math.IsInf(t, 0), true
	case float32:
		return number(float64(t))
	case int:
		return float64(t), true, true
	case int64:
		return float64(t), true, true
	case int32:
		return float64(t), true, true
	}
	return 0, false, false
}

// decodeJSON decodes b keeping numbers exact.
func decodeJSON(b []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	return v, nil
}

// canonical is a value's JSON with every number in one form, so that 3,
// 3.0 and 3e0 compare equal.
func canonical(v any) string {
	b, _ := json.Marshal(numbersAsFloats(v))
	return string(b)
}

func numbersAsFloats(v any) any {
	switch t := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, e := range t {
			out[k] = numbersAsFloats(e)
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, e := range t {
			out[i] = numbersAsFloats(e)
		}
		return out
	}
	if f, _, ok := number(v); ok {
		return f
	}
	return v
}

// maxRendered bounds a value quoted in an error, in characters.
const maxRendered = 64

// render is a value as an error quotes it: compact JSON, cut short.
func render(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	s := string(b)
	if utf8.RuneCountInString(s) > maxRendered {
		r := []rune(s)
		s = string(r[:maxRendered]) + "…"
	}
	return s
}
