package checkpoint

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// The observer's keys in etcd (see the package documentation).
const (
	// Key holds the checkpoint.
	Key = "/baton/observer/checkpoint"
	// RecordKey holds the known-key record's manifest.
	RecordKey = "/baton/observer/known"
	// Root is under every key the observer writes; rules may not watch it.
	Root = "/baton/observer/"

	chunkRoot     = RecordKey + "/"
	formatVersion = 1
)

// Set is the keys of one prefix, sorted and unique.
type Set struct {
	Prefix string
	Keys   []string
}

// manifest is the record's manifest as stored.
type manifest struct {
	Version    int           `json:"version"`
	Generation string        `json:"generation"`
	Checkpoint int64         `json:"checkpoint"`
	Prefixes   []prefixEntry `json:"prefixes"`
}

type prefixEntry struct {
	Prefix   string `json:"prefix"`
	Keys     int    `json:"keys"`
	Chunks   int    `json:"chunks"`
	Bytes    int    `json:"bytes"`
	RawBytes int    `json:"raw_bytes"`
	SHA256   string `json:"sha256"`
}

// Record is what Read found for one prefix.
type Record struct {
	// Keys were under the prefix at Revision (and maybe some more).
	Keys []string
	// Revision is the checkpoint the record was written with.
	Revision int64
	// Checkpoint is the stored checkpoint when it was read; a Checkpoint
	// above Revision means an observer that keeps no record moved it.
	Checkpoint int64
}

// Store reads and writes the checkpoint and the record. It is not safe for
// concurrent use: one goroutine (the observer's ticker) writes.
type Store struct {
	cli        *clientv3.Client
	id         string // this process's part of generation names
	chunkBytes int    // ChunkBytes; tests make it small

	mine int64    // mod revision of the manifest this Store last wrote (0: none)
	last manifest // that manifest
}

// NewStore returns a Store for the observer's keys in cli's etcd.
func NewStore(cli *clientv3.Client) *Store {
	return &Store{cli: cli, id: fmt.Sprintf("%016x", rand.Uint64()), chunkBytes: ChunkBytes}
}

func pad(rev int64) string { return fmt.Sprintf("%020d", rev) }

func chunkKey(gen string, prefix, chunk int) string {
	return fmt.Sprintf("%s%s/%03d/%06d", chunkRoot, gen, prefix, chunk)
}

// ErrMalformed is returned by Checkpoint for a stored value that is not a
// checkpoint.
var ErrMalformed = errors.New("checkpoint: stored checkpoint is not a revision")

func parseCheckpoint(v []byte) (int64, error) {
	c, err := strconv.ParseInt(string(v), 10, 64)
	if err != nil || c < 0 {
		return 0, fmt.Errorf("%w: %q", ErrMalformed, v)
	}
	return c, nil
}

