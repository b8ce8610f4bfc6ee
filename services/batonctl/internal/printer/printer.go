// Package printer renders objects and queue state for people: kubectl-style
// tables (upper-case headers, columns separated by spaces, AGE as "5m"),
// and JSON or YAML for programs. Objects are handled as generic JSON maps so
// batonctl shows fields it does not know about instead of dropping them.
//
// Text others wrote is shown, never obeyed: Escape (escape.go) writes the
// control and format characters a terminal would act on as escapes
// (\x1b, \u202e). Table and Stream escape every cell themselves; whatever
// else batonctl prints for people passes through Escape or EscapeText;
// JSON and YAML hold the exact values, with the same characters escaped in
// their own syntax.
package printer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"gopkg.in/yaml.v3"
)

// Table writes rows under headers, aligned.
type Table struct {
	w    *tabwriter.Writer
	cols int
}

// NewTable starts a table on w with the given headers.
func NewTable(w io.Writer, headers ...string) *Table {
	t := &Table{w: tabwriter.NewWriter(w, 0, 8, 3, ' ', 0), cols: len(headers)}
	t.Row(headers...)
	return t
}

// Row adds a row; missing cells print as empty. Each cell is escaped
// (Escape): a tab or a line break in one would split it, and a control
// character would act on the terminal.
func (t *Table) Row(cells ...string) {
	out := make([]string, max(len(cells), t.cols))
	for i, c := range cells {
		out[i] = Escape(c)
	}
	fmt.Fprintln(t.w, strings.Join(out, "\t"))
}

// Flush writes the table out.
func (t *Table) Flush() error { return t.w.Flush() }

// Columns returns the headers of kind's table and a function that renders
// one object as a row. now is the reference for AGE.
func Columns(kind string, now time.Time) ([]string, func(obj map[string]any) []string) {
	name := func(o map[string]any) string { return Str(o, "metadata", "name") }
	age := func(o map[string]any) string {
		ts := Str(o, "metadata", "creationTimestamp")
		if ts == "" {
			ts = Str(o, "status", "startTime") // pods made by a controller
		}
		return Age(ts, now)
	}
	switch kind {
	case "Deployment":
		return []string{"NAME", "READY", "UP-TO-DATE", "AVAILABLE", "AGE"}, func(o map[string]any) []string {
			return []string{name(o),
				fmt.Sprintf("%d/%d", Int(o, "status", "readyReplicas"), Replicas(o)),
				fmt.Sprint(Int(o, "status", "updatedReplicas")),
				fmt.Sprint(Int(o, "status", "readyReplicas")), age(o)}
		}
	case "ReplicaSet":
		return []string{"NAME", "DESIRED", "CURRENT", "READY", "AGE"}, func(o map[string]any) []string {
			return []string{name(o), fmt.Sprint(Replicas(o)), fmt.Sprint(Int(o, "status", "replicas")),
				fmt.Sprint(Int(o, "status", "readyReplicas")), age(o)}
		}
	case "StatefulSet":
		return []string{"NAME", "READY", "AGE"}, func(o map[string]any) []string {
			return []string{name(o), fmt.Sprintf("%d/%d", Int(o, "status", "readyReplicas"), Replicas(o)), age(o)}
		}
	case "Job":
		return []string{"NAME", "STATUS", "COMPLETIONS", "ACTIVE", "FAILED", "AGE"}, func(o map[string]any) []string {
			completions := int64(1)
			if has(o, "spec", "completions") {
				completions = Int(o, "spec", "completions")
			}
			return []string{name(o), JobStatus(o),
				fmt.Sprintf("%d/%d", Int(o, "status", "succeeded"), completions),
				fmt.Sprint(Int(o, "status", "active")), fmt.Sprint(Int(o, "status", "failed")), age(o)}
		}
	case "Pod":
		return []string{"NAME", "STATUS", "IMAGE", "OWNER", "AGE"}, func(o map[string]any) []string {
			phase := Str(o, "status", "phase")
			if phase == "" {
				phase = "Pending"
			}
			return []string{name(o), phase, orDash(Str(o, "spec", "image")), orDash(Owner(o)), age(o)}
		}
	case "Event":
		// kubectl's, which has no NAME: an event's name is a hash.
		return []string{"LAST SEEN", "TYPE", "REASON", "OBJECT", "MESSAGE"}, func(o map[string]any) []string {
			return []string{EventAge(o, now), Str(o, "type"), Str(o, "reason"), InvolvedObject(o), OneLine(Str(o, "message"))}
		}
	}
	return []string{"NAME", "AGE"}, func(o map[string]any) []string { return []string{name(o), age(o)} }
}

