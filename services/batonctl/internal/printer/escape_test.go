package printer

import (
	"bytes"
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"gopkg.in/yaml.v3"
)

// actsOn reports whether a terminal may act on r rather than show it,
// written apart from escapes so that each checks the other: C0, DEL, C1,
// format characters, line and paragraph separators.
func actsOn(r rune) bool {
	return r < 0x20 || r >= 0x7f && r <= 0x9f || unicode.Is(unicode.Cf, r) || r == 0x2028 || r == 0x2029
}

// raw returns the first character of s a terminal acts on, other than
// those allowed, and whether there is one; a byte that is not UTF-8 is
// returned as utf8.RuneError.
func raw(s string, allowed ...rune) (rune, bool) {
	for i, r := range s {
		if r == utf8.RuneError && !strings.HasPrefix(s[i:], "\uFFFD") {
			return r, true
		}
		if actsOn(r) && !strings.ContainsRune(string(allowed), r) {
			return r, true
		}
	}
	return 0, false
}

func TestEscape(t *testing.T) {
	for _, tc := range []struct{ in, want, text string }{
		{"nginx:1.27", "nginx:1.27", ""},
		{"trabajador-ñ 日本 é", "trabajador-ñ 日本 é", ""},
		{"x\x1b[2J", `x\x1b[2J`, ""},
		{"\x1b]0;pwned\a", `\x1b]0;pwned\a`, ""},
		{"\r\x1b[Kok", `\r\x1b[Kok`, ""},
		{"nul\x00", `nul\x00`, ""},
		{"del\x7f", `del\x7f`, ""},
		{"csi\u009b31m", `csi\u009b31m`, ""},
		{"nel\u0085", `nel\u0085`, ""},
		{"abc\u202edef", `abc\u202edef`, ""},
		{"\u2066isolate\u2069", `\u2066isolate\u2069`, ""},
		{"zero\u200bwidth\u200d", `zero\u200bwidth\u200d`, ""},
		{"bom\ufeff", `bom\ufeff`, ""},
		{"soft\u00adhyphen", `soft\u00adhyphen`, ""},
		{"tag\U000e0001", `tag\U000e0001`, ""},
		{"ls\u2028ps\u2029", `ls\u2028ps\u2029`, ""},
		{"bad\xff\xc3", `bad\xff\xc3`, ""},
		{"a real \ufffd", "a real \ufffd", ""},
		{`back\slash "quoted" \x1b`, `back\slash "quoted" \x1b`, ""},
		// Line breaks and tabs: escaped on one line, kept in text.
		{"one\ntwo\tthree\r\n", `one\ntwo\tthree\r\n`, "one\ntwo\tthree\\r\n"},
		{"line\n\x1b[2Jnext", `line\n\x1b[2Jnext`, "line\n\\x1b[2Jnext"},
	} {
		if got := Escape(tc.in); got != tc.want {
			t.Errorf("Escape(%q) = %q, want %q", tc.in, got, tc.want)
		}
		wantText := tc.text
		if wantText == "" {
			wantText = tc.want
		}
		if got := EscapeText(tc.in); got != wantText {
			t.Errorf("EscapeText(%q) = %q, want %q", tc.in, got, wantText)
		}
		if got := Escape(Escape(tc.in)); got != Escape(tc.in) {
			t.Errorf("Escape(Escape(%q)) = %q: escaping twice changes it", tc.in, got)
		}
	}
}

// TestEscapeEveryRune: no character a terminal acts on is left as it is,
// and every other one is, across all of Unicode.
func TestEscapeEveryRune(t *testing.T) {
	for r := rune(0); r <= unicode.MaxRune; r++ {
		if r >= 0xd800 && r <= 0xdfff {
			continue // surrogates: not in UTF-8
		}
		s := string(r)
		got := Escape(s)
		if c, ok := raw(got); ok {
			t.Fatalf("Escape(%U) = %q: %U left as it is", r, got, c)
		}
		if !actsOn(r) && got != s {
			t.Fatalf("Escape(%U) = %q: a character a terminal shows is changed", r, got)
		}
		text := EscapeText(s)
		if c, ok := raw(text, '\n', '\t'); ok {
			t.Fatalf("EscapeText(%U) = %q: %U left as it is", r, text, c)
		}
	}
}

