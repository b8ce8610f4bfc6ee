// Package store makes the queue's records durable: a write-ahead log with
// group commit, snapshots and compaction, in files of its own format.
//
// # Why an own log
//
// Measurements on the project's machine decided it (docs/benchmarks.md,
// "The machine, measured once"): bbolt commits 585,000 sequential keys/s in
// 1,000-key transactions but only 70,800 random keys/s (copy-on-write touches
// many pages), and its db.Batch waits out MaxBatchDelay; the queue's target is
// over a million keys/s in batches. An append-only log costs one sequential
// write and one fdatasync per group of callers, whatever their number, and
// the queue's state is small enough to live in memory and be snapshotted.
//
// # Files
//
// The data directory holds:
//
//	epoch                    the restart epoch (fencing tokens never repeat)
//	clean                    where the log ended at the last clean shutdown
//	lock                     flock(2)ed while a store has the directory open
//	damaged-<time>/          the old files of a log Repair rewrote
//	wal-<seq:016x>.log       log segments, seq increasing by one
//	snap-<seq:016x>.snap     a snapshot; replay segments >= seq after it
//	*.tmp                    an unfinished write, removed at start
//
// epoch is 8 bytes big-endian followed by their CRC-32C (4 bytes), replaced
// atomically (write tmp, fsync, rename, fsync the directory) at every start.
//
// Every file of a log starts with an 8-byte header: a magic naming the kind
// of file and its format version as two digits (package format, which
// keeps the versions of everything the queue writes): "BTNWAL01" is a
// segment of version 1. A version this build does not read is refused,
// naming the file and the versions it reads (format's ErrNewer or
// ErrOlder); it is never taken for damage, which repair would cut away.
//
// A segment starts with the header "BTNWAL01" and holds frames:
//
//	length  uint32 big-endian   bytes of payload
//	crc     uint32 big-endian   CRC-32C (Castagnoli) of payload
//	payload length bytes        records (package record), back to back
//
// One frame is one Append: the records of one operation, written by the
// caller's Append itself, so that a write refused for a full disk is known
// before the operation is let go (see Failures). One writer goroutine makes
// frames durable with fdatasync, many at a time (group commit), and no
// caller is answered before the sync that covers its frame.
//
// A snapshot starts with the header "BTNSNP01", then frames as above holding
// Put and Queue records, then the 8-byte footer "BTNSNPEN". It is written as
// a .tmp file, fsynced, renamed, and the directory fsynced; only then are the
// segments it covers and older snapshots removed.
//
// # Recovery
//
// Open loads the newest snapshot, then replays every segment from the
// snapshot's seq on, in order. Records state a key's whole stored state, so
// replay order is all that matters.
//
// Torn is not corrupt (etcd's WAL draws the same line). A crash can leave
// the end of the last segment torn: frames written since the last completed
// fdatasync may be missing, cut short, or have sectors that read as zeros
// (several frames may be unsynced at once, and the kernel writes their pages
// back in any order). No caller was answered for any of them. So at the
// first bad frame of the last segment, Open repairs the log by cutting it
// there, when that frame is
//
//   - a header cut short, or a header of zeros;
//   - a frame whose length runs past the end of the file, with no valid
//     frame anywhere after it (a crash cannot leave a file longer than a
//     frame it did not finish, so a good frame behind it means its length
//     was damaged);
//   - a frame whose checksum fails and which holds a stretch of at least
//     minZeroRun zeros between two sector boundaries (512 bytes) of the
//     file: a sector never written.
//
// Each such repair is logged at ERROR and counted (Repairs, exported as
// baton_queue_store_repairs_total). A whole frame whose checksum fails
// otherwise, anywhere, is corruption, as is any bad frame in an earlier
// segment or a snapshot, a missing segment (counting from 1, or from the
// snapshot's seq), an undecodable record, and a log shorter than it was at
// its last clean shutdown: Close records the end of the log in the file
// "clean" (seq and size, with their CRC-32C), and since a torn write can
// never reach back before what a clean shutdown synced, a segment found
// shorter is refused rather than repaired. On corruption Open fails with an
// error that names the file and byte offset, and the queue refuses to start
// rather than silently drop keys; Repair (`baton-queue repair`) is the
// operator's explicit way past it, and reports every key the damage held.
//
// Open takes an exclusive flock(2) on the file "lock" for as long as the
// store is open, so neither a second queue nor Repair can use the
// directory at the same time.
//
// # Snapshots while serving
//
// A snapshot needs no pause: the caller rotates to a new segment first, then
// walks its in-memory state. Every change made after the rotation is also in
// the new segment, and replaying it over the snapshot ends in the same state
// whichever side of the walk a change fell on.
//
// # Failures
//
// A write that runs out of space (ENOSPC) fails its Append with ErrNoSpace:
// whatever part of the frame reached the file is cut away again, and the
// caller undoes what the records describe before anyone can see it (the
// broker rolls back the operation), so nothing of the refused change exists
// in memory or on disk, and the store goes on: the next Append tries again.
// The cut is made durable by the next sync; a rotation syncs the segment
// first even when no frame follows the cut, since a torn tail is only
// tolerated in the last segment.
//
// Any other write error, and any fsync error, stops the store for good
// (fail-stop): after a failed fsync the kernel may have dropped the dirty
// pages, so retrying could report data as safe that is not. The callers of
// that sync get ErrStopped without knowing whether their change is stored;
// the process restarts and recovery reads what the disk holds.
//
// # The Raft log
//
// A member of the replicated queue keeps its Raft state in a RaftLog
// (raftlog.go): etcd's design of a raft.MemoryStorage that the node reads
// and a write-ahead log that rebuilds it at start, with this package's
// frames as that log. It lives here, not in internal/replica, because it is
// this log with other payloads: the same FS, the same frames and torn-tail
// rules (tornAt, the "clean" floor), the same failure semantics, and the
// same fault-injecting disk in its tests. It shares no code path with
// Store: a single member's log, its format and its recovery are unchanged.
//
// It has a directory of its own, holding:
//
//	lock                     flock(2)ed while the log is open
//	clean                    where the log ended at the last clean shutdown
//	raft-<seq:016x>.log      segments, seq increasing by one
//	*.tmp                    an unfinished write, removed at start
//
// A segment starts with the header "BTNRFT01" (not "BTNWAL01") and holds
// frames exactly as above (length, CRC-32C, payload). A frame's payload is
// Raft records back to back, uvarint integers and uvarint-length-prefixed
// bytes:
//
//	Snapshot:  'S' index term len conf_state len data   (conf_state: raftpb.ConfState's protobuf)
//	Entry:     'E' index term type len data             (type: raftpb.EntryType, 0 to 2)
//	HardState: 'H' term vote commit
//
// Their kinds are not the queue records' ('P', 'D', 'Q'), and neither log
// opens the other's files: OpenRaftLog refuses a directory holding an epoch,
// wal- or snap- file (ErrNotRaftDir) and a segment with the single member's
// magic; Store reads only wal- and snap- files. The two must still be given
// different directories: a Store opened on a Raft log's directory finds no
// log of its own and starts an empty one.
//
// Save is one Ready: its snapshot, entries and hard state in that order in
// one frame, one write(2) and one fdatasync, and only then applied to the
// MemoryStorage, so the node never reads, sends or applies what the disk
// does not hold. An entry at index i replaces every entry from i on (a new
// leader's log wins over an uncommitted suffix): nothing is truncated in
// place, the later frame simply supersedes, on replay as in memory.
//
// CreateSnapshot(index, conf state, data) compacts: it writes a new segment
// that stands alone, a base, whose first frame holds the snapshot, the
// entries after index and the hard state; syncs it and the directory; and
// only then removes the older segments and drops the entries up to index
// from memory. OpenRaftLog replays from the newest base (or from segment 1
// when there is none), so a crash between the sync and the removals leaves
// older segments that Open removes. A snapshot that a leader sent arrives
// through Save, and is simply the first record of its frame: replay applies
// it over whatever came before.
//
// Recovery replays frames into the MemoryStorage as Save applied them.
// A torn tail of the last segment (a frame cut short, a header of zeros, a
// sector of zeros) is cut away and counted (Repairs), as for Store; any
// other bad frame, a missing segment, a record that does not decode or that
// Save would have refused (an entry that leaves a gap, an out-of-date
// snapshot), a commit index past the last entry, or a segment shorter than
// at its clean shutdown is ErrCorrupt, naming the file and offset.
//
// Failures as for Store: ENOSPC cuts the frame's written part away and
// returns ErrNoSpace with nothing changed, on disk or in memory (the Ready
// loop may retry the same Save); any other write error and any fdatasync
// error stop the log for good (ErrStopped, fail-stop).
package store