// EventAge is how long ago an Event was last recorded, and for a repeated
// one how often since when, as kubectl shows it: "2m", "2m (x5 over 10m)".
func EventAge(o map[string]any, now time.Time) string {
	last := Str(o, "lastTimestamp")
	if last == "" {
		last = Str(o, "metadata", "creationTimestamp")
	}
	age := Age(last, now)
	if n := Int(o, "count"); n > 1 {
		age += fmt.Sprintf(" (x%d over %s)", n, Age(Str(o, "firstTimestamp"), now))
	}
	return age
}

// InvolvedObject is the object an Event is about, as kubectl names it:
// "replicaset/web".
func InvolvedObject(o map[string]any) string {
	kind, name := Str(o, "involvedObject", "kind"), Str(o, "involvedObject", "name")
	if kind == "" && name == "" {
		return "-"
	}
	return strings.ToLower(kind) + "/" + name
}

// OneLine puts s on one line of a table: its line breaks and tabs become
// spaces.
func OneLine(s string) string {
	return strings.Map(func(r rune) rune {
		if r == '\n' || r == '\r' || r == '\t' {
			return ' '
		}
		return r
	}, s)
}

// Replicas is spec.replicas, 1 when unset (Kubernetes' default).
func Replicas(o map[string]any) int64 {
	if !has(o, "spec", "replicas") {
		return 1
	}
	return Int(o, "spec", "replicas")
}

// JobStatus is "Complete", "Failed" (from status.conditions) or "Running".
func JobStatus(o map[string]any) string {
	conds, _ := get(o, "status", "conditions").([]any)
	for _, c := range conds {
		cm, _ := c.(map[string]any)
		if cm != nil && fmt.Sprint(cm["status"]) == "True" {
			if t := fmt.Sprint(cm["type"]); t == "Complete" || t == "Failed" {
				return t
			}
		}
	}
	return "Running"
}