// hostile holds a value of each kind a terminal acts on, in keys too.
var hostile = map[string]any{
	"image":         "x\x1b[2J",
	"title":         "\x1b]0;pwned\a",
	"spoof":         "\r\x1b[Kok\nforged",
	"c1":            "csi\u009b31m nel\u0085",
	"del":           "del\x7f",
	"bidi":          "abc\u202edef \u2066iso\u2069",
	"zw":            "zero\u200bwidth\u200d\u00ad",
	"bom":           "bom\ufeff",
	"tag":           "tag\U000e0001",
	"seps":          "ls\u2028ps\u2029",
	"key\u202e\x1b": []any{"in a list\u200f", map[string]any{"deep\u2067": "value\u009b"}},
	"plain":         "nginx:1.27 ünïcode 日本",
	"long":          strings.Repeat("words and \u202e more ", 12),
}

// TestJSONEscapes: JSON writes the exact values, with nothing raw a
// terminal acts on.
func TestJSONEscapes(t *testing.T) {
	var b bytes.Buffer
	if err := JSON(&b, hostile); err != nil {
		t.Fatal(err)
	}
	if c, ok := raw(b.String(), '\n'); ok {
		t.Errorf("JSON holds %U as it is:\n%s", c, b.String())
	}
	var back map[string]any
	if err := json.Unmarshal(b.Bytes(), &back); err != nil {
		t.Fatalf("JSON does not decode: %v\n%s", err, b.String())
	}
	if !reflect.DeepEqual(back, hostile) {
		t.Errorf("JSON changed the values:\n got %q\nwant %q", back, hostile)
	}
	if !strings.Contains(b.String(), `"tag\udb40\udc01"`) || !strings.Contains(b.String(), `"del\u007f"`) {
		t.Errorf("JSON's escapes:\n%s", b.String())
	}
	// Another encoder's JSON, as protojson's.
	enc, _ := json.Marshal(map[string]string{"k": "a\u202eb"})
	if got := string(JSONBytes(enc)); got != `{"k":"a\u202eb"}` {
		t.Errorf("JSONBytes = %s", got)
	}
}

// TestYAMLEscapes: YAML writes the exact values, with nothing raw a
// terminal acts on, and plain strings as before.
func TestYAMLEscapes(t *testing.T) {
	var b bytes.Buffer
	if err := YAML(&b, hostile); err != nil {
		t.Fatal(err)
	}
	if c, ok := raw(b.String(), '\n'); ok {
		t.Errorf("YAML holds %U as it is:\n%s", c, b.String())
	}
	var back map[string]any
	if err := yaml.Unmarshal(b.Bytes(), &back); err != nil {
		t.Fatalf("YAML does not decode: %v\n%s", err, b.String())
	}
	if !reflect.DeepEqual(back, hostile) {
		t.Errorf("YAML changed the values:\n got %q\nwant %q", back, hostile)
	}
	for _, want := range []string{`bidi: "abc\u202edef \u2066iso\u2069"`, "plain: nginx:1.27 ünïcode 日本\n", `"key\u202e\e":`} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("YAML lacks %s:\n%s", want, b.String())
		}
	}
}

// TestTablesEscape: Table and Stream escape every cell, headers too, and
// align the escaped text.
func TestTablesEscape(t *testing.T) {
	var b strings.Builder
	tbl := NewTable(&b, "NAME", "IMAGE\x1b[1m")
	tbl.Row("web\tfake", "x\x1b[2J")
	tbl.Row("api", "y")
	if err := tbl.Flush(); err != nil {
		t.Fatal(err)
	}
	want := "NAME        IMAGE\\x1b[1m\n" +
		"web\\tfake   x\\x1b[2J\n" +
		"api         y\n"
	if b.String() != want {
		t.Errorf("table:\n%s\nwant:\n%s", b.String(), want)
	}

	b.Reset()
	s := NewStream(&b, "NAME", "MESSAGE")
	s.Fit("a\u202eb", "m")
	if err := s.Row("a\u202eb", "one\ntwo"); err != nil {
		t.Fatal(err)
	}
	if err := s.Row("c", "d"); err != nil {
		t.Fatal(err)
	}
	want = "NAME       MESSAGE\n" +
		"a\\u202eb   one\\ntwo\n" +
		"c          d\n"
	if b.String() != want {
		t.Errorf("stream:\n%s\nwant:\n%s", b.String(), want)
	}
}
