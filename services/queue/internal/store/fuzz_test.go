package store

import (
	"bytes"
	"errors"
	"maps"
	"testing"

	"github.com/batonrun/baton/services/queue/internal/format"
	"github.com/batonrun/baton/services/queue/internal/record"

	"github.com/batonrun/baton/services/queue/internal/store/faultfs"
)

// FuzzOpen recovers a log whose last segment holds arbitrary bytes: Open
// must never panic, and either refuse (with ErrCorrupt, or with format's
// ErrNewer or ErrOlder for a header of a version this build does not read,
// which is never taken for damage) or succeed having only cut the
// segment's tail (or rewritten a torn header), leaving a log that recovers
// the same way again.
func FuzzOpen(f *testing.F) {
	disk := faultfs.New(1)
	s, err := Open(faultOpts(disk, 0), func(*record.Record) {})
	if err != nil {
		f.Fatal(err)
	}
	for i, k := range []string{"a", "b", "c"} {
		recs := putRec(nil, k, uint32(i+1))
		if i == 2 {
			recs = delRec(recs, "a")
		}
		b, err := s.Append(recs)
		if err == nil {
			err = b.Wait(f.Context())
		}
		if err != nil {
			f.Fatal(err)
		}
	}
	_ = s.Close()
	valid := disk.Files(faultDir)[segName(1)]
	f.Add(valid)
	f.Add(valid[:len(valid)-3])
	f.Add(append(bytes.Clone(valid), make([]byte, 64)...))
	f.Add(flip(valid, len(walMagic)+1, 0x40))
	f.Add([]byte(walMagic))
	f.Add([]byte(walMagic[:3]))
	f.Add([]byte{})

	f.Fuzz(func(t *testing.T, seg []byte) {
		d := faultfs.NewWith(faultDir, map[string][]byte{segName(1): seg})
		type key struct{ queue, key string }
		replay := func() (map[key]record.Record, error) {
			st := map[key]record.Record{}
			s, err := Open(faultOpts(d, 0), func(r *record.Record) {
				if r.Kind == record.KindDelete {
					delete(st, key{r.Queue, r.Key})
				} else {
					st[key{r.Queue, r.Key}] = *r
				}
			})
			if err != nil {
				return nil, err
			}
			if err := s.Close(); err != nil {
				t.Fatalf("Close: %v", err)
			}
			return st, nil
		}
		first, err := replay()
		if err != nil {
			if !errors.Is(err, ErrCorrupt) && !errors.Is(err, format.ErrNewer) && !errors.Is(err, format.ErrOlder) {
				t.Fatalf("Open = %v, want nil, ErrCorrupt, or ErrNewer or ErrOlder", err)
			}
			return
		}
		after := d.Contents(faultDir + "/" + segName(1))
		if !bytes.HasPrefix(seg, after) && !(string(after) == walMagic && (bytes.HasPrefix([]byte(walMagic), seg) || allZero(seg))) {
			t.Fatalf("Open changed the segment other than by cutting its tail: %q -> %q", seg, after)
		}
		if end := frameOffsets(after); len(after) > len(walMagic) && (len(end) == 0 || !validTo(after, end[len(end)-1])) {
			t.Fatalf("the repaired segment does not end with a whole frame: %q", after)
		}
		again, err := replay()
		if err != nil {
			t.Fatalf("second Open after a successful one: %v", err)
		}
		if !maps.Equal(first, again) {
			t.Fatalf("second recovery differs: %v, then %v", first, again)
		}
	})
}

// validTo reports whether the frame at off is valid and ends the file.
func validTo(b []byte, off int) bool {
	_, n, err := readFrame(b, off)
	return err == nil && off+n == len(b)
}
