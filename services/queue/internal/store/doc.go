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
package store
