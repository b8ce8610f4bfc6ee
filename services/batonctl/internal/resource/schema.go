package resource

import (
	"fmt"

	"github.com/batonrun/baton/client/kinds"
	"github.com/batonrun/baton/client/schema"
)

// Validator returns the validator of typ's objects, which every write of
// batonctl runs before it writes (defaults filled in, then every field
// checked): a reference kind's built-in schema, or the schema its
// controller's declaration carries. A kind with no schema (declared
// without one, or only owned by a declared controller) gets one that
// checks the object's kind and metadata and takes any spec.
func (t *Table) Validator(typ Type) (*schema.Validator, error) {
	if v, ok := kinds.BuiltinValidator(typ.Resource); ok {
		return v, nil
	}
	if v, ok := t.validators[typ.Resource]; ok {
		return v, nil
	}
	var (
		v   *schema.Validator
		err error
	)
	if d, ok := t.set.Declaration(typ.Resource); ok {
		v, err = d.Validator()
	} else {
		v, err = schema.Compile(typ.Kind, nil)
	}
	if err != nil {
		// kinds.Parse checked the declaration's schema already: this is
		// a declaration a newer worker wrote that this batonctl cannot
		// read.
		return nil, fmt.Errorf("the schema of %s: %w", typ.Kind, err)
	}
	if t.validators == nil {
		t.validators = map[string]*schema.Validator{}
	}
	t.validators[typ.Resource] = v
	return v, nil
}

// PrinterColumns returns the columns the declaration of typ's controller
// gives batonctl get, or nil when it gives none (a reference kind's table
// is printer's).
func (t *Table) PrinterColumns(typ Type) []schema.Column {
	d, ok := t.set.Declaration(typ.Resource)
	if !ok {
		return nil
	}
	return d.PrinterColumns
}
