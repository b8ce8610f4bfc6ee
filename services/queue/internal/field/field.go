// Package field reads and writes the fields the queue's own binary
// records are made of: single bytes, varints, uvarints, and byte strings
// prefixed by their length as a uvarint (encoding/binary's encodings). The
// queue's records (package record) and the Raft log's records (package
// store) are both built from them, and both decoders face bytes that may
// be damaged: so every length is checked against what is left and against
// the field's limit before anything is allocated, and a decoder reads a
// whole record before it looks at a single error.
package field

import (
	"encoding/binary"
	"fmt"
	"unicode/utf8"
)

// AppendBytes appends b prefixed by its length.
func AppendBytes(dst, b []byte) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(b)))
	return append(dst, b...)
}

// AppendString appends s prefixed by its length.
func AppendString(dst []byte, s string) []byte {
	dst = binary.AppendUvarint(dst, uint64(len(s)))
	return append(dst, s...)
}

// Reader reads fields from the front of a byte slice. Its first failure
// sticks: every later read returns a zero value, and Err returns the
// failure, which wraps the Reader's corrupt error and names the byte
// offset where reading stopped.
type Reader struct {
	b       []byte
	off     int
	err     error
	corrupt error
}

// NewReader reads b; every failure wraps corrupt (the decoder's own
// sentinel, which its callers match with errors.Is).
func NewReader(b []byte, corrupt error) Reader {
	return Reader{b: b, corrupt: corrupt}
}

// Err is the first failure, or nil.
func (r *Reader) Err() error { return r.err }

// Off is the number of bytes read.
func (r *Reader) Off() int { return r.off }

// Fail records a failure at the current offset, unless one is recorded
// already: a decoder's own checks (a kind or value out of range) fail the
// same way as the Reader's.
func (r *Reader) Fail(why string) {
	if r.err == nil {
		r.err = fmt.Errorf("%w: %s at byte %d", r.corrupt, why, r.off)
	}
}

// Byte reads one byte.
func (r *Reader) Byte() byte {
	if r.err != nil {
		return 0
	}
	if r.off >= len(r.b) {
		r.Fail("truncated")
		return 0
	}
	c := r.b[r.off]
	r.off++
	return c
}

// Uvarint reads an unsigned varint.
func (r *Reader) Uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b[r.off:])
	if n <= 0 {
		r.Fail("bad varint")
		return 0
	}
	r.off += n
	return v
}

// Varint reads a signed (zig-zag) varint.
func (r *Reader) Varint() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b[r.off:])
	if n <= 0 {
		r.Fail("bad varint")
		return 0
	}
	r.off += n
	return v
}

// Bytes reads a length-prefixed byte string of at most limit bytes. The
// result aliases the Reader's bytes (a caller that keeps it copies it); it
// is nil on failure.
func (r *Reader) Bytes(limit int) []byte {
	n := r.Uvarint()
	if r.err != nil {
		return nil
	}
	if n > uint64(limit) || n > uint64(len(r.b)-r.off) {
		r.Fail("length out of range")
		return nil
	}
	b := r.b[r.off : r.off+int(n)]
	r.off += int(n)
	return b
}

// String reads a length-prefixed string of at most limit bytes of UTF-8,
// copied. With intern set, a string already in it is returned from it
// (no copy), and a new one is added: the records of a log name few
// distinct queues a million times.
func (r *Reader) String(limit int, intern map[string]string) string {
	n := r.Uvarint()
	if r.err != nil {
		return ""
	}
	if n > uint64(limit) || n > uint64(len(r.b)-r.off) {
		r.Fail("string length out of range")
		return ""
	}
	b := r.b[r.off : r.off+int(n)]
	if s, ok := intern[string(b)]; ok {
		r.off += int(n)
		return s
	}
	if !utf8.Valid(b) {
		r.Fail("string is not UTF-8")
		return ""
	}
	r.off += int(n)
	s := string(b)
	if intern != nil {
		intern[s] = s
	}
	return s
}
