// Package idfile reads and writes the id files of a replicated member's
// raft/ directory (member-id, cluster-id, forced-cluster-id): one 64-bit
// id each, which the member starts under. An id that reads as another is
// worse than none: a member under another cluster id is refused by every
// peer and waits for good, so the file carries a checksum and a damaged
// one is refused, naming it, never taken for another id.
//
// # Format (format.IDFile)
//
//	version 1  the id as 16 lowercase hex digits and a newline; no header,
//	           no checksum (written by the releases before version 2, and
//	           still read: exactly that, or it is damaged)
//	version 2  header "BTNIDF" and two digits, a space, the id as 16
//	           lowercase hex digits, a space, the CRC-32C (Castagnoli) of
//	           the bytes before that space as 8 lowercase hex digits, a
//	           newline: "BTNIDF02 0123456789abcdef 89abcdef\n"
//
// Both are text, so that an operator can read the id with cat. A version 1
// file stays as it is (a release one back reads only that): only a file
// written since is checked.
package idfile

import (
	"bytes"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"

	"github.com/batonrun/baton/services/queue/internal/format"
)

// ErrDamaged is returned for an id file that does not read as an id of any
// version: its bytes were damaged (a flipped bit, a cut), or something
// else wrote it.
var ErrDamaged = errors.New("idfile: damaged")

const (
	magic = "BTNIDF"
	// v1Len and v2Len are the lengths of the two versions' files.
	v1Len = 16 + 1
	v2Len = format.HeaderLen + 1 + 16 + 1 + 8 + 1
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Encode is an id file holding id, in the version this build writes.
func Encode(id uint64) []byte {
	b := format.Header(magic, format.IDFile.Current)
	b = fmt.Appendf(b, " %016x", id)
	return fmt.Appendf(b, " %08x\n", crc32.Checksum(b, castagnoli))
}

// Decode reads the id an id file holds and the version it is written in.
// An id of 0 is no id. The error is ErrDamaged, or format's ErrNewer for a
// version this build does not read.
func Decode(b []byte) (uint64, format.Version, error) {
	if !bytes.HasPrefix(b, []byte(magic)) {
		// No header: version 1, or damage (a flipped bit in the magic
		// leaves a letter that is not a hex digit, and the length of
		// version 2).
		id, err := decodeV1(b)
		return id, 1, err
	}
	v, err := format.ParseHeader(b, magic, format.IDFile)
	switch {
	case errors.Is(err, format.ErrNotHeader):
		return 0, 0, fmt.Errorf("%w: a header %q", ErrDamaged, b[:min(len(b), format.HeaderLen)])
	case err != nil:
		if errors.Is(err, format.ErrNewer) && flippedVersion(b) {
			return 0, v, fmt.Errorf("%w: checksum mismatch (the header says version %d, the checksum is version %d's)", ErrDamaged, v, format.IDFile.Current)
		}
		return 0, v, err
	case v < 2:
		// Version 1 has no header: a header saying 1 is damage.
		return 0, v, fmt.Errorf("%w: a header of version %d", ErrDamaged, v)
	}
	if len(b) != v2Len || b[format.HeaderLen] != ' ' || b[v2Len-10] != ' ' || b[v2Len-1] != '\n' {
		return 0, v, fmt.Errorf("%w: %d bytes, not the %d of version %d", ErrDamaged, len(b), v2Len, v)
	}
	id, ok := parseHex(b[format.HeaderLen+1 : v2Len-10])
	sum, sok := parseHex(b[v2Len-9 : v2Len-1])
	if !ok || !sok {
		return 0, v, fmt.Errorf("%w: not hex digits", ErrDamaged)
	}
	if got := crc32.Checksum(b[:v2Len-10], castagnoli); uint64(got) != sum {
		return 0, v, fmt.Errorf("%w: checksum mismatch (%08x, the file says %08x)", ErrDamaged, got, sum)
	}
	if id == 0 {
		return 0, v, fmt.Errorf("%w: id 0", ErrDamaged)
	}
	return id, v, nil
}

// flippedVersion reports whether b, whose header names a version this
// build does not read, is this build's version with the version's digits
// damaged: its checksum is of this build's header, so a newer build did
// not write it.
func flippedVersion(b []byte) bool {
	if len(b) != v2Len {
		return false
	}
	sum, ok := parseHex(b[v2Len-9 : v2Len-1])
	if !ok {
		return false
	}
	c := bytes.Clone(b[:v2Len-10])
	copy(c, format.Header(magic, format.IDFile.Current))
	return uint64(crc32.Checksum(c, castagnoli)) == sum
}

// decodeV1 reads a version 1 file, exactly as the releases before wrote
// it: anything else (a cut that leaves fewer digits, a flipped bit that
// leaves no digit) is damage. A flipped bit that leaves another digit is
// another id, which version 1 cannot tell.
func decodeV1(b []byte) (uint64, error) {
	if len(b) != v1Len || b[v1Len-1] != '\n' {
		return 0, fmt.Errorf("%w: %d bytes, neither version 1 (%d) nor a header", ErrDamaged, len(b), v1Len)
	}
	id, ok := parseHex(b[:v1Len-1])
	if !ok {
		return 0, fmt.Errorf("%w: %q is not 16 hex digits", ErrDamaged, b[:v1Len-1])
	}
	if id == 0 {
		return 0, fmt.Errorf("%w: id 0", ErrDamaged)
	}
	return id, nil
}

// parseHex parses lowercase hex digits, as both versions write them: an
// upper-case digit is a flipped bit (0x20) of a lower-case one.
func parseHex(b []byte) (uint64, bool) {
	for _, c := range b {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return 0, false
		}
	}
	v, err := strconv.ParseUint(string(b), 16, 64)
	return v, err == nil
}

// Read reads the id file name of dir; ok is false when there is none. An
// error names the file: a damaged one wraps ErrDamaged.
func Read(dir, name string) (id uint64, ok bool, err error) {
	p := filepath.Join(dir, name)
	b, err := os.ReadFile(p)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("read %s: %w", p, err)
	}
	id, _, err = Decode(b)
	if err != nil {
		return 0, false, fmt.Errorf("%s: %w", p, err)
	}
	return id, true, nil
}

// Write makes the id file name of dir hold id, durably: the bytes synced
// under a temporary name, renamed over the file, the directory synced. A
// crash leaves the old file or the new one, whole.
func Write(dir, name string, id uint64) error {
	p := filepath.Join(dir, name)
	tmp := p + ".new"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o640)
	if err != nil {
		return fmt.Errorf("write %s: %w", p, err)
	}
	_, err = f.Write(Encode(id))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, p)
	}
	if err == nil {
		var d *os.File
		if d, err = os.Open(dir); err == nil {
			err = d.Sync()
			if cerr := d.Close(); err == nil {
				err = cerr
			}
		}
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", p, err)
	}
	return nil
}

// Remove removes the id file name of dir, durably (the directory synced):
// none is no error. A crash leaves the file or none.
func Remove(dir, name string) error {
	p := filepath.Join(dir, name)
	if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("remove %s: %w", p, err)
	}
	d, err := os.Open(dir)
	if err == nil {
		err = d.Sync()
		if cerr := d.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		return fmt.Errorf("remove %s: %w", p, err)
	}
	return nil
}
