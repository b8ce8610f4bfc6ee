// Package checkpoint keeps the observer's durable progress in etcd: the
// checkpoint, a revision up to which the queue has accepted every change,
// and beside it the known-key record, the etcd keys each watched prefix
// held at that revision. A starting observer replays etcd's history from
// the checkpoint; when etcd has compacted that history, it announces as
// deleted every recorded key that its fresh list no longer has, which a
// list alone cannot show (Kubernetes' informers do the same within one
// process with DeletedFinalStateUnknown; the record carries it across
// restarts).
//
// # Keys
//
//	/baton/observer/checkpoint              the checkpoint, zero-padded decimal (20 digits)
//	/baton/observer/known                   the record's manifest (JSON, below)
//	/baton/observer/known/<gen>/<p>/<c>     chunk c (6 digits) of prefix number p (3 digits)
//
// <gen> is the checkpoint the record was written with (20 digits), a dash
// and the writing process's random id (16 hex digits), so that chunks being
// written are never those the manifest names, and older generations sort
// before a newer checkpoint.
//
// # Manifest
//
//	{"version": 1, "generation": "…", "checkpoint": 1234,
//	 "prefixes": [{"prefix": "/registry/pods/", "keys": 40000, "chunks": 1,
//	               "bytes": 221000, "raw_bytes": 610000, "sha256": "…"}]}
//
// checkpoint is the revision the record is valid at: every key that
// existed under a prefix at that revision is in it (it may hold more: keys
// deleted since, which only cost a delete announced again). A reader trusts
// the record only as far as that revision; if /baton/observer/checkpoint is
// further on (an observer that keeps no record moved it), keys created
// between the two and deleted since cannot be known, and Read says so.
//
// # Chunks
//
// A prefix's keys, sorted, without the prefix, are front-coded: for each,
// uvarint(bytes shared with the previous key), uvarint(length of the rest),
// the rest. The stream is gzipped and cut into chunks of at most ChunkBytes
// (256 KiB), each one etcd value, well under etcd's 1.5 MiB request limit.
// sha256 covers the compressed bytes; raw_bytes bounds the decompression.
// Pod keys compress to about 4.5 bytes each: 40,000 pods take about
// 175 KB, one chunk.
//
// # Writes
//
// Write puts the chunks of a new generation (plain puts, each one value),
// then in one transaction, if the stored checkpoint is lower: sets the
// checkpoint, puts the manifest and deletes every generation with a lower
// checkpoint. The checkpoint and the manifest therefore always change
// together, and a manifest never names deleted chunks: a generation is
// deleted only by a transaction that replaces the manifest with a newer
// one. Chunks of a transaction that lost the race are deleted at once, and
// those of a crashed writer by the next write.
//
// Advance moves the checkpoint (and the manifest's checkpoint) without
// rewriting the record, only while the manifest is still the one this
// Store wrote (compared by mod revision): the caller knows whether its
// record is still valid at the new revision, and another observer's is not
// its to vouch for.
package checkpoint
