// Package checkpoint is the observer's delivery guarantee: every change
// made under a watched prefix reaches its queues, through the observer's
// crashes and restarts and etcd's compactions. It keeps the observer's
// durable progress in etcd: the checkpoint, a revision up to which the
// queue has accepted every change, and beside it the known-key record, the
// etcd keys each watched prefix held at that revision.
//
// # The guarantee
//
// Within one process the informers never miss a change: a broken watch
// resumes at the last observed revision + 1, and a compacted one lists
// again and diffs with the cache (package informer). What a process cannot
// know is what happened while no observer ran, and what its outboxes held
// when it died. Both are recovered at the next start from the checkpoint C:
//
//   - the first list of every prefix announces every object (so whatever a
//     dead outbox held is announced again; the queue collapses keys it
//     already holds);
//   - etcd's history from C + 1 up to that list's revision is replayed, so
//     every delete since C is announced too, with its owners from the
//     previous value;
//   - if etcd has compacted that history, every key of the known-key record
//     that the list no longer has is announced as deleted (package
//     announcer, Vanished): a list alone cannot show a delete, and
//     Kubernetes' informers do the same within one process with
//     DeletedFinalStateUnknown; the record carries it across restarts.
//
// # When the checkpoint advances
//
// The Keeper writes the checkpoint at most once a tick (a second), and only
// when it moved. It is the lowest revision every watched prefix's informer
// has handed on (SafeRevision: 0 until its first list and replay, so a
// prefix of the start being listed holds the checkpoint back), lowered to
// just below the oldest change an outbox still holds (Pending): the
// checkpoint never passes a change the queue has not accepted, so a crash
// loses nothing the next start does not replay. While etcd is idle it
// stays at the last change seen, so idle observers write nothing.
//
// A record written with checkpoint C must hold every key that existed
// under each prefix at C. The Ledger of each prefix (its informer writes
// the cache through it) remembers the keys deleted since the last stored
// checkpoint and the revision from which each new key may have existed, so
// the Keeper knows when the stored record still holds (the checkpoint moves
// alone, Advance) and when it must be rewritten (Write), and never stores a
// checkpoint below a prefix's last list (keys deleted before a list were
// never seen). Records are rate-limited (RecordInterval, and 64 KiB/s of
// record); meanwhile the checkpoint advances up to just below the first key
// the stored record lacks.
//
// # The set of prefixes
//
// Prefixes come and go while the observer runs (controllers declare what
// they watch), and they may come and go all the time: nothing about them
// may stop the checkpoint. At start, a prefix that the stored record does
// not cover was not watched when it was written (it was declared while no
// observer ran): its history since the checkpoint is replayed if etcd
// still holds it, and otherwise it is listed from scratch
// (ErrNotRecorded). So:
//
//   - A prefix added at run time is listed (its backlog, which the next
//     start lists again) and joins the checkpoint once listed: until then
//     nothing under it has been handed on that the checkpoint could pass.
//     (If it lists while the checkpoint is being computed, that tick
//     writes nothing: its list may be below the revisions just read.)
//   - Once listed it bounds the checkpoint like any prefix (SafeRevision),
//     but until a stored record covers it, it does not hold the
//     checkpoint below a key it added: to a start, a prefix the record
//     does not cover is one declared while no observer ran, whatever the
//     checkpoint, so holding it back would gain nothing. It only asks for
//     a record, which takes it in when the rate limit allows (even at the
//     checkpoint already stored, if nothing else moved it), once the
//     record's checkpoint is at or past its list.
//   - A prefix removed leaves the checkpoint and the next record; until
//     then its keys stay in the stored record, which costs at most deletes
//     announced again.
//
// Two observers share the checkpoint safely: it only grows (a
// compare-and-swap on the zero-padded value), each writes only revisions
// it has delivered, and each rewrites the record when the stored one is
// not its own.
//
// # Keys
//
//	/baton/observer/checkpoint              the checkpoint, zero-padded decimal (20 digits)
//	/baton/observer/known                   the record's manifest (JSON, below)
//	/baton/observer/known/<gen>/<c>         chunk c (6 digits) of generation gen
//
// <gen> is the checkpoint the generation was written with (20 digits), a
// dash, the writing process's random id (16 hex digits), a dash and the
// number of its write (6 hex digits), so that chunks being written are
// never those the manifest names, older generations sort before a newer
// checkpoint, and all names are as long. (The first format, still read, kept each
// prefix's chunks apart: <gen>/<p>/<c>, p the prefix's number.)
//
// # Manifest
//
//	{"version": 2, "generation": "…", "checkpoint": 1234,
//	 "index": {"generation": "…", "offset": 181000, "bytes": 900, "raw_bytes": 4100, "sha256": "…"},
//	 "generations": [{"name": "…", "chunks": 1, "chunk_bytes": 262144}, …]}
//
// checkpoint is the revision the record is valid at: every key that
// existed under a prefix at that revision is in it (it may hold more: keys
// deleted since, which only cost a delete announced again). A reader trusts
// the record only as far as that revision; if /baton/observer/checkpoint is
// further on (an observer that keeps no record moved it), keys created
// between the two and deleted since cannot be known, and Read says so.
// generations are those the record's blobs lie in, each a byte stream cut
// into chunks; index is where its index lies, in the newest.
//
// # Blobs
//
// The index is a gzipped JSON array, sorted by prefix, of each prefix's
// blob: {"prefix", "keys", "generation", "offset", "bytes", "raw_bytes"}.
// A prefix's blob is its keys, sorted, without the prefix, front-coded (for
// each: uvarint(bytes shared with the previous key), uvarint(length of the
// rest), the rest), gzipped; the gzip checksum and the counts check it, the
// index's SHA-256 in the manifest checks the index. Pod keys compress to
// about 4.5 bytes each: 40,000 pods take about 175 KB.
//
// A generation's stream is the blobs written with it, one after another,
// then the index, cut into chunks of at most ChunkBytes (256 KiB), each one
// etcd value, well under etcd's 1.5 MiB request limit. So a record costs
// etcd one put per 256 KiB, not one per prefix: a thousand small prefixes
// are one chunk.
//
// # Writes
//
// Write puts the chunks of a new generation (plain puts, each one value),
// then in one transaction, if the stored checkpoint is lower (or, for a
// record this observer owns, equal: a prefix it lacks joins it): sets the
// checkpoint, puts the manifest and deletes every generation below the
// checkpoint that the manifest does not name. The checkpoint and the
// manifest therefore always change together, and a manifest never names
// deleted chunks: a generation is deleted only by a transaction that puts
// a manifest not naming it. Chunks of a transaction that lost the race are
// deleted at once, and those of a crashed writer by the next write.
//
// A record is written incrementally: the new generation holds the blobs of
// the prefixes whose keys changed since the record this observer stored
// (Ledger.Changed) and those it lacks; the others keep their blobs where
// they are (Set.Keep), and their generations stay. That transaction also
// requires the manifest to be this observer's still (compared by mod
// revision): another observer's write deletes the generations it keeps.
// A record that is not this observer's is written whole. Once a record
// keeps maxGenerations (8), the next write keeps the largest only and
// writes the prefixes of the others again, so the generations stay few.
//
// Advance moves the checkpoint (and the manifest's checkpoint) without
// rewriting the record, only while the manifest is still the one this
// Etcd wrote (compared by mod revision): the caller knows whether its
// record is still valid at the new revision, and another observer's is not
// its to vouch for.
package checkpoint
