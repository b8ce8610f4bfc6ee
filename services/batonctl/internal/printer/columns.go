package printer

import (
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	"github.com/batonrun/baton/client/schema"
)

// Declared returns the headers and the row function of a kind whose
// declaration gives printer columns, as kubectl prints a custom
// resource's additionalPrinterColumns: NAME, the columns of priority 0
// (with wide, every column), then AGE. A value that is not in the object
// prints as <none>; a date column shows an age.
func Declared(cols []schema.Column, wide bool, now time.Time) ([]string, func(obj map[string]any) []string) {
	var shown []schema.Column
	for _, c := range cols {
		if c.Priority == 0 || wide {
			shown = append(shown, c)
		}
	}
	headers := []string{"NAME"}
	for _, c := range shown {
		headers = append(headers, c.Header())
	}
	headers = append(headers, "AGE")
	_, base := Columns("", now) // NAME and AGE, as every table has them
	return headers, func(o map[string]any) []string {
		nameAge := base(o)
		row := []string{nameAge[0]}
		for _, c := range shown {
			row = append(row, cell(c, o, now))
		}
		return append(row, nameAge[1])
	}
}

// cell renders the value of column c in o.
func cell(c schema.Column, o map[string]any, now time.Time) string {
	v, ok := c.Lookup(o)
	if !ok {
		return "<none>"
	}
	switch t := v.(type) {
	case string:
		if c.Type == "date" {
			return Age(t, now)
		}
		return t
	case json.Number:
		return t.String()
	case float64:
		return strconv.FormatFloat(t, 'f', -1, 64)
	case bool:
		return strconv.FormatBool(t)
	}
	// An object or a list, where the column expected a scalar: its JSON,
	// so that it shows what is there.
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}
