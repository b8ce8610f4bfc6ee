package replica

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/batonrun/baton/services/queue/internal/format"
)

// An entry's data (an EntryNormal's, but the empty ones a new leader
// appends):
//
//	version      1 byte, format.RaftEntry's
//	member       8 bytes, big-endian: the proposing member's Raft id
//	incarnation  8 bytes: random, chosen when the proposing Node was made
//	seq          8 bytes: the proposal's number in that incarnation
//	records      each a uvarint length and that many bytes, to the end
//
// The incarnation keeps a restarted member, whose sequence starts again at
// 1, from completing today's callers with an entry of its previous life
// that is committed only now.
const entryHeader = 1 + 8 + 8 + 8

// errBadEntry is an entry this package cannot read: a log written by a
// newer version, or damage that the log's checksums did not catch. Every
// member reads the same entry, so none may skip it.
var errBadEntry = errors.New("replica: malformed entry")

// proposalID names one proposal (one entry) among all members' lives.
type proposalID struct {
	member, incarnation, seq uint64
}

// appendEntryHeader starts an entry's data, of version v (the queue's
// level's: format.RaftEntry.Writes).
func appendEntryHeader(b []byte, v format.Version, id proposalID) []byte {
	b = append(b, byte(v))
	b = binary.BigEndian.AppendUint64(b, id.member)
	b = binary.BigEndian.AppendUint64(b, id.incarnation)
	return binary.BigEndian.AppendUint64(b, id.seq)
}

// appendRecord adds one record to an entry's data.
func appendRecord(b, rec []byte) []byte {
	b = binary.AppendUvarint(b, uint64(len(rec)))
	return append(b, rec...)
}

// recordSize is what rec takes in an entry.
func recordSize(rec []byte) int {
	var tmp [binary.MaxVarintLen64]byte
	return binary.PutUvarint(tmp[:], uint64(len(rec))) + len(rec)
}

// decodeEntry splits an entry's data and returns the version of its
// records (the one its version holds). The records alias data.
func decodeEntry(data []byte) (proposalID, format.Version, [][]byte, error) {
	if len(data) < entryHeader {
		return proposalID{}, 0, nil, fmt.Errorf("%w: %d bytes, shorter than the header", errBadEntry, len(data))
	}
	v := format.Version(data[0])
	if err := format.RaftEntry.Check(v); err != nil {
		return proposalID{}, 0, nil, fmt.Errorf("%w: %w", errBadEntry, err)
	}
	id := proposalID{
		member:      binary.BigEndian.Uint64(data[1:]),
		incarnation: binary.BigEndian.Uint64(data[9:]),
		seq:         binary.BigEndian.Uint64(data[17:]),
	}
	var recs [][]byte
	for rest := data[entryHeader:]; len(rest) > 0; {
		n, k := binary.Uvarint(rest)
		if k <= 0 || n > uint64(len(rest)-k) {
			return proposalID{}, 0, nil, fmt.Errorf("%w: record %d's length runs past the entry", errBadEntry, len(recs))
		}
		rest = rest[k:]
		recs = append(recs, rest[:n:n])
		rest = rest[n:]
	}
	return id, format.RaftEntry.RecordsAt(v), recs, nil
}
