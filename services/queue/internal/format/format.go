// Package format is the one place the versions of what the queue writes
// live: every encoding of its own, on disk or on the wire between
// members, has a Format here with the version this build writes and the
// oldest it still reads (etcd's server/storage/schema plays this part for
// etcd). A reader checks a version it meets with Check: an older one it
// reads is read as that version, a newer one is refused with an error that
// names the format, the version met and the versions this build reads,
// never taken for corruption. A change to an encoding raises its Current
// and keeps the reader of the one before (Oldest stays), and the fixtures
// under testdata/, written by a build of every version since the first,
// are read by every later build (compat_test.go).
//
// # Formats
//
//	Records        one key's stored state (package record): the fields of
//	               its kind, in the container's record version
//	WALSegment     a single member's log segment: header "BTNWAL" and two
//	               decimal digits, then CRC-framed records (package record)
//	WALSnapshot    a single member's snapshot: header "BTNSNP" and two
//	               digits, the same frames, footer "BTNSNPEN"
//	RaftSegment    a replicated member's Raft log segment: header "BTNRFT"
//	               and two digits, then CRC-framed entries and states
//	RaftEntry      the data of a Raft entry: its first byte
//	RaftSnapshot   the data of a Raft snapshot (members, then the queue's
//	               records): its first byte
//	Backup         a backup file (package backup): header "BTNBAK" and two
//	               digits; version 2 adds the fence (the highest token
//	               epoch and token) after the header
//	IDFile         an id file of a replicated member's raft/ directory
//	               (package idfile: member-id, cluster-id,
//	               forced-cluster-id): version 1 the id as hex text alone,
//	               version 2 header "BTNIDF" and two digits, the id and its
//	               CRC-32C
//
// The context of a configuration change (replica's confctx.go) is text of
// space-separated fields in a Raft conf-change entry, whose readers skip a
// field they do not know: a new field needs no version, and a change to
// an existing field's meaning would be a new field.
//
// Records (package record) have a version of their own (Records), which
// the record codec takes as an argument, but never carry it: they only
// ever appear inside a container (a log segment, a snapshot, a Raft entry
// or snapshot, a backup), whose version says which record version it
// holds (Format.RecordsAt). The containers that hold records are one
// group (Containers) and move together: a new record version is a new
// version of each of them, holding it, so that every reader learns the
// records' version from its container's header and hands it down to the
// codec, and a writer writes records of the version its container holds.
// The messages members exchange over gRPC (raftpb messages,
// Join, Publish) are protobuf, which evolves by its own rules (new fields,
// never renumbered: buf breaking checks the contract). The other small
// files of a data directory (epoch, clean) are fixed encodings that are
// refused when they do not read, as corruption; a change to one is a
// new file name, or a Format here, as the id files have (their first
// version had no header: a file without one is read as version 1).
//
// Writing a new version is only safe once every member reads it: a
// leader that wrote a new entry format while a member of the previous
// release follows would stop that member (its reader refuses the entry).
package format

import (
	"errors"
	"fmt"
)

// Level names the set of format versions a build reads: a build of level
// L reads every version up to Writes(L) of every format. A replicated
// queue's leader writes each format at the level of the queue, the lowest
// of its voting members' (replica tracks it), so a member one release
// behind can always read what the leader writes, and a new version is
// written only once every member reads it.
type Level uint32

// BuildLevel is this build's level.
const BuildLevel Level = 1

// Version is an encoding's version, counted from 1.
type Version uint8

// Format is one encoding the queue writes.
type Format struct {
	// Name says what it is, in errors.
	Name string
	// Current is the version this build writes.
	Current Version
	// Oldest is the oldest version this build reads.
	Oldest Version
	// Since gives, for each version from Oldest, the level from which it
	// is written (Since[v-Oldest]); nil: Current at every level.
	Since []Level
	// Records gives, for a container of records (Containers), the record
	// version each of its versions from Oldest holds (Records[v-Oldest]);
	// nil for a format that holds no records.
	Records []Version
}

// RecordsAt is the version of the records a container of f at version v
// holds; v must be one this build reads (Check).
func (f Format) RecordsAt(v Version) Version {
	if f.Records == nil || v < f.Oldest || int(v-f.Oldest) >= len(f.Records) {
		panic(fmt.Sprintf("format: %s version %d holds no records this build knows", f.Name, v))
	}
	return f.Records[v-f.Oldest]
}

