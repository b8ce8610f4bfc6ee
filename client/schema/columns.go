package schema

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
	"unicode"
)

// Column is one printer column of a kind, as a CustomResourceDefinition's
// additionalPrinterColumns: batonctl get prints NAME, the columns of
// priority 0, and AGE; with -o wide, the columns of higher priority too.
type Column struct {
	// Name is the column's header (printed upper-case), unique in its
	// kind; NAME and AGE are always printed and cannot be declared.
	Name string `json:"name"`
	// Type is one of ColumnTypes: how the value is shown. A date is an
	// RFC 3339 time shown as an age ("5m").
	Type string `json:"type"`
	// JSONPath is where the value is in the object: a path of field names
	// and array indices from the object's root, such as .spec.replicas or
	// .status.conditions[0].type. A value not there prints as <none>.
	JSONPath string `json:"jsonPath"`
	// Description says what the column shows.
	Description string `json:"description,omitempty"`
	// Priority 0 is shown always; higher only with -o wide.
	Priority int32 `json:"priority,omitempty"`
}

// ColumnTypes are the types of a printer column.
var ColumnTypes = []string{"string", "integer", "number", "boolean", "date"}

// maxColumnName bounds a column's name, in characters.
const maxColumnName = 63

// CheckColumns names the first problem of a kind's printer columns.
func CheckColumns(cols []Column) error {
	if len(cols) > MaxColumns {
		return fmt.Errorf("printer columns: %d, at most %d", len(cols), MaxColumns)
	}
	seen := map[string]bool{}
	for i, c := range cols {
		at := fmt.Sprintf("printer column %d (%q)", i, c.Name)
		upper := strings.ToUpper(c.Name)
		switch {
		case c.Name == "" || len([]rune(c.Name)) > maxColumnName || strings.ContainsFunc(c.Name, func(r rune) bool { return !unicode.IsPrint(r) || unicode.IsSpace(r) && r != ' ' }):
			return fmt.Errorf("%s: a name is 1 to %d printable characters", at, maxColumnName)
		case upper == "NAME" || upper == "AGE" || upper == "NAMESPACE":
			return fmt.Errorf("%s: NAME, NAMESPACE and AGE are printed always; declare another column", at)
		case seen[upper]:
			return fmt.Errorf("%s: named twice", at)
		case !slices.Contains(ColumnTypes, c.Type):
			return fmt.Errorf("%s: type %q is not one of %s", at, c.Type, strings.Join(ColumnTypes, ", "))
		case c.Priority < 0:
			return fmt.Errorf("%s: priority %d is negative", at, c.Priority)
		}
		seen[upper] = true
		if _, err := ParsePath(c.JSONPath); err != nil {
			return fmt.Errorf("%s: %w", at, err)
		}
	}
	return nil
}

// Header is the column's header: its name, upper-case, as kubectl prints
// it.
func (c Column) Header() string { return strings.ToUpper(c.Name) }

// Lookup returns the value at the column's path in obj; ok is false when
// there is none (or the path does not parse).
func (c Column) Lookup(obj map[string]any) (v any, ok bool) {
	p, err := ParsePath(c.JSONPath)
	if err != nil {
		return nil, false
	}
	return p.Lookup(obj)
}

// ParsePath reads a column's JSONPath: .field, .field.sub, .list[2].field.
func ParsePath(s string) (Path, error) {
	bad := func(why string) (Path, error) {
		return nil, fmt.Errorf("jsonPath %q: %s (write a path such as .spec.replicas or .status.conditions[0].type)", s, why)
	}
	if !strings.HasPrefix(s, ".") {
		return bad("must begin with '.'")
	}
	var p Path
	rest := s
	for rest != "" {
		switch rest[0] {
		case '.':
			rest = rest[1:]
			end := strings.IndexAny(rest, ".[")
			if end < 0 {
				end = len(rest)
			}
			name := rest[:end]
			if name == "" {
				return bad("an empty field name")
			}
			if strings.ContainsAny(name, "]{}*@$?()'\" ") {
				return bad(fmt.Sprintf("field name %q: only names and indices are supported", name))
			}
			p = append(p, name)
			rest = rest[end:]
		case '[':
			end := strings.IndexByte(rest, ']')
			if end < 0 {
				return bad("an unclosed '['")
			}
			i, err := strconv.Atoi(rest[1:end])
			if err != nil || i < 0 {
				return bad(fmt.Sprintf("index %q is not a non-negative integer", rest[1:end]))
			}
			p = append(p, i)
			rest = rest[end+1:]
		default:
			return bad(fmt.Sprintf("unexpected %q", rest[0]))
		}
	}
	return p, nil
}

// Lookup returns the value at p in v; ok is false when there is none.
func (p Path) Lookup(v any) (any, bool) {
	cur := v
	for _, e := range p {
		switch t := e.(type) {
		case string:
			m, ok := cur.(map[string]any)
			if !ok {
				return nil, false
			}
			if cur, ok = m[t]; !ok {
				return nil, false
			}
		case MapKey:
			m, ok := cur.(map[string]any)
			if !ok {
				return nil, false
			}
			if cur, ok = m[string(t)]; !ok {
				return nil, false
			}
		case int:
			a, ok := cur.([]any)
			if !ok || t >= len(a) {
				return nil, false
			}
			cur = a[t]
		default:
			return nil, false
		}
	}
	return cur, cur != nil
}
