package backup

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/batonrun/baton/services/queue/internal/format"
	"github.com/batonrun/baton/services/queue/internal/record"
)

var update = flag.Bool("update-fixtures", false, "write the backup fixture of the current format version under testdata")

// sample is a backup's worth of records: two queues, keys in each state a
// record stores, frames enough to need more than one.
func sample(n int) []record.Record {
	recs := []record.Record{{Kind: record.KindQueue, Queue: "jobs"}, {Kind: record.KindQueue, Queue: "empty"}}
	for i := range n {
		r := record.Record{Kind: record.KindPut, Queue: "jobs", Key: fmt.Sprintf("ns/key-%06d", i), State: record.StatePending, Priority: 1, PendingSince: int64(1e18 + i)}
		switch i % 5 {
		case 1:
			r.State, r.NotBefore = record.StateDelayed, int64(2e18+i)
		case 2:
			r.State, r.Attempts, r.LastError = record.StateParked, 3, "boom"
		case 3:
			r.Priority = 3
		}
		recs = append(recs, r)
	}
	return recs
}

func write(t *testing.T, recs []record.Record) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := NewWriter(&buf, format.Backup.Current, testFence)
	for i := range recs {
		if err := w.Add(&recs[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// testFence is the fence of the files write writes.
var testFence = Fence{Epoch: 7, Token: 7<<44 | 12345}

func readAll(t *testing.T, name string, b []byte) ([]record.Record, Info, error) {
	t.Helper()
	var got []record.Record
	info, err := Read(name, b, func(r *record.Record) error { got = append(got, *r); return nil })
	return got, info, err
}

// TestRoundTrip: what the Writer wrote reads back, record for record, over
// several frames, with the count and the queues and keys in its Info.
func TestRoundTrip(t *testing.T) {
	for _, n := range []int{0, 1, 30_000} {
		recs := sample(n)
		b := write(t, recs)
		got, info, err := readAll(t, "f", b)
		if err != nil {
			t.Fatalf("%d keys: %v", n, err)
		}
		if !slices.Equal(got, recs) || info.Records != uint64(len(recs)) || info.Queues != 2 || info.Keys != n || info.Version != format.Backup.Current || !info.Fenced || info.Fence != testFence {
			t.Fatalf("%d keys: read %d records, info %+v", n, len(got), info)
		}
	}
}

// TestDamageIsRefusedByName: a file cut anywhere, and a file with any one
// bit flipped, is refused as ErrDamaged naming the file (or, for a flipped
// digit of the header's version, as a version this build does not read),
// and Read hands nothing on before it has checked the whole file.
func TestDamageIsRefusedByName(t *testing.T) {
	b := write(t, sample(20))
	for cut := 0; cut < len(b); cut++ {
		if _, err := Read("backup.bak", b[:cut], nil); !errors.Is(err, ErrDamaged) || !strings.Contains(err.Error(), "backup.bak") {
			t.Fatalf("cut at %d of %d: %v, want ErrDamaged naming the file", cut, len(b), err)
		}
	}
	for at := range b {
		for _, bit := range []byte{0x01, 0x80} {
			d := slices.Clone(b)
			d[at] ^= bit
			seen := 0
			_, err := Read("backup.bak", d, func(*record.Record) error { seen++; return nil })
			version := at >= len(kind) && at < format.HeaderLen
			if !(errors.Is(err, ErrDamaged) || version && (errors.Is(err, format.ErrNewer) || errors.Is(err, format.ErrOlder))) || !strings.Contains(err.Error(), "backup.bak") {
				t.Fatalf("byte %d ^ %#x: %v, want ErrDamaged naming the file", at, bit, err)
			}
			if seen > 0 && at >= len(b)-footerLen {
				t.Fatalf("byte %d ^ %#x: %d records handed on from a file whose footer is damaged", at, bit, seen)
			}
		}
	}
}

// TestNewerVersionRefused: a backup of a version this build does not read
// is refused as such, naming both versions, not as damage.
func TestNewerVersionRefused(t *testing.T) {
	b := write(t, sample(3))
	copy(b, format.Header(kind, format.Backup.Current+1))
	if _, err := Read("f", b, nil); !errors.Is(err, format.ErrNewer) || errors.Is(err, ErrDamaged) {
		t.Fatalf("a backup of the next version: %v, want format.ErrNewer", err)
	}
}

// TestFixtures: every backup fixture under testdata, written by the build
// of its version, reads with this build as the records it was written
// with (testdata/backup-v<N>.golden). -update-fixtures writes the current
// version's.
func TestFixtures(t *testing.T) {
	cur := filepath.Join("testdata", fmt.Sprintf("backup-v%d.bak", format.Backup.Current))
	if *update {
		if err := os.MkdirAll("testdata", 0o750); err != nil {
			t.Fatal(err)
		}
		recs := sample(50)
		if err := os.WriteFile(cur, write(t, recs), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(strings.TrimSuffix(cur, ".bak")+".golden", []byte(golden(recs)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	files, _ := filepath.Glob(filepath.Join("testdata", "backup-v*.bak"))
	if !slices.Contains(files, cur) {
		t.Fatalf("no fixture of this build's backup version (%s): write it with -update-fixtures", cur)
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		got, info, err := readAll(t, f, b)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		if fenced := info.Version >= 2; info.Fenced != fenced || fenced && info.Fence != testFence {
			t.Errorf("%s (version %d): fence %+v, fenced %v", f, info.Version, info.Fence, info.Fenced)
		}
		want, err := os.ReadFile(strings.TrimSuffix(f, ".bak") + ".golden")
		if err != nil {
			t.Fatal(err)
		}
		if golden(got) != string(want) {
			t.Errorf("%s reads as\n%s\nwant\n%s", f, golden(got), want)
		}
	}
}

func golden(recs []record.Record) string {
	var b strings.Builder
	for _, r := range recs {
		fmt.Fprintf(&b, "%+v\n", r)
	}
	return b.String()
}

// zeros is an endless reader of one byte value, counting what it gave.
type endless struct {
	b    byte
	read int64
}

func (e *endless) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = e.b
	}
	e.read += int64(len(p))
	return len(p), nil
}

// TestStreamRefusesWhatIsNoBackupAtOnce: /dev/zero, or a backup's header
// followed by endless zeros or ones, is refused within its first frame,
// with no more read than a frame's header past the header: a stream never
// reads the whole input before it looks at it.
func TestStreamRefusesWhatIsNoBackupAtOnce(t *testing.T) {
	header := func() []byte {
		var buf bytes.Buffer
		w := NewWriter(&buf, format.Backup.Current, testFence)
		_ = w
		return buf.Bytes()
	}()
	for _, c := range []struct {
		name   string
		prefix []byte
		b      byte
	}{
		{"/dev/zero", nil, 0},
		{"a header, then zeros", header, 0},
		{"a header, then ones", header, 0xff},
		{"a header, then frame-sized junk", header, 0x01},
	} {
		e := &endless{b: c.b}
		var r io.Reader = e
		if c.prefix != nil {
			r = io.MultiReader(bytes.NewReader(c.prefix), e)
		}
		_, err := Stream(c.name, r, nil)
		if !errors.Is(err, ErrDamaged) || !strings.Contains(err.Error(), c.name) {
			t.Errorf("%s: %v, want ErrDamaged naming it", c.name, err)
		}
		if e.read > MaxFrame+frameHeader {
			t.Errorf("%s: read %d bytes of the endless input before refusing it", c.name, e.read)
		}
	}
}

// TestStreamMaxFileBytes: a file longer than the limit is refused as too
// large, not read on.
func TestStreamMaxFileBytes(t *testing.T) {
	b := write(t, sample(2000))
	if _, err := newStreamReader("big.bak", bytes.NewReader(b), int64(len(b))).read(nil); err != nil {
		t.Fatalf("a file of exactly the limit: %v", err)
	}
	_, err := newStreamReader("big.bak", bytes.NewReader(b), int64(len(b)-1)).read(nil)
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "big.bak") {
		t.Fatalf("a file one byte over the limit: %v, want ErrTooLarge naming it", err)
	}
}

// TestStreamRefusesBytesAfterTheFooter: a footer is the file's end.
func TestStreamRefusesBytesAfterTheFooter(t *testing.T) {
	b := append(write(t, sample(3)), 'x')
	if _, err := Stream("f", bytes.NewReader(b), nil); !errors.Is(err, ErrDamaged) {
		t.Fatalf("a byte after the footer: %v, want ErrDamaged", err)
	}
}

// TestWriteAnOlderVersion: a writer asked for version 1 (a queue whose
// members read no newer) writes a file of version 1, without a fence,
// that reads back.
func TestWriteAnOlderVersion(t *testing.T) {
	var buf bytes.Buffer
	w := NewWriter(&buf, 1, testFence)
	recs := sample(10)
	for i := range recs {
		if err := w.Add(&recs[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	got, info, err := readAll(t, "v1", buf.Bytes())
	if err != nil || info.Version != 1 || info.Fenced || !slices.Equal(got, recs) {
		t.Fatalf("a file written at version 1: %+v, %v (%d records)", info, err, len(got))
	}
}
