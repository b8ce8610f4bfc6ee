package store

import (
	"encoding/binary"
	"errors"
	"fmt"

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
	dst = binary.AppendUvarint(dst, uint64(len(e.Data)))
	return append(dst, e.Data...)
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
	dst = binary.AppendUvarint(dst, uint64(len(cs)))
	dst = append(dst, cs...)
	dst = binary.AppendUvarint(dst, uint64(len(s.Data)))
	return append(dst, s.Data...)
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
	d := raftDecoder{b: src}
	r.kind = d.byte()
	switch r.kind {
	case raftKindEntry:
		r.entry.Index = d.uvarint()
		r.entry.Term = d.uvarint()
		t := d.byte()
		if d.err == nil && t > byte(raftpb.EntryConfChangeV2) {
			d.fail(fmt.Sprintf("unknown entry type %d", t))
		}
		r.entry.Type = raftpb.EntryType(t)
		r.entry.Data = d.bytes()
		if d.err == nil && r.entry.Index == 0 {
			d.fail("entry at index 0")
		}
	case raftKindHardState:
		r.hs.Term = d.uvarint()
		r.hs.Vote = d.uvarint()
		r.hs.Commit = d.uvarint()
	case raftKindSnapshot:
		r.snap.Metadata.Index = d.uvarint()
		r.snap.Metadata.Term = d.uvarint()
		cs := d.bytes()
		if d.err == nil {
			if err := r.snap.Metadata.ConfState.Unmarshal(cs); err != nil {
				d.fail(fmt.Sprintf("conf state: %v", err))
			}
		}
		r.snap.Data = d.bytes()
		if d.err == nil && r.snap.Metadata.Index == 0 {
			d.fail("snapshot at index 0")
		}
	default:
		d.fail(fmt.Sprintf("unknown kind %#x", r.kind))
	}
	if d.err != nil {
		return raftRecord{}, 0, d.err
	}
	return r, d.off, nil
}

type raftDecoder struct {
	b   []byte
	off int
	err error
}

func (d *raftDecoder) fail(why string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s at byte %d", errRaftRecord, why, d.off)
	}
}

func (d *raftDecoder) byte() byte {
	if d.err != nil {
		return 0
	}
	if d.off >= len(d.b) {
		d.fail("truncated")
		return 0
	}
	c := d.b[d.off]
	d.off++
	return c
}

func (d *raftDecoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b[d.off:])
	if n <= 0 {
		d.fail("bad varint")
		return 0
	}
	d.off += n
	return v
}

func (d *raftDecoder) bytes() []byte {
	n := d.uvarint()
	if d.err != nil {
		return nil
	}
	if n > uint64(len(d.b)-d.off) {
		d.fail("length out of range")
		return nil
	}
	var out []byte
	if n > 0 {
		out = append([]byte(nil), d.b[d.off:d.off+int(n)]...)
	}
	d.off += int(n)
	return out
}
