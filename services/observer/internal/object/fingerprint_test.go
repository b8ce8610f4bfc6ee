package object

import (
	"bytes"
	"encoding/json"
	"testing"
)

func fp(t *testing.T, value string) uint64 {
	t.Helper()
	m, err := Decode([]byte(value))
	if err != nil {
		t.Fatalf("Decode(%s) = %v", value, err)
	}
	return m.Fingerprint
}

func TestFingerprintLeavesOutStatusOnly(t *testing.T) {
	const base = `{"kind":"Pod","metadata":{"name":"p","labels":{"a":"1"}},"spec":{"image":"nginx"},"status":{"phase":"Pending"}}`
	same := []struct{ name, value string }{
		{"another status", `{"kind":"Pod","metadata":{"name":"p","labels":{"a":"1"}},"spec":{"image":"nginx"},"status":{"phase":"Running","startTime":"x"}}`},
		{"no status", `{"kind":"Pod","metadata":{"name":"p","labels":{"a":"1"}},"spec":{"image":"nginx"}}`},
		{"null status", `{"kind":"Pod","metadata":{"name":"p","labels":{"a":"1"}},"spec":{"image":"nginx"},"status":null}`},
		{"members reordered", `{"status":{"phase":"Running"},"spec":{"image":"nginx"},"kind":"Pod","metadata":{"name":"p","labels":{"a":"1"}}}`},
		{"whitespace", "{ \"kind\" : \"Pod\",\n \"metadata\": {\"name\": \"p\", \"labels\": {\"a\": \"1\"}},\n\t\"spec\": {\"image\": \"nginx\"} ,\"status\": { \"phase\" : 1 } }\n"},
	}
	for _, tc := range same {
		if got, want := fp(t, tc.value), fp(t, base); got != want {
			t.Errorf("%s: fingerprint %x, want the base's %x", tc.name, got, want)
		}
	}
	differ := []struct{ name, value string }{
		{"spec", `{"kind":"Pod","metadata":{"name":"p","labels":{"a":"1"}},"spec":{"image":"nginx:2"},"status":{"phase":"Pending"}}`},
		{"a label", `{"kind":"Pod","metadata":{"name":"p","labels":{"a":"2"}},"spec":{"image":"nginx"},"status":{"phase":"Pending"}}`},
		{"kind", `{"kind":"Pods","metadata":{"name":"p","labels":{"a":"1"}},"spec":{"image":"nginx"},"status":{"phase":"Pending"}}`},
		{"a member more", `{"kind":"Pod","metadata":{"name":"p","labels":{"a":"1"}},"spec":{"image":"nginx"},"x":0,"status":{"phase":"Pending"}}`},
		{"a member less", `{"kind":"Pod","metadata":{"name":"p","labels":{"a":"1"}},"status":{"phase":"Pending"}}`},
		{"values swapped", `{"kind":"Pod","metadata":{"image":"nginx"},"spec":{"name":"p","labels":{"a":"1"}},"status":{"phase":"Pending"}}`},
		{"whitespace inside a string", `{"kind":"Pod ","metadata":{"name":"p","labels":{"a":"1"}},"spec":{"image":"nginx"},"status":{"phase":"Pending"}}`},
		{"a nested status", `{"kind":"Pod","metadata":{"name":"p","labels":{"a":"1"}},"spec":{"image":"nginx","status":1},"status":{"phase":"Pending"}}`},
		// encoding/json would read these as status too; they are hashed,
		// so changing them announces (more than needed, never less).
		{"Status", `{"kind":"Pod","metadata":{"name":"p","labels":{"a":"1"}},"spec":{"image":"nginx"},"Status":{"phase":"Pending"}}`},
		{"escaped status", `{"kind":"Pod","metadata":{"name":"p","labels":{"a":"1"}},"spec":{"image":"nginx"},"st\u0061tus":{"phase":"Pending"}}`},
	}
	for _, tc := range differ {
		if got, base := fp(t, tc.value), fp(t, base); got == base {
			t.Errorf("%s: fingerprint %x equals the base's", tc.name, got)
		}
	}
}

func TestFingerprintStrings(t *testing.T) {
	// Quotes, escapes and brackets inside strings do not end a member.
	a := fp(t, `{"spec":{"cmd":"echo \"}\" \\","x":"{["},"status":"\\\"status\\\""}`)
	b := fp(t, `{"spec":{"cmd":"echo \"}\" \\","x":"{["},"status":"other"}`)
	c := fp(t, `{"spec":{"cmd":"echo \"}\" \\","x":"{[ "},"status":"other"}`)
	if a != b || a == c {
		t.Errorf("fingerprints %x %x %x: want the first two equal, the third not", a, b, c)
	}
	// Scalars of every kind end where they should.
	d := fp(t, `{"a":1.5e3,"b":true,"c":null,"d":[1,"x",{"e":false}],"status":0}`)
	e := fp(t, `{"a":1.5e3 ,"b":true , "c":null,"d":[ 1 , "x" , { "e" : false } ] }`)
	if d != e {
		t.Errorf("fingerprints %x and %x differ by whitespace only", d, e)
	}
}

func TestStatusOnly(t *testing.T) {
	m := func(value string) *Meta {
		v, _ := Decode([]byte(value))
		return &v
	}
	spec1 := m(`{"kind":"Pod","spec":{"image":"a"},"status":{"phase":"Pending"}}`)
	spec1Running := m(`{"kind":"Pod","spec":{"image":"a"},"status":{"phase":"Running"}}`)
	spec2 := m(`{"kind":"Pod","spec":{"image":"b"},"status":{"phase":"Running"}}`)
	bad := m(`not json`)
	for _, tc := range []struct {
		name     string
		old, cur *Meta
		want     bool
	}{
		{"status changed", spec1, spec1Running, true},
		{"spec changed", spec1Running, spec2, false},
		{"create", nil, spec1, false},
		{"delete", spec1, nil, false},
		{"from malformed", bad, bad, false},
		{"to malformed", spec1, bad, false},
		{"malformed to good", bad, spec1, false},
	} {
		if got := StatusOnly(tc.old, tc.cur); got != tc.want {
			t.Errorf("%s: StatusOnly = %v, want %v", tc.name, got, tc.want)
		}
	}
	if !StatusOnly(spec1, spec1) {
		t.Error("an identical rewrite is not status-only")
	}
}

// FuzzFingerprint: any input is scanned without a panic, and a valid
// object's fingerprint does not depend on indentation.
func FuzzFingerprint(f *testing.F) {
	for _, s := range []string{`{}`, `{"status":1}`, `{"a":"\"","b":[{}],"status":{"x":"}"}}`, `{"a":1`, `{"a"`, `{`, `{"a":"\`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, value []byte) {
		got := fingerprint(value) // never panics, valid or not
		var v map[string]json.RawMessage
		if json.Unmarshal(value, &v) != nil || v == nil {
			return
		}
		if got == 0 {
			t.Fatalf("a valid object %q has no fingerprint", value)
		}
		var indented bytes.Buffer
		if err := json.Indent(&indented, value, " ", "\t "); err != nil {
			t.Fatal(err)
		}
		if again := fingerprint(indented.Bytes()); again != got {
			t.Fatalf("indenting %q changed its fingerprint", value)
		}
	})
}

// BenchmarkFingerprint is the fingerprint's share of BenchmarkDecode.
func BenchmarkFingerprint(b *testing.B) {
	b.ReportAllocs()
	b.SetBytes(int64(len(benchPod)))
	for range b.N {
		if fingerprint(benchPod) == 0 {
			b.Fatal("no fingerprint")
		}
	}
}
