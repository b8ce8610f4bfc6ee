package printer

// Escaping for terminals. What batonctl prints comes mostly from others:
// an object's image, labels and annotations, an event's message, a
// declaration's descriptions and field names, queue keys and the errors
// workers store on them, member and worker names, a server's refusal. A
// terminal obeys the control characters in such text: ESC [2J clears the
// screen, ESC ]0;…BEL retitles the window, CR and ESC [K erase the line to
// forge another, a C1 character such as U+009B (CSI) acts as ESC [ does,
// and a format character such as U+202E (RIGHT-TO-LEFT OVERRIDE) shows
// the rest of the line reversed. Every human-readable output of batonctl
// goes through Escape (or EscapeText, which keeps the line breaks and tabs
// of text whose layout they are); JSON and YAML keep the exact values in
// their own syntax, with the same characters escaped there (JSON, YAML).

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf16"
	"unicode/utf8"

	"gopkg.in/yaml.v3"
)

// escapes reports whether Escape writes r as an escape: a control
// character (C0, DEL, C1), a format character (Cf: the bidirectional
// overrides, embeddings and isolates, zero-width characters, the byte
// order mark, tags) or a line or paragraph separator (U+2028, U+2029),
// which some terminals and pagers break a line at.
func escapes(r rune) bool {
	return unicode.In(r, unicode.Cc, unicode.Cf, unicode.Zl, unicode.Zp)
}

// Escape returns s as a terminal shows it without acting on it: every
// character escapes reports, a tab and a line break too, is written as Go
// writes it in a quoted string (\x1b, \r, \n, \t, \u009b, \u202e,
// \U000e0001), and a byte that is not UTF-8 as \xff. Other text, "é" and
// "日本" included, is left as it is, and so are backslashes and quotes: a
// value that holds the four characters \x1b reads the same as one that
// holds ESC (-o json tells them apart). Escape(Escape(s)) == Escape(s).
// It is for a value on one line: a table's cell, a field, a name in a
// message.
func Escape(s string) string { return escape(s, false) }

// EscapeText is Escape for text of several lines whose line breaks and
// tabs are its layout (a description, an error that joins several): they
// are kept, and everything else Escape escapes is escaped.
func EscapeText(s string) string { return escape(s, true) }

func escape(s string, layout bool) string {
	keep := func(r rune) bool { return layout && (r == '\n' || r == '\t') }
	if utf8.ValidString(s) && !strings.ContainsFunc(s, func(r rune) bool { return escapes(r) && !keep(r) }) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case escapes(r) && !keep(r):
			q := strconv.QuoteRune(r) // '\x1b', '\u202e': r is not printable
			b.WriteString(q[1 : len(q)-1])
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// escapeJSON escapes, in encoded JSON, the characters escapes reports that
// the encoder leaves as they are (DEL, C1, format characters), as \u
// escapes (a surrogate pair above U+FFFF), which decode to the same
// string. Outside its strings JSON is ASCII, and inside them the encoder
// has escaped every C0 character, so a line break, a tab or a carriage
// return left in b is layout, and stays.
func escapeJSON(b []byte) []byte {
	if !bytes.ContainsFunc(b, func(r rune) bool { return r >= 0x7f && escapes(r) }) {
		return b
	}
	out := make([]byte, 0, len(b)+16)
	for i := 0; i < len(b); {
		r, size := utf8.DecodeRune(b[i:])
		switch {
		case r < 0x7f || !escapes(r):
			out = append(out, b[i:i+size]...)
		case r > 0xffff:
			r1, r2 := utf16.EncodeRune(r)
			out = fmt.Appendf(out, `\u%04x\u%04x`, r1, r2)
		default:
			out = fmt.Appendf(out, `\u%04x`, r)
		}
		i += size
	}
	return out
}

// yamlLeavesRaw reports whether the YAML emitter writes r as it is, where
// escapes asks for an escape: the format characters it counts as
// printable (U+00A0 to U+FFFD but the byte order mark). It escapes every
// other one itself in a double-quoted scalar (C0, DEL, C1 as \e, \x7F,
// \x9B; U+2028 as \L; the byte order mark and anything above U+FFFF).
func yamlLeavesRaw(r rune) bool {
	return r >= 0xa0 && r <= 0xfffd && r != 0xfeff && escapes(r)
}

// quoteForYAML makes every scalar of n (keys too) that holds a character
// the emitter would leave as it is a double-quoted one, inside which
// escapeYAML may then write that character as an escape; and one that
// holds a line or paragraph separator too, which the emitter would
// otherwise write as a line break of a quoted scalar.
func quoteForYAML(n *yaml.Node) {
	if n == nil {
		return
	}
	if n.Kind == yaml.ScalarNode && strings.ContainsFunc(n.Value, func(r rune) bool { return r >= 0xa0 && escapes(r) }) {
		n.Style = yaml.DoubleQuotedStyle
	}
	for _, c := range n.Content {
		quoteForYAML(c)
	}
}

// escapeYAML escapes, in YAML that quoteForYAML prepared, the characters
// yamlLeavesRaw reports as \u escapes: each is inside a double-quoted
// scalar, where YAML reads \u202e as U+202E.
func escapeYAML(b []byte) []byte {
	if !bytes.ContainsFunc(b, yamlLeavesRaw) {
		return b
	}
	out := make([]byte, 0, len(b)+16)
	for i := 0; i < len(b); {
		r, size := utf8.DecodeRune(b[i:])
		if yamlLeavesRaw(r) {
			out = fmt.Appendf(out, `\u%04x`, r)
		} else {
			out = append(out, b[i:i+size]...)
		}
		i += size
	}
	return out
}
