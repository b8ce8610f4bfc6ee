package replica

import (
	"errors"
	"slices"
	"testing"

	"github.com/batonrun/baton/services/queue/internal/format"
)

// TestEntryRoundTrip: records, empty ones and none among them, come back
// as written with the proposal id; a cut or foreign entry is refused.
func TestEntryRoundTrip(t *testing.T) {
	id := proposalID{member: 3, incarnation: 0xfeedface, seq: 42}
	for _, recs := range [][][]byte{nil, {{}}, {[]byte("a"), {}, make([]byte, 300)}} {
		data := appendEntryHeader(nil, format.RaftEntry.Current, id)
		size := entryHeader
		for _, r := range recs {
			data = appendRecord(data, r)
			size += recordSize(r)
		}
		if len(data) != size {
			t.Fatalf("entry of %d bytes, recordSize says %d", len(data), size)
		}
		gotID, v, got, err := decodeEntry(data)
		if err != nil || gotID != id || v != format.RaftEntry.RecordsAt(format.RaftEntry.Current) || len(got) != len(recs) {
			t.Fatalf("decode: %v %v %d records, want %v %d", err, gotID, len(got), id, len(recs))
		}
		for i := range recs {
			if !slices.Equal(got[i], recs[i]) {
				t.Fatalf("record %d: %q, want %q", i, got[i], recs[i])
			}
		}
	}
	good := appendRecord(appendEntryHeader(nil, format.RaftEntry.Current, id), []byte("record"))
	for name, data := range map[string][]byte{
		"short header":   good[:entryHeader-1],
		"cut record":     good[:len(good)-1],
		"newer version":  append([]byte{byte(format.RaftEntry.Current + 1)}, good[1:]...),
		"length overrun": append(appendEntryHeader(nil, format.RaftEntry.Current, id), 0xff, 0xff, 0xff, 0xff, 0x0f),
	} {
		if _, _, _, err := decodeEntry(data); !errors.Is(err, errBadEntry) {
			t.Errorf("%s: %v, want errBadEntry", name, err)
		}
	}
	// A newer version is named as one, with the versions this build reads.
	if _, _, _, err := decodeEntry(append([]byte{byte(format.RaftEntry.Current + 1)}, good[1:]...)); !errors.Is(err, format.ErrNewer) {
		t.Errorf("an entry of the next version: %v, want format.ErrNewer", err)
	}
}