// Writes is the version of f to write at level l: the newest whose level
// l has reached, never past Current.
func (f Format) Writes(l Level) Version {
	if f.Since == nil {
		return f.Current
	}
	v := f.Oldest
	for i, from := range f.Since {
		if l >= from {
			v = f.Oldest + Version(i)
		}
	}
	return min(v, f.Current)
}

// Holding is the version of container f to write records of version
// records in at level l: the newest that l writes (no newer than
// f.Writes(l)) holding them. false if none does: records newer than the
// level, which no writer at that level may make.
func (f Format) Holding(records Version, l Level) (Version, bool) {
	for v := f.Writes(l); v >= f.Oldest && v > 0; v-- {
		if f.RecordsAt(v) == records {
			return v, true
		}
	}
	return 0, false
}

// The formats, with the versions this build writes and reads. A new
// record version is a new version of every container (Containers), its
// Records entry naming the record version it holds: see
// TestContainersMoveTogether.
var (
	Records      = Format{Name: "record", Current: 1, Oldest: 1}
	WALSegment   = Format{Name: "log segment", Current: 1, Oldest: 1, Records: []Version{1}}
	WALSnapshot  = Format{Name: "snapshot", Current: 1, Oldest: 1, Records: []Version{1}}
	RaftSegment  = Format{Name: "raft log segment", Current: 1, Oldest: 1}
	RaftEntry    = Format{Name: "raft entry", Current: 1, Oldest: 1, Records: []Version{1}}
	RaftSnapshot = Format{Name: "raft snapshot", Current: 2, Oldest: 1, Records: []Version{1, 1}}
	Backup       = Format{Name: "backup", Current: 2, Oldest: 1, Records: []Version{1, 1}}
	IDFile       = Format{Name: "id file", Current: 2, Oldest: 1}
)

// Containers are the formats that hold records, which move with them.
var Containers = []Format{WALSegment, WALSnapshot, RaftEntry, RaftSnapshot, Backup}

// All is every format, for tests and for `version` output.
var All = []Format{Records, WALSegment, WALSnapshot, RaftSegment, RaftEntry, RaftSnapshot, Backup, IDFile}

var (
	// ErrNewer is returned for bytes written by a newer build than this
	// one reads: run that build (or a later one) on them.
	ErrNewer = errors.New("format: written by a newer version than this build reads")
	// ErrOlder is returned for bytes of a version this build no longer
	// reads: run a build that reads both and writes a newer one first.
	ErrOlder = errors.New("format: written by an older version than this build reads")
)

// Check returns nil if this build reads version v of f, else ErrNewer or
// ErrOlder naming f, v and the versions it reads.
func (f Format) Check(v Version) error {
	switch {
	case v > f.Current:
		return fmt.Errorf("%w: %s version %d, this build reads %s", ErrNewer, f.Name, v, f.reads())
	case v < f.Oldest:
		return fmt.Errorf("%w: %s version %d, this build reads %s", ErrOlder, f.Name, v, f.reads())
	}
	return nil
}

func (f Format) reads() string {
	if f.Oldest == f.Current {
		return fmt.Sprintf("version %d", f.Current)
	}
	return fmt.Sprintf("versions %d to %d", f.Oldest, f.Current)
}

// HeaderLen is the length of a file header: a six-byte magic naming the
// kind of file, and the version as two decimal digits ("BTNWAL01").
const HeaderLen = 8

// Header is the header of a file of f at version v under magic, which is
// six bytes.
func Header(magic string, v Version) []byte {
	if len(magic) != HeaderLen-2 || v > 99 {
		panic(fmt.Sprintf("format: header %q version %d", magic, v))
	}
	return fmt.Appendf(nil, "%s%02d", magic, v)
}

// ErrNotHeader is ParseHeader's for bytes that are not a header of the
// magic asked for.
var ErrNotHeader = errors.New("format: not a header")

// ParseHeader reads the version of a header of magic at the start of b:
// ErrNotHeader if b does not start with one (too short, another magic, no
// digits), else f.Check's error for a version this build does not read.
func ParseHeader(b []byte, magic string, f Format) (Version, error) {
	if len(b) < HeaderLen || string(b[:len(magic)]) != magic {
		return 0, ErrNotHeader
	}
	d1, d2 := b[HeaderLen-2], b[HeaderLen-1]
	if d1 < '0' || d1 > '9' || d2 < '0' || d2 > '9' {
		return 0, ErrNotHeader
	}
	v := Version((d1-'0')*10 + d2 - '0')
	if v == 0 {
		return 0, ErrNotHeader
	}
	return v, f.Check(v)
}