// Owner is "kind/name" of the object's first owner reference, or "".
func Owner(o map[string]any) string {
	refs, _ := get(o, "metadata", "ownerReferences").([]any)
	if len(refs) == 0 {
		return ""
	}
	r, _ := refs[0].(map[string]any)
	if r == nil {
		return ""
	}
	return strings.ToLower(fmt.Sprint(r["kind"])) + "/" + fmt.Sprint(r["name"])
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// Age renders an RFC 3339 creation time as kubectl does ("45s", "3m", "2h",
// "4d"); "-" when unknown.
func Age(ts string, now time.Time) string {
	t, err := time.Parse(time.RFC3339Nano, ts)
	if err != nil {
		return "-"
	}
	return Duration(now.Sub(t))
}

// Duration renders d briefly: "850ms", "45s", "3m10s", "2h5m", "4d".
func Duration(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < time.Second:
		return fmt.Sprintf("%dms", d.Milliseconds())
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < 10*time.Minute:
		return fmt.Sprintf("%dm%ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 24*time.Hour:
		return fmt.Sprintf("%dh%dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

func get(o map[string]any, path ...string) any {
	var cur any = o
	for _, p := range path {
		m, ok := cur.(map[string]any)
		if !ok {
			return nil
		}
		cur = m[p]
	}
	return cur
}

func has(o map[string]any, path ...string) bool { return get(o, path...) != nil }

// Str returns the string at path, or "".
func Str(o map[string]any, path ...string) string {
	s, _ := get(o, path...).(string)
	return s
}

// Int returns the integer at path, or 0.
func Int(o map[string]any, path ...string) int64 {
	switch v := get(o, path...).(type) {
	case json.Number:
		i, err := v.Int64()
		if err != nil {
			f, _ := v.Float64()
			return int64(f)
		}
		return i
	case float64:
		return int64(v)
	case int64:
		return v
	case int:
		return int64(v)
	}
	return 0
}

// JSON writes v indented. Its strings hold the exact values, with every
// character Escape escapes written as a \u escape (escapeJSON).
func JSON(w io.Writer, v any) error {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return err
	}
	_, err := w.Write(escapeJSON(b.Bytes()))
	return err
}

// JSONBytes returns encoded JSON (another encoder's, such as protojson's)
// as JSON writes it: every character Escape escapes written as a \u
// escape, the values unchanged.
func JSONBytes(b []byte) []byte { return escapeJSON(b) }

// YAML writes v as YAML. Numbers (json.Number) are written as numbers, not
// strings. Its strings hold the exact values, with every character Escape
// escapes written as an escape of a double-quoted scalar (\e, \x9B,
// \u202e).
func YAML(w io.Writer, v any) error {
	var n yaml.Node
	if err := n.Encode(yamlable(v)); err != nil {
		return err
	}
	quoteForYAML(&n)
	var b bytes.Buffer
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(&n); err != nil {
		return err
	}
	if err := enc.Close(); err != nil {
		return err
	}
	_, err := w.Write(escapeYAML(b.Bytes()))
	return err
}

// yamlable turns json.Number into int64 or float64, which yaml.v3 prints
// as plain numbers.
func yamlable(v any) any {
	switch t := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(t))
		for k, e := range t {
			out[k] = yamlable(e)
		}
		return out
	case []any:
		out := make([]any, len(t))
		for i, e := range t {
			out[i] = yamlable(e)
		}
		return out
	case []map[string]any:
		out := make([]any, len(t))
		for i, e := range t {
			out[i] = yamlable(e)
		}
		return out
	case json.Number:
		if i, err := t.Int64(); err == nil {
			return i
		}
		f, _ := t.Float64()
		return f
	}
	return v
}

// Stream prints a table a row at a time, for output that grows while it is
// read (get -w): each cell is padded to the widest cell seen so far in its
// column, so rows line up with those above them until a wider one comes.
// Columns are three spaces apart, as Table's.
type Stream struct {
	w       io.Writer
	headers []string
	widths  []int
	headed  bool
}

// NewStream returns a stream of rows under headers; nothing is printed
// until Header or Row.
func NewStream(w io.Writer, headers ...string) *Stream {
	s := &Stream{w: w, headers: headers, widths: make([]int, len(headers))}
	s.Fit(headers...)
	return s
}

// Fit widens the columns to hold cells, printing nothing: called with the
// rows known at the start, it aligns them all. A cell's width is that of
// its escaped text, which Row prints.
func (s *Stream) Fit(cells ...string) {
	for i, c := range cells {
		if i < len(s.widths) {
			s.widths[i] = max(s.widths[i], utf8.RuneCountInString(Escape(c)))
		}
	}
}

// Headed reports whether the header has been printed.
func (s *Stream) Headed() bool { return s.headed }

// Header prints the header, once.
func (s *Stream) Header() error {
	if s.headed {
		return nil
	}
	s.headed = true
	return s.line(s.headers)
}

// Row prints one row, after the header if it has not been printed. Each
// cell is escaped, as Table's are.
func (s *Stream) Row(cells ...string) error {
	if err := s.Header(); err != nil {
		return err
	}
	s.Fit(cells...)
	return s.line(cells)
}

func (s *Stream) line(cells []string) error {
	var b strings.Builder
	for i := range s.widths {
		c := ""
		if i < len(cells) {
			c = Escape(cells[i])
		}
		b.WriteString(c)
		if i < len(s.widths)-1 {
			b.WriteString(strings.Repeat(" ", s.widths[i]-utf8.RuneCountInString(c)+3))
		}
	}
	b.WriteString("\n")
	_, err := io.WriteString(s.w, b.String())
	return err
}
