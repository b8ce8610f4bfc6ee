package etcdraft

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"sync/atomic"
	"syscall"

	"go.etcd.io/raft/v3/raftpb"
)

// diskLog is the member's durable Raft log: one append-only file of frames
// (length, CRC-32C, a type byte and a marshalled raftpb.Entry or
// raftpb.HardState), the shape internal/store's segments already have.
//
// Why not etcd's WAL (go.etcd.io/etcd/server/v3/storage/wal): it would do,
// but it drags etcd's server module into the comparison, and the question
// this spike has to answer for the queue is whether our own log can be the
// Raft log; a hundred lines of ours answer it, the WAL would hide it. Both
// make one write(2) per Ready and one fdatasync when Ready.MustSync.
//
// No snapshots and no compaction: the spike's runs are short, and
// hashiraft has its snapshots turned off too. The replicated queue needs
// both (see docs/queue.md).
type diskLog struct {
	f       *os.File
	buf     []byte
	syncs   atomic.Uint64
	entries atomic.Uint64
}

const (
	frameEntry byte = 1
	frameState byte = 2
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// openDiskLog opens (or creates) path and replays it: the last HardState and
// the entries as they stand after every overwrite. A torn tail (a frame cut
// short or failing its checksum at the end, from a kill during a write) is
// cut away; nothing in it was acknowledged, since no message leaves before
// its Ready's write is synced.
func openDiskLog(path string) (*diskLog, raftpb.HardState, []raftpb.Entry, error) {
	var hs raftpb.HardState
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, hs, nil, err
	}
	data, err := io.ReadAll(f)
	if err != nil {
		f.Close()
		return nil, hs, nil, err
	}
	var ents []raftpb.Entry
	off := 0
	for off+9 <= len(data) {
		n := int(binary.BigEndian.Uint32(data[off:]))
		if n < 1 || off+8+n > len(data) || crc32.Checksum(data[off+8:off+8+n], castagnoli) != binary.BigEndian.Uint32(data[off+4:]) {
			break
		}
		payload := data[off+9 : off+8+n]
		switch data[off+8] {
		case frameState:
			if err := hs.Unmarshal(payload); err != nil {
				f.Close()
				return nil, hs, nil, fmt.Errorf("%s at %d: %w", path, off, err)
			}
		case frameEntry:
			var e raftpb.Entry
			if err := e.Unmarshal(payload); err != nil {
				f.Close()
				return nil, hs, nil, fmt.Errorf("%s at %d: %w", path, off, err)
			}
			// An entry at index i replaces every entry from i on (a new
			// leader overwrote an uncommitted suffix).
			if len(ents) > 0 && e.Index <= ents[len(ents)-1].Index {
				if e.Index < ents[0].Index {
					ents = ents[:0]
				} else {
					ents = ents[:e.Index-ents[0].Index]
				}
			}
			if len(ents) > 0 && e.Index != ents[len(ents)-1].Index+1 {
				f.Close()
				return nil, hs, nil, fmt.Errorf("%s at %d: entry %d after %d", path, off, e.Index, ents[len(ents)-1].Index)
			}
			ents = append(ents, e)
		default:
			f.Close()
			return nil, hs, nil, fmt.Errorf("%s at %d: frame type %d", path, off, data[off+8])
		}
		off += 8 + n
	}
	if off < len(data) {
		if err := f.Truncate(int64(off)); err != nil {
			f.Close()
			return nil, hs, nil, err
		}
	}
	if _, err := f.Seek(int64(off), io.SeekStart); err != nil {
		f.Close()
		return nil, hs, nil, err
	}
	return &diskLog{f: f}, hs, ents, nil
}

func (l *diskLog) frame(typ byte, size int, marshal func([]byte) (int, error)) error {
	start := len(l.buf)
	l.buf = append(l.buf, make([]byte, 9+size)...)
	if _, err := marshal(l.buf[start+9:]); err != nil {
		return err
	}
	l.buf[start+8] = typ
	binary.BigEndian.PutUint32(l.buf[start:], uint32(1+size))
	binary.BigEndian.PutUint32(l.buf[start+4:], crc32.Checksum(l.buf[start+8:], castagnoli))
	return nil
}

// save writes one Ready's entries and hard state with one write(2), and
// fdatasyncs when the Ready says it must (new entries, a new term or vote;
// a commit index alone may be lost and is learnt again from the leader).
func (l *diskLog) save(hs raftpb.HardState, ents []raftpb.Entry, mustSync bool) error {
	l.buf = l.buf[:0]
	for i := range ents {
		e := &ents[i]
		if err := l.frame(frameEntry, e.Size(), e.MarshalTo); err != nil {
			return err
		}
	}
	if hs.Term != 0 || hs.Vote != 0 || hs.Commit != 0 {
		if err := l.frame(frameState, hs.Size(), hs.MarshalTo); err != nil {
			return err
		}
	}
	if len(l.buf) == 0 {
		return nil
	}
	if _, err := l.f.Write(l.buf); err != nil {
		return err
	}
	l.entries.Add(uint64(len(ents)))
	if !mustSync {
		return nil
	}
	l.syncs.Add(1)
	return syscall.Fdatasync(int(l.f.Fd()))
}

// close drops the file without a sync: what a kill leaves is what the
// kernel has, as after SIGKILL.
func (l *diskLog) close() error {
	err := l.f.Close()
	if errors.Is(err, os.ErrClosed) {
		return nil
	}
	return err
}
