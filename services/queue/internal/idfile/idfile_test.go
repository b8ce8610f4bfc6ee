package idfile

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"hash/crc32"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/batonrun/baton/services/queue/internal/format"
)

var update = flag.Bool("update-fixtures", false, "write the id file fixture of the current format version under testdata")

// fixtureID is the id every fixture under testdata holds.
const fixtureID = 0x1a2b3c4d5e6f7089

// TestRoundTrip: an id written reads back, in this build's version; Write
// replaces a file that was there and leaves no temporary file; a file
// that is not there is no id, not an error.
func TestRoundTrip(t *testing.T) {
	for _, id := range []uint64{1, fixtureID, 1<<64 - 1} {
		got, v, err := Decode(Encode(id))
		if err != nil || got != id || v != format.IDFile.Current {
			t.Errorf("Decode(Encode(%x)) = %x, version %d, %v", id, got, v, err)
		}
	}
	dir := t.TempDir()
	if id, ok, err := Read(dir, "cluster-id"); ok || err != nil || id != 0 {
		t.Fatalf("Read of no file = %x, %v, %v; want no id and no error", id, ok, err)
	}
	for _, id := range []uint64{7, fixtureID} {
		if err := Write(dir, "cluster-id", id); err != nil {
			t.Fatal(err)
		}
		if got, ok, err := Read(dir, "cluster-id"); !ok || err != nil || got != id {
			t.Fatalf("Read after Write(%x) = %x, %v, %v", id, got, ok, err)
		}
	}
	if names, _ := filepath.Glob(filepath.Join(dir, "*")); len(names) != 1 {
		t.Errorf("the directory holds %v, want the id file alone", names)
	}
}

// TestEveryFlipAndCutRefused: every single flipped bit and every cut of a
// file of this build's version is refused as damaged, never read as an id
// (nor as a newer version's file).
func TestEveryFlipAndCutRefused(t *testing.T) {
	good := Encode(fixtureID)
	for off := range good {
		for bit := range 8 {
			b := bytes.Clone(good)
			b[off] ^= 1 << bit
			if id, _, err := Decode(b); !errors.Is(err, ErrDamaged) {
				t.Errorf("bit %d of byte %d flipped (%q): %x, %v; want ErrDamaged", bit, off, b, id, err)
			}
		}
	}
	for n := range len(good) {
		if id, _, err := Decode(good[:n]); !errors.Is(err, ErrDamaged) {
			t.Errorf("cut to %d bytes: %x, %v; want ErrDamaged", n, id, err)
		}
	}
	if _, _, err := Decode(append(bytes.Clone(good), '\n')); !errors.Is(err, ErrDamaged) {
		t.Errorf("a byte more: %v; want ErrDamaged", err)
	}
}

// TestVersion1: a file as the releases before version 2 wrote it reads as
// its id; a cut of one, a byte that is no lower-case hex digit, an id of
// 0 or a header claiming version 1 is damage.
func TestVersion1(t *testing.T) {
	v1 := fmt.Appendf(nil, "%016x\n", uint64(fixtureID))
	if id, v, err := Decode(v1); err != nil || id != fixtureID || v != 1 {
		t.Fatalf("Decode(%q) = %x, version %d, %v", v1, id, v, err)
	}
	bad := [][]byte{
		[]byte("0000000000000000\n"),
		[]byte(strings.ToUpper(string(v1))),
		v1[:len(v1)-1],
		append(bytes.Clone(v1[:len(v1)-1]), ' '),
		[]byte(" " + string(v1[1:])),
		[]byte("BTNIDF01 " + string(v1)),
	}
	for n := range len(v1) {
		bad = append(bad, v1[:n])
	}
	for _, b := range bad {
		if id, _, err := Decode(b); !errors.Is(err, ErrDamaged) {
			t.Errorf("Decode(%q) = %x, %v; want ErrDamaged", b, id, err)
		}
	}
}

// TestNewerVersionRefused: a file of a version this build does not read
// is refused as such (format.ErrNewer), not as damage.
func TestNewerVersionRefused(t *testing.T) {
	b := format.Header(magic, format.IDFile.Current+1)
	b = fmt.Appendf(b, " %016x", uint64(fixtureID))
	b = fmt.Appendf(b, " %08x\n", crc32.Checksum(b, castagnoli))
	if _, _, err := Decode(b); !errors.Is(err, format.ErrNewer) || errors.Is(err, ErrDamaged) {
		t.Fatalf("Decode(%q) = %v, want format.ErrNewer", b, err)
	}
}

// TestReadNamesTheFile: Read's error for a damaged file names it, and
// leaves it as it was.
func TestReadNamesTheFile(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "member-id")
	b := Encode(fixtureID)
	b[12] ^= 1
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
	_, ok, err := Read(dir, "member-id")
	if ok || !errors.Is(err, ErrDamaged) || !strings.Contains(err.Error(), p) || !strings.Contains(err.Error(), "checksum mismatch") {
		t.Fatalf("Read of a damaged file = %v, %v; want ErrDamaged naming %s and the checksum", ok, err, p)
	}
	if after, _ := os.ReadFile(p); !bytes.Equal(after, b) {
		t.Errorf("Read changed the file: %q, was %q", after, b)
	}
}

// TestFixtures: every fixture under testdata (id-v<N>), written by the
// build of its version, reads with this build as fixtureID.
// -update-fixtures writes the current version's.
func TestFixtures(t *testing.T) {
	cur := filepath.Join("testdata", fmt.Sprintf("id-v%d", format.IDFile.Current))
	if *update {
		if err := os.WriteFile(cur, Encode(fixtureID), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	files, _ := filepath.Glob(filepath.Join("testdata", "id-v*"))
	if !slices.Contains(files, cur) {
		t.Fatalf("no fixture of this build's id file version (%s): write it with -update-fixtures", cur)
	}
	for v := format.IDFile.Oldest; v <= format.IDFile.Current; v++ {
		f := filepath.Join("testdata", fmt.Sprintf("id-v%d", v))
		if !slices.Contains(files, f) {
			t.Errorf("no fixture of version %d, which this build reads", v)
			continue
		}
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if id, got, err := Decode(b); err != nil || id != fixtureID || got != v {
			t.Errorf("%s reads as %x, version %d, %v; want %x, version %d", f, id, got, err, uint64(fixtureID), v)
		}
	}
}

// TestRemove: a removed file reads as none, and removing none is no error.
func TestRemove(t *testing.T) {
	dir := t.TempDir()
	if err := Write(dir, "claim-m2", 42); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := Remove(dir, "claim-m2"); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok, err := Read(dir, "claim-m2"); ok || err != nil {
		t.Fatalf("after Remove: ok %v, err %v", ok, err)
	}
}
