package tlsfiles

import (
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestShown(t *testing.T) {
	long := strings.Repeat("a", 60_000)
	for _, tc := range []struct {
		in, want string
	}{
		{"worker-1", "worker-1"},
		{"", ""},
		{"trabajador-ñ 1", "trabajador-ñ 1"},
		{"\u202eevil\x00", `\u202eevil\x00`},
		{"a\xffb", `a\xffb`},
		{`back\slash "quoted"`, `back\\slash \"quoted\"`},
		{"line\nbreak\u2028tab\t", `line\x0abreak\u2028tab\x09`},
		{"\U000e0001tag", `\U000e0001tag`},
		{strings.Repeat("b", MaxShownBytes), strings.Repeat("b", MaxShownBytes)},
		{strings.Repeat("b", MaxShownBytes+1), strings.Repeat("b", MaxShownBytes-len("…(129 bytes)")) + "…(129 bytes)"},
		{long, strings.Repeat("a", MaxShownBytes-len("…(60000 bytes)")) + "…(60000 bytes)"},
	} {
		if got := Shown(tc.in); got != tc.want {
			t.Errorf("Shown(%.40q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	// Cut where an escape or a character ends, never inside one.
	for _, tc := range []struct{ unit, escaped string }{
		{"\x00", `\x00`}, {"ñ", "ñ"}, {"\u202e", `\u202e`}, {"\U000e0001", `\U000e0001`}, {"\xff", `\xff`},
	} {
		in := strings.Repeat(tc.unit, 200)
		got := Shown(in)
		body, mark, ok := strings.Cut(got, "…(")
		if len(got) > MaxShownBytes || !utf8.ValidString(got) || !ok || mark != strconv.Itoa(len(in))+" bytes)" {
			t.Errorf("Shown(%.20q…) = %q: over %d bytes, not UTF-8 or not marked", in, got, MaxShownBytes)
		}
		if n := len(body) / len(tc.escaped); n == 0 || body != strings.Repeat(tc.escaped, n) {
			t.Errorf("Shown(%.20q…) = %q: not whole escapes of %q", in, got, tc.escaped)
		}
	}
}

func TestIdentityStringBounded(t *testing.T) {
	roles := []string{"worker"}
	for range 40 {
		roles = append(roles, strings.Repeat("r", 50))
	}
	id := Identity{Name: "\u202e" + strings.Repeat("n", 1000), Roles: roles}
	got := id.String()
	r50 := strings.Repeat("r", 50)
	want := `"` + Shown(id.Name) + `" (roles worker, ` + r50 + ", " + r50 + ", … 38 more)"
	if got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	if s := (Identity{Name: "worker-1", Roles: []string{"worker"}}).String(); s != `"worker-1" (roles worker)` {
		t.Errorf("String() = %q", s)
	}
}