// Checkpoint returns the stored checkpoint (0 if there is none yet).
func (s *Store) Checkpoint(ctx context.Context) (int64, error) {
	resp, err := s.cli.Get(ctx, Key)
	if err != nil {
		return 0, fmt.Errorf("read checkpoint: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return 0, nil
	}
	return parseCheckpoint(resp.Kvs[0].Value)
}

// ErrNotRecorded is returned by ReadPrefix when a record is stored but
// does not cover the prefix: the prefix was not watched when it was
// written (it was added since, e.g. by a controller's declaration).
var ErrNotRecorded = errors.New("checkpoint: the known-key record does not cover the prefix")

// Read returns the record of prefix, or nil if there is none for it (no
// record written yet, e.g. by an older observer, or not for this prefix).
// The manifest, the checkpoint and the chunks are read at one revision.
func (s *Store) Read(ctx context.Context, prefix string) (*Record, error) {
	rec, err := s.ReadPrefix(ctx, prefix)
	if errors.Is(err, ErrNotRecorded) {
		return nil, nil
	}
	return rec, err
}

// ReadPrefix is Read, telling a record that does not cover prefix
// (ErrNotRecorded) from no record at all (nil, nil).
func (s *Store) ReadPrefix(ctx context.Context, prefix string) (*Record, error) {
	tr, err := s.cli.Txn(ctx).Then(clientv3.OpGet(Key), clientv3.OpGet(RecordKey)).Commit()
	if err != nil {
		return nil, fmt.Errorf("read known-key record: %w", err)
	}
	rev := tr.Header.Revision
	ck, mk := tr.Responses[0].GetResponseRange().GetKvs(), tr.Responses[1].GetResponseRange().GetKvs()
	if len(mk) == 0 {
		return nil, nil
	}
	var m manifest
	if err := json.Unmarshal(mk[0].Value, &m); err != nil {
		return nil, fmt.Errorf("%w: manifest: %v", ErrCorrupt, err)
	}
	if m.Version != formatVersion {
		return nil, fmt.Errorf("%w: manifest version %d, this observer reads %d", ErrCorrupt, m.Version, formatVersion)
	}
	rec := &Record{Revision: m.Checkpoint}
	if len(ck) > 0 {
		// A malformed checkpoint reads as none, as Checkpoint's caller
		// takes it.
		rec.Checkpoint, _ = parseCheckpoint(ck[0].Value)
	}
	idx := -1
	for i, p := range m.Prefixes {
		if p.Prefix == prefix {
			idx = i
		}
	}
	if idx < 0 {
		return nil, fmt.Errorf("%w: %s (record at revision %d)", ErrNotRecorded, prefix, m.Checkpoint)
	}
	p := m.Prefixes[idx]
	data := make([]byte, 0, p.Bytes)
	for c := range p.Chunks {
		resp, err := s.cli.Get(ctx, chunkKey(m.Generation, idx, c), clientv3.WithRev(rev))
		if err != nil {
			return nil, fmt.Errorf("read known-key record chunk %d of %s: %w", c, prefix, err)
		}
		if len(resp.Kvs) == 0 {
			return nil, fmt.Errorf("%w: chunk %d of %s is missing", ErrCorrupt, c, prefix)
		}
		data = append(data, resp.Kvs[0].Value...)
	}
	if sum := sha256.Sum256(data); hex.EncodeToString(sum[:]) != p.SHA256 || len(data) != p.Bytes {
		return nil, fmt.Errorf("%w: checksum of %s", ErrCorrupt, prefix)
	}
	if rec.Keys, err = decode(prefix, data, p.Keys, p.RawBytes); err != nil {
		return nil, fmt.Errorf("%s: %w", prefix, err)
	}
	return rec, nil
}

// Outcome says what a Write or Advance did.
type Outcome int

const (
	// Written: the checkpoint (and, by Write, the record) is stored.
	Written Outcome = iota
	// Behind: the stored checkpoint is already at or past the revision;
	// nothing was stored (another observer is ahead).
	Behind
	// NotMine: the stored record is not the one this Store last wrote (or
	// it never wrote one); Advance cannot vouch for it, Write must.
	NotMine
)

// Owns reports whether the stored manifest was, when last looked at, the
// one this Store wrote.
func (s *Store) Owns() bool { return s.mine != 0 }

// Write stores sets as the record valid at rev and the checkpoint rev, if
// the stored checkpoint is lower. sets is called only when the write is
// going ahead. It returns the bytes written (chunks and manifest) too.
func (s *Store) Write(ctx context.Context, rev int64, sets func() []Set) (Outcome, int, error) {
	v := pad(rev)
	cur, err := s.cli.Get(ctx, Key)
	if err != nil {
		return 0, 0, fmt.Errorf("read checkpoint: %w", err)
	}
	if len(cur.Kvs) > 0 && string(cur.Kvs[0].Value) >= v {
		return Behind, 0, nil
	}
	gen := v + "-" + s.id
	m := manifest{Version: formatVersion, Generation: gen, Checkpoint: rev}
	written := 0
	for i, set := range sets() {
		data, raw, err := encode(set.Prefix, set.Keys)
		if err != nil {
			return 0, written, err
		}
		chunks := split(data, s.chunkBytes)
		for c, chunk := range chunks {
			if _, err := s.cli.Put(ctx, chunkKey(gen, i, c), string(chunk)); err != nil {
				return 0, written, fmt.Errorf("write known-key record chunk: %w", err)
			}
			written += len(chunk)
		}
		sum := sha256.Sum256(data)
		m.Prefixes = append(m.Prefixes, prefixEntry{Prefix: set.Prefix, Keys: len(set.Keys), Chunks: len(chunks),
			Bytes: len(data), RawBytes: raw, SHA256: hex.EncodeToString(sum[:])})
	}
	mj, err := json.Marshal(m)
	if err != nil {
		return 0, written, err
	}
	written += len(mj)
	ops := []clientv3.Op{
		clientv3.OpPut(Key, v),
		clientv3.OpPut(RecordKey, string(mj)),
		// Every older generation: the manifest just put names none of them.
		clientv3.OpDelete(chunkRoot, clientv3.WithRange(chunkRoot+v)),
	}
	tr, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.Value(Key), "<", v)).
		Then(ops...).
		Else(clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(Key), "=", 0)}, ops, nil)).
		Commit()
	if err != nil {
		// The transaction may have been applied: its chunks are left to the
		// next write's clean-up rather than deleted from under it.
		return 0, written, fmt.Errorf("write checkpoint and known-key record: %w", err)
	}
	if !tr.Succeeded && !tr.Responses[0].GetResponseTxn().GetSucceeded() {
		// Another observer got further meanwhile; this generation is no one's.
		_, _ = s.cli.Delete(ctx, chunkRoot+gen+"/", clientv3.WithPrefix())
		return Behind, written, nil
	}
	s.mine, s.last = tr.Header.Revision, m
	return Written, written, nil
}

// Advance stores the checkpoint rev, and moves the manifest's checkpoint
// to it, if the stored checkpoint is lower and the stored record is the
// one this Store last wrote. The caller vouches that its record is valid
// at rev.
func (s *Store) Advance(ctx context.Context, rev int64) (Outcome, error) {
	if s.mine == 0 {
		return NotMine, nil
	}
	v := pad(rev)
	m := s.last
	m.Checkpoint = rev
	mj, err := json.Marshal(m)
	if err != nil {
		return 0, err
	}
	tr, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.Value(Key), "<", v), clientv3.Compare(clientv3.ModRevision(RecordKey), "=", s.mine)).
		Then(clientv3.OpPut(Key, v), clientv3.OpPut(RecordKey, string(mj))).
		Else(clientv3.OpGet(Key), clientv3.OpGet(RecordKey)).
		Commit()
	if err != nil {
		return 0, fmt.Errorf("write checkpoint: %w", err)
	}
	if tr.Succeeded {
		s.mine, s.last = tr.Header.Revision, m
		return Written, nil
	}
	ck, mk := tr.Responses[0].GetResponseRange().GetKvs(), tr.Responses[1].GetResponseRange().GetKvs()
	if len(mk) == 0 || mk[0].ModRevision != s.mine || len(ck) == 0 {
		s.mine = 0
		return NotMine, nil
	}
	return Behind, nil
}
