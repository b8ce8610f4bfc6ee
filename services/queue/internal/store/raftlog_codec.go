package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"

	"github.com/batonrun/baton/services/queue/internal/field"

	"go.etcd.io/raft/v3/raftpb"
)

// The records of a Raft log frame (doc.go, "The Raft log"). Their kind bytes
// are not the queue's record kinds ('P', 'D', 'Q'), so a frame of one log
// can never decode as the other's even if the magic were ignored.
const (
	raftKindSnapshot  byte = 'S'
	raftKindEntry     byte = 'E'
	raftKindHardState byte = 'H'
)

func appendRaftEntry(dst []byte, e *raftpb.Entry) []byte {
	dst = append(dst, raftKindEntry)
	dst = binary.AppendUvarint(dst, e.Index)
	dst = binary.AppendUvarint(dst, e.Term)
	dst = append(dst, byte(e.Type))
	return field.AppendBytes(dst, e.Data)
}

func appendRaftHardState(dst []byte, hs raftpb.HardState) []byte {
	dst = append(dst, raftKindHardState)
	dst = binary.AppendUvarint(dst, hs.Term)
	dst = binary.AppendUvarint(dst, hs.Vote)
	return binary.AppendUvarint(dst, hs.Commit)
}

// appendRaftSnapshot stores the snapshot's metadata and data; the conf state
// is raft's own protobuf encoding, the one part whose shape (joint
// configurations, learners) belongs to the library.
func appendRaftSnapshot(dst []byte, s *raftpb.Snapshot) []byte {
	cs, err := s.Metadata.ConfState.Marshal()
	if err != nil {
		// ConfState is repeated uint64s and a bool: gogo's generated
		// Marshal has no failing path for it.
		panic(fmt.Sprintf("marshal a conf state: %v", err))
	}
	dst = append(dst, raftKindSnapshot)
	dst = binary.AppendUvarint(dst, s.Metadata.Index)
	dst = binary.AppendUvarint(dst, s.Metadata.Term)
	dst = field.AppendBytes(dst, cs)
	return field.AppendBytes(dst, s.Data)
}

// raftRecord is one decoded record: exactly one of its fields is set, as
// kind says.
type raftRecord struct {
	kind  byte
	entry raftpb.Entry
	hs    raftpb.HardState
	snap  raftpb.Snapshot
}

var errRaftRecord = errors.New("bad raft record")

// decodeRaftRecord decodes one record from the front of src and returns it
// with the bytes it used. Byte slices are copied: the file's buffer is not
// kept alive by the entries that outlive replay.
func decodeRaftRecord(src []byte) (raftRecord, int, error) {
	var r raftRecord
	d := field.NewReader(src, errRaftRecord)
	r.kind = d.Byte()
	switch r.kind {
	case raftKindEntry:
		r.entry.Index = d.Uvarint()
		r.entry.Term = d.Uvarint()
		t := d.Byte()
		if d.Err() == nil && t > byte(raftpb.EntryConfChangeV2) {
			d.Fail(fmt.Sprintf("unknown entry type %d", t))
		}
		r.entry.Type = raftpb.EntryType(t)
		r.entry.Data = raftBytes(&d)
		if d.Err() == nil && r.entry.Index == 0 {
			d.Fail("entry at index 0")
		}
	case raftKindHardState:
		r.hs.Term = d.Uvarint()
		r.hs.Vote = d.Uvarint()
		r.hs.Commit = d.Uvarint()
	case raftKindSnapshot:
		r.snap.Metadata.Index = d.Uvarint()
		r.snap.Metadata.Term = d.Uvarint()
		cs := raftBytes(&d)
		if d.Err() == nil {
			if err := r.snap.Metadata.ConfState.Unmarshal(cs); err != nil {
				d.Fail(fmt.Sprintf("conf state: %v", err))
			}
		}
		r.snap.Data = raftBytes(&d)
		if d.Err() == nil && r.snap.Metadata.Index == 0 {
			d.Fail("snapshot at index 0")
		}
	default:
		d.Fail(fmt.Sprintf("unknown kind %#x", r.kind))
	}
	if d.Err() != nil {
		return raftRecord{}, 0, d.Err()
	}
	return r, d.Off(), nil
}

// raftBytes reads a length-prefixed byte string of any length that fits,
// copied (nil when empty, as raft leaves an empty Data).
func raftBytes(d *field.Reader) []byte {
	b := d.Bytes(math.MaxInt)
	if len(b) == 0 {
		return nil
	}
	return append([]byte(nil), b...)
}
