package field

import (
	"encoding/binary"
	"errors"
	"math"
	"strings"
	"testing"
	"unsafe"
)

var errTest = errors.New("test: corrupt")

func TestRoundTrip(t *testing.T) {
	var b []byte
	b = append(b, 'x')
	b = binary.AppendUvarint(b, math.MaxUint64)
	b = binary.AppendVarint(b, math.MinInt64)
	b = AppendString(b, "héllo")
	b = AppendBytes(b, []byte{0, 1, 2})
	b = AppendBytes(b, nil)
	r := NewReader(b, errTest)
	if c := r.Byte(); c != 'x' {
		t.Errorf("Byte = %q", c)
	}
	if v := r.Uvarint(); v != math.MaxUint64 {
		t.Errorf("Uvarint = %d", v)
	}
	if v := r.Varint(); v != math.MinInt64 {
		t.Errorf("Varint = %d", v)
	}
	if s := r.String(6, nil); s != "héllo" {
		t.Errorf("String = %q", s)
	}
	if got := r.Bytes(3); string(got) != "\x00\x01\x02" {
		t.Errorf("Bytes = %q", got)
	}
	if got := r.Bytes(0); len(got) != 0 {
		t.Errorf("empty Bytes = %q", got)
	}
	if r.Err() != nil || r.Off() != len(b) {
		t.Fatalf("err %v, read %d of %d bytes", r.Err(), r.Off(), len(b))
	}
}

// TestRefusals: each damaged field fails with the Reader's sentinel, at
// the offset where reading stopped, and the failure sticks.
func TestRefusals(t *testing.T) {
	long := AppendString(nil, "abcd")
	for _, tc := range []struct {
		name string
		b    []byte
		read func(*Reader)
		want string
	}{
		{"truncated byte", nil, func(r *Reader) { r.Byte() }, "truncated at byte 0"},
		{"bad uvarint", []byte{0x80, 0x80}, func(r *Reader) { r.Uvarint() }, "bad varint at byte 0"},
		{"uvarint overflow", []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, func(r *Reader) { r.Uvarint() }, "bad varint at byte 0"},
		{"bad varint", []byte{0x80}, func(r *Reader) { r.Varint() }, "bad varint at byte 0"},
		{"string over its limit", long, func(r *Reader) { r.String(3, nil) }, "string length out of range at byte 1"},
		{"string past the end", long[:3], func(r *Reader) { r.String(10, nil) }, "string length out of range at byte 1"},
		{"string not UTF-8", AppendString(nil, "\xff\xfe"), func(r *Reader) { r.String(10, nil) }, "string is not UTF-8 at byte 1"},
		{"bytes over their limit", long, func(r *Reader) { r.Bytes(3) }, "length out of range at byte 1"},
		{"bytes past the end", long[:3], func(r *Reader) { r.Bytes(math.MaxInt) }, "length out of range at byte 1"},
		{"a huge length", []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, func(r *Reader) { r.Bytes(math.MaxInt) }, "length out of range at byte 10"},
		{"the decoder's own check", []byte{7}, func(r *Reader) { r.Byte(); r.Fail("seven") }, "seven at byte 1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := NewReader(tc.b, errTest)
			tc.read(&r)
			err := r.Err()
			if !errors.Is(err, errTest) || !strings.HasSuffix(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %v ending %q", err, errTest, tc.want)
			}
			off := r.Off()
			r.Fail("later")
			if r.Byte() != 0 || r.Uvarint() != 0 || r.Varint() != 0 || r.Bytes(10) != nil || r.String(10, nil) != "" {
				t.Error("a read after a failure returned a value")
			}
			if r.Err() != err || r.Off() != off {
				t.Errorf("after a failure: err %v, offset %d; want %v, %d", r.Err(), r.Off(), err, off)
			}
		})
	}
}

// TestStringInterns: a string already interned is returned from the map;
// a new one is added, once it is valid.
func TestStringInterns(t *testing.T) {
	intern := map[string]string{}
	b := AppendString(nil, "queue")
	b = AppendString(b, "queue")
	b = AppendString(b, "\xff")
	r := NewReader(b, errTest)
	first := r.String(10, intern)
	second := r.String(10, intern)
	if first != "queue" || second != "queue" || len(intern) != 1 {
		t.Fatalf("got %q, %q, interned %v", first, second, intern)
	}
	if unsafe.StringData(first) != unsafe.StringData(second) {
		t.Error("the second string was copied, not taken from the map")
	}
	if r.String(10, intern); r.Err() == nil || len(intern) != 1 {
		t.Fatalf("a string that is not UTF-8: err %v, interned %v", r.Err(), intern)
	}
}

// TestBytesAliases: Bytes returns a view of the input, for callers that
// only look (a copy is theirs to make).
func TestBytesAliases(t *testing.T) {
	b := AppendBytes(nil, []byte("abc"))
	r := NewReader(b, errTest)
	got := r.Bytes(10)
	b[1] = 'X'
	if string(got) != "Xbc" {
		t.Fatalf("Bytes = %q, want a view of the input", got)
	}
}
