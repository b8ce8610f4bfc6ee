package schema

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrInvalid is returned (wrapped, as an *Errors) when an object does not
// satisfy its kind's schema.
var ErrInvalid = errors.New("schema: invalid object")

// ErrorType is the kind of a field error, in the API server's words.
type ErrorType string

// The kinds of field error.
const (
	// ErrorRequired: a required field is absent (or null).
	ErrorRequired ErrorType = "Required value"
	// ErrorInvalid: a value of the wrong type, out of bounds, too short,
	// not matching its pattern or format.
	ErrorInvalid ErrorType = "Invalid value"
	// ErrorUnsupported: a value not among its enum's.
	ErrorUnsupported ErrorType = "Unsupported value"
	// ErrorTooLong: a string longer than its maxLength.
	ErrorTooLong ErrorType = "Too long"
	// ErrorTooMany: an array longer than its maxItems.
	ErrorTooMany ErrorType = "Too many"
	// ErrorUnknown: a field the schema does not declare, where it keeps
	// no unknown fields.
	ErrorUnknown ErrorType = "Unknown field"
)

// Path is where a field is in an object: field names (string), map keys
// (MapKey) and array indices (int), from the object's root.
type Path []any

// MapKey is a key of a map (an object with additionalProperties), shown
// in brackets as the API server shows it: metadata.labels[app].
type MapKey string

// String is the path as errors show it: spec.template.spec.image,
// spec.ports[0].name, metadata.labels[app].
func (p Path) String() string {
	var b strings.Builder
	for _, e := range p {
		switch t := e.(type) {
		case string:
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(t)
		case MapKey:
			b.WriteString("[" + string(t) + "]")
		case int:
			b.WriteString("[" + strconv.Itoa(t) + "]")
		}
	}
	return b.String()
}

func (p Path) clone() Path { return append(Path(nil), p...) }

// FieldError is one problem of one field.
type FieldError struct {
	Path Path
	Type ErrorType
	// Value is the offending value (for Invalid, Unsupported and Too
	// many), as JSON decodes it.
	Value any
	// Detail says what the value must be.
	Detail string
}

// Error is the API server's form: spec.replicas: Invalid value: "three":
// must be of type integer.
func (e *FieldError) Error() string { return e.Path.String() + ": " + e.Body() }

// Body is the error without its path.
func (e *FieldError) Body() string {
	s := string(e.Type)
	switch e.Type {
	case ErrorInvalid, ErrorUnsupported, ErrorTooMany:
		s += ": " + render(e.Value)
	}
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

func (e *FieldError) body() string { return e.Body() }

// Errors are the problems of one object, in field order; Omitted counts
// those beyond MaxErrors.
type Errors struct {
	// Kind and Name name the object.
	Kind, Name string
	List       []*FieldError
	Omitted    int
}

// Error is the API server's form: Foo "x" is invalid: <the error>, or
// with several, [<one>, <two>].
func (e *Errors) Error() string {
	parts := make([]string, len(e.List))
	for i, fe := range e.List {
		parts[i] = fe.Error()
	}
	if e.Omitted > 0 {
		parts = append(parts, fmt.Sprintf("and %d more", e.Omitted))
	}
	msg := strings.Join(parts, ", ")
	if len(parts) > 1 {
		msg = "[" + msg + "]"
	}
	if e.Kind == "" {
		return msg
	}
	return fmt.Sprintf("%s %q is invalid: %s", e.Kind, e.Name, msg)
}

// Is makes errors.Is(err, ErrInvalid) hold.
func (e *Errors) Is(target error) bool { return target == ErrInvalid }
