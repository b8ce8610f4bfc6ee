// Package store makes the queue's records durable: a write-ahead log with
// group commit, snapshots and compaction, in files of its own format.
//
// # Why an own log
//
// MEASURED.md's figures decided it: bbolt commits 585,000 sequential keys/s in
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
//	wal-<seq:016x>.log       log segments, seq increasing by one
//	snap-<seq:016x>.snap     a snapshot; replay segments >= seq after it
//	*.tmp                    an unfinished write, removed at start
//
// epoch is 8 bytes big-endian followed by their CRC-32C (4 bytes), replaced
// atomically (write tmp, fsync, rename, fsync the directory) at every start.
//
// A segment starts with the 8-byte magic "BTNWAL01" and holds frames:
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
// A snapshot starts with the magic "BTNSNP01", then frames as above holding
// Put and Queue records, then the 8-byte footer "BTNSNPEN". It is written as
// a .tmp file, fsynced, renamed, and the directory fsynced; only then are the
// segments it covers and older snapshots removed.
//
// # Recovery
//
// Open loads the newest snapshot, then replays every segment from the
// snapshot's seq on, in order. Records state a key's whole stored state, so
// replay order is all that matters. A frame that fails its length or CRC
// check at the very end of the last segment (no valid frame anywhere after
// it) is a write torn by a crash: it was never fsynced, so no caller was
// answered for it, and the segment is truncated before it. Any other damage
// (a bad frame with data after it, such as a middle frame whose damaged
// length seems to run past the end; a bad frame in an earlier segment or a
// snapshot; a missing segment, counting from 1, or from the snapshot's seq;
// an undecodable record) is corruption: Open fails with an error that names
// the file and byte offset, and the queue refuses to start rather than
// silently drop keys.
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
package store
