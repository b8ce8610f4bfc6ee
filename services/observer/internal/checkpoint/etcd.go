package checkpoint

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
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
	formatVersion = 2
)

// Set is the keys of one prefix, sorted and unique; or, with Keep, the
// prefix's keys as the record this Etcd last wrote holds them (the prefix
// has not changed since), which are not written again.
type Set struct {
	Prefix string
	Keys   []string
	Keep   bool
}

// manifest is the record's manifest as stored. Version 2 (written since
// the record became incremental) names the generations that hold the
// record's blobs and where the index is; version 1 (read only) listed
// every prefix itself, each in chunks of its own.
type manifest struct {
	Version    int    `json:"version"`
	Generation string `json:"generation"`
	Checkpoint int64  `json:"checkpoint"`
	// Version 2.
	Index       *blobRef     `json:"index,omitempty"`
	Generations []generation `json:"generations,omitempty"`
	// Version 1.
	Prefixes []prefixEntry `json:"prefixes,omitempty"`
}

// generation is one generation's chunks: the blobs written together.
type generation struct {
	Name       string `json:"name"`
	Chunks     int    `json:"chunks"`
	ChunkBytes int    `json:"chunk_bytes"`
}

// blobRef is where one blob lies: a generation's data from Offset on.
type blobRef struct {
	Generation string `json:"generation"`
	Offset     int    `json:"offset"`
	Bytes      int    `json:"bytes"`
	RawBytes   int    `json:"raw_bytes"`
	SHA256     string `json:"sha256,omitempty"`
}

// indexEntry is one prefix of a version 2 record (the index blob is a
// gzipped JSON array of them). A prefix's blob is checked by its gzip
// checksum and counts; the index by its SHA-256 in the manifest.
type indexEntry struct {
	Prefix string `json:"prefix"`
	Keys   int    `json:"keys"`
	blobRef
}

// prefixEntry is one prefix of a version 1 manifest.
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

// Etcd reads and writes the checkpoint and the record, in etcd. It is not safe for
// concurrent use: one goroutine (the observer's ticker) writes.
type Etcd struct {
	cli        *clientv3.Client
	id         string // this process's part of generation names
	writes     int    // Writes made, the last part of generation names
	chunkBytes int    // ChunkBytes; tests make it small
	enc        encoder

	mine  int64                 // mod revision of the manifest this Etcd last wrote (0: none)
	last  manifest              // that manifest
	index map[string]indexEntry // and its index, by prefix
}

// NewEtcd returns an Etcd for the observer's keys in cli's etcd.
func NewEtcd(cli *clientv3.Client) *Etcd {
	return &Etcd{cli: cli, id: fmt.Sprintf("%016x", rand.Uint64()), chunkBytes: ChunkBytes}
}

func pad(rev int64) string { return fmt.Sprintf("%020d", rev) }

// chunkKey is chunk c of a version 2 generation.
func chunkKey(gen string, chunk int) string { return fmt.Sprintf("%s%s/%06d", chunkRoot, gen, chunk) }

// chunkKeyV1 is chunk c of prefix number p of a version 1 generation.
func chunkKeyV1(gen string, prefix, chunk int) string {
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
func (s *Etcd) Checkpoint(ctx context.Context) (int64, error) {
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
func (s *Etcd) Read(ctx context.Context, prefix string) (*Record, error) {
	rec, err := s.ReadPrefix(ctx, prefix)
	if errors.Is(err, ErrNotRecorded) {
		return nil, nil
	}
	return rec, err
}

// ReadPrefix is Read, telling a record that does not cover prefix
// (ErrNotRecorded) from no record at all (nil, nil).
func (s *Etcd) ReadPrefix(ctx context.Context, prefix string) (*Record, error) {
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
	rec := &Record{Revision: m.Checkpoint}
	if len(ck) > 0 {
		// A malformed checkpoint reads as none, as Checkpoint's caller
		// takes it.
		rec.Checkpoint, _ = parseCheckpoint(ck[0].Value)
	}
	switch m.Version {
	case 1:
		rec.Keys, err = s.readV1(ctx, m, prefix, rev)
	case formatVersion:
		rec.Keys, err = s.readV2(ctx, m, prefix, rev)
	default:
		return nil, fmt.Errorf("%w: manifest version %d, this observer reads 1 and %d", ErrCorrupt, m.Version, formatVersion)
	}
	if err != nil {
		return nil, err
	}
	return rec, nil
}

// Covers returns the prefixes the stored record holds and the revision it
// is valid at (none and 0 without a record).
func (s *Etcd) Covers(ctx context.Context) (int64, []string, error) {
	resp, err := s.cli.Get(ctx, RecordKey)
	if err != nil {
		return 0, nil, fmt.Errorf("read known-key record: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return 0, nil, nil
	}
	var m manifest
	if err := json.Unmarshal(resp.Kvs[0].Value, &m); err != nil {
		return 0, nil, fmt.Errorf("%w: manifest: %v", ErrCorrupt, err)
	}
	var out []string
	switch m.Version {
	case 1:
		for _, p := range m.Prefixes {
			out = append(out, p.Prefix)
		}
	case formatVersion:
		if m.Index == nil {
			return 0, nil, fmt.Errorf("%w: manifest names no index", ErrCorrupt)
		}
		entries, err := s.readIndex(ctx, m, resp.Header.Revision)
		if err != nil {
			return 0, nil, err
		}
		for _, e := range entries {
			out = append(out, e.Prefix)
		}
	default:
		return 0, nil, fmt.Errorf("%w: manifest version %d", ErrCorrupt, m.Version)
	}
	return m.Checkpoint, out, nil
}

// readV2 reads prefix's keys from a version 2 record at rev.
func (s *Etcd) readV2(ctx context.Context, m manifest, prefix string, rev int64) ([]string, error) {
	if m.Index == nil {
		return nil, fmt.Errorf("%w: manifest names no index", ErrCorrupt)
	}
	entries, err := s.readIndex(ctx, m, rev)
	if err != nil {
		return nil, err
	}
	i, ok := slices.BinarySearchFunc(entries, prefix, func(e indexEntry, p string) int { return cmp.Compare(e.Prefix, p) })
	if !ok {
		return nil, fmt.Errorf("%w: %s (record at revision %d)", ErrNotRecorded, prefix, m.Checkpoint)
	}
	e := entries[i]
	data, err := s.readBlob(ctx, m, e.blobRef, rev)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", prefix, err)
	}
	keys, err := decode(prefix, data, e.Keys, e.RawBytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", prefix, err)
	}
	return keys, nil
}

// readIndex reads and checks the index of a version 2 record, sorted by
// prefix.
func (s *Etcd) readIndex(ctx context.Context, m manifest, rev int64) ([]indexEntry, error) {
	data, err := s.readBlob(ctx, m, *m.Index, rev)
	if err != nil {
		return nil, fmt.Errorf("index: %w", err)
	}
	if sum := sha256.Sum256(data); hex.EncodeToString(sum[:]) != m.Index.SHA256 {
		return nil, fmt.Errorf("%w: checksum of the index", ErrCorrupt)
	}
	raw, err := gunzip(data, m.Index.RawBytes)
	if err != nil {
		return nil, fmt.Errorf("index: %w", err)
	}
	var entries []indexEntry
	if err := json.Unmarshal(raw, &entries); err != nil {
		return nil, fmt.Errorf("%w: index: %v", ErrCorrupt, err)
	}
	if !slices.IsSortedFunc(entries, func(a, b indexEntry) int { return cmp.Compare(a.Prefix, b.Prefix) }) {
		return nil, fmt.Errorf("%w: index not sorted", ErrCorrupt)
	}
	return entries, nil
}

// readBlob reads the bytes ref names, from the chunks of its generation
// at rev (one range read).
func (s *Etcd) readBlob(ctx context.Context, m manifest, ref blobRef, rev int64) ([]byte, error) {
	i := slices.IndexFunc(m.Generations, func(g generation) bool { return g.Name == ref.Generation })
	if i < 0 {
		return nil, fmt.Errorf("%w: generation %q is not in the manifest", ErrCorrupt, ref.Generation)
	}
	g := m.Generations[i]
	if g.ChunkBytes <= 0 || ref.Offset < 0 || ref.Bytes < 0 || ref.Offset+ref.Bytes > g.Chunks*g.ChunkBytes {
		return nil, fmt.Errorf("%w: bytes %d+%d out of generation %s", ErrCorrupt, ref.Offset, ref.Bytes, g.Name)
	}
	if ref.Bytes == 0 {
		return nil, nil
	}
	first, last := ref.Offset/g.ChunkBytes, (ref.Offset+ref.Bytes-1)/g.ChunkBytes
	resp, err := s.cli.Get(ctx, chunkKey(g.Name, first), clientv3.WithRange(chunkKey(g.Name, last+1)), clientv3.WithRev(rev))
	if err != nil {
		return nil, fmt.Errorf("read known-key record chunks of %s: %w", g.Name, err)
	}
	if len(resp.Kvs) != last-first+1 {
		return nil, fmt.Errorf("%w: %d of chunks %d to %d of %s stored", ErrCorrupt, len(resp.Kvs), first, last, g.Name)
	}
	data := make([]byte, 0, (last-first+1)*g.ChunkBytes)
	for j, kv := range resp.Kvs {
		if string(kv.Key) != chunkKey(g.Name, first+j) || (first+j < g.Chunks-1 && len(kv.Value) != g.ChunkBytes) {
			return nil, fmt.Errorf("%w: chunk %s", ErrCorrupt, kv.Key)
		}
		data = append(data, kv.Value...)
	}
	from := ref.Offset - first*g.ChunkBytes
	if from+ref.Bytes > len(data) {
		return nil, fmt.Errorf("%w: generation %s is short", ErrCorrupt, g.Name)
	}
	return data[from : from+ref.Bytes], nil
}

// readV1 reads prefix's keys from a version 1 record at rev.
func (s *Etcd) readV1(ctx context.Context, m manifest, prefix string, rev int64) ([]string, error) {
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
		resp, err := s.cli.Get(ctx, chunkKeyV1(m.Generation, idx, c), clientv3.WithRev(rev))
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
	keys, err := decode(prefix, data, p.Keys, p.RawBytes)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", prefix, err)
	}
	return keys, nil
}

// Outcome says what a Write or Advance did.
type Outcome int

const (
	// Written: the checkpoint (and, by Write, the record) is stored.
	Written Outcome = iota
	// Behind: the stored checkpoint is already at or past the revision;
	// nothing was stored (another observer is ahead).
	Behind
	// NotMine: the stored record is not the one this Etcd last wrote (or
	// it never wrote one); Advance cannot vouch for it, Write must.
	NotMine
)

// Owns reports whether the stored manifest was, when last looked at, the
// one this Etcd wrote.
func (s *Etcd) Owns() bool { return s.mine != 0 }

// Has reports whether the record this Etcd last wrote, still stored as
// far as it knows, holds prefix: a Set of it may Keep.
func (s *Etcd) Has(prefix string) bool {
	_, ok := s.index[prefix]
	return ok && s.mine != 0
}

// Generation returns the generation that holds prefix in the record this
// Etcd last wrote ("" if none).
func (s *Etcd) Generation(prefix string) string {
	if s.mine == 0 {
		return ""
	}
	return s.index[prefix].Generation
}

// Largest returns the generation of the record this Etcd last wrote that
// holds the most bytes of it ("" if none).
func (s *Etcd) Largest() string {
	if s.mine == 0 {
		return ""
	}
	bytes := map[string]int{}
	best := ""
	for _, e := range s.index {
		bytes[e.Generation] += e.Bytes
		if best == "" || bytes[e.Generation] > bytes[best] || (bytes[e.Generation] == bytes[best] && e.Generation > best) {
			best = e.Generation
		}
	}
	return best
}

// Generations returns the generations the record this Etcd last wrote
// keeps (0 if it owns none): each Write that keeps some prefixes may add
// one, and one that keeps none leaves one.
func (s *Etcd) Generations() int {
	if s.mine == 0 {
		return 0
	}
	return len(s.last.Generations)
}

// Write stores sets as the record valid at rev and the checkpoint rev, if
// the stored checkpoint is lower. sets is called only when the write is
// going ahead. A Set with Keep (only while Owns) keeps what the stored
// record holds for its prefix; the others are written, together, into the
// chunks of a new generation (so a write costs chunk puts by its bytes,
// not by its prefixes), with the record's index. The transaction that
// stores the manifest deletes every generation the new record does not
// name. It returns the bytes written (chunks and manifest) too.
func (s *Etcd) Write(ctx context.Context, rev int64, sets func() []Set) (Outcome, int, error) {
	v := pad(rev)
	cur, err := s.cli.Get(ctx, Key)
	if err != nil {
		return 0, 0, fmt.Errorf("read checkpoint: %w", err)
	}
	incremental := s.mine != 0
	// The record this Etcd owns may be written again at the stored
	// checkpoint (to take in a prefix it lacks); any other write must move
	// the checkpoint on.
	if len(cur.Kvs) > 0 && (string(cur.Kvs[0].Value) > v || !incremental && string(cur.Kvs[0].Value) == v) {
		return Behind, 0, nil
	}
	s.writes++
	gen := fmt.Sprintf("%s-%s-%06x", v, s.id, s.writes&0xffffff)
	var (
		data    []byte
		entries []indexEntry
	)
	for _, set := range sets() {
		if set.Keep {
			e, ok := s.index[set.Prefix]
			if !incremental || !ok {
				return 0, 0, fmt.Errorf("checkpoint: %s kept, but the stored record is not this Etcd's or lacks it", set.Prefix)
			}
			entries = append(entries, e)
			continue
		}
		blob, raw, err := s.enc.encode(set.Prefix, set.Keys)
		if err != nil {
			return 0, 0, err
		}
		entries = append(entries, indexEntry{Prefix: set.Prefix, Keys: len(set.Keys),
			blobRef: blobRef{Generation: gen, Offset: len(data), Bytes: len(blob), RawBytes: raw}})
		data = append(data, blob...)
	}
	slices.SortFunc(entries, func(a, b indexEntry) int { return cmp.Compare(a.Prefix, b.Prefix) })
	ij, err := json.Marshal(entries)
	if err != nil {
		return 0, 0, err
	}
	iz, err := s.enc.gzip(ij)
	if err != nil {
		return 0, 0, err
	}
	sum := sha256.Sum256(iz)
	index := &blobRef{Generation: gen, Offset: len(data), Bytes: len(iz), RawBytes: len(ij), SHA256: hex.EncodeToString(sum[:])}
	data = append(data, iz...)

	chunks := split(data, s.chunkBytes)
	m := manifest{Version: formatVersion, Generation: gen, Checkpoint: rev, Index: index,
		Generations: []generation{{Name: gen, Chunks: len(chunks), ChunkBytes: s.chunkBytes}}}
	for _, e := range entries {
		if e.Generation != gen && !slices.ContainsFunc(m.Generations, func(g generation) bool { return g.Name == e.Generation }) {
			i := slices.IndexFunc(s.last.Generations, func(g generation) bool { return g.Name == e.Generation })
			m.Generations = append(m.Generations, s.last.Generations[i])
		}
	}
	written := 0
	for c, chunk := range chunks {
		if _, err := s.cli.Put(ctx, chunkKey(gen, c), string(chunk)); err != nil {
			return 0, written, fmt.Errorf("write known-key record chunk: %w", err)
		}
		written += len(chunk)
	}
	mj, err := json.Marshal(m)
	if err != nil {
		return 0, written, err
	}
	written += len(mj)
	ops := []clientv3.Op{clientv3.OpPut(Key, v), clientv3.OpPut(RecordKey, string(mj))}
	ops = append(ops, pruneOps(m, v)...)
	if incremental {
		// The kept prefixes' generations are this Etcd's only while the
		// manifest is: another observer's write deletes them.
		tr, err := s.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.Value(Key), "<", v+"\x00"), clientv3.Compare(clientv3.ModRevision(RecordKey), "=", s.mine)).
			Then(ops...).
			Else(clientv3.OpGet(Key), clientv3.OpGet(RecordKey)).
			Commit()
		if err != nil {
			return 0, written, fmt.Errorf("write checkpoint and known-key record: %w", err)
		}
		if !tr.Succeeded {
			_, _ = s.cli.Delete(ctx, chunkRoot+gen+"/", clientv3.WithPrefix())
			mk := tr.Responses[1].GetResponseRange().GetKvs()
			if len(mk) == 0 || mk[0].ModRevision != s.mine {
				s.mine = 0
				return NotMine, written, nil
			}
			return Behind, written, nil
		}
		s.wrote(tr.Header.Revision, m, entries)
		return Written, written, nil
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
	s.wrote(tr.Header.Revision, m, entries)
	return Written, written, nil
}

func (s *Etcd) wrote(modRev int64, m manifest, entries []indexEntry) {
	s.mine, s.last = modRev, m
	s.index = make(map[string]indexEntry, len(entries))
	for _, e := range entries {
		s.index[e.Prefix] = e
	}
}

// pruneOps deletes every generation below the checkpoint v that m does not
// name: the ranges between those it names (generation names are all as
// long, and "0" sorts after the "/" that ends a generation's name in its
// chunks' keys). Generations at v or above are another writer's, on its way.
func pruneOps(m manifest, v string) []clientv3.Op {
	var keep []string
	for _, g := range m.Generations {
		if g.Name < v {
			keep = append(keep, g.Name)
		}
	}
	slices.Sort(keep)
	var ops []clientv3.Op
	from := chunkRoot
	for _, g := range keep {
		ops = append(ops, clientv3.OpDelete(from, clientv3.WithRange(chunkRoot+g)))
		from = chunkRoot + g + "0"
	}
	return append(ops, clientv3.OpDelete(from, clientv3.WithRange(chunkRoot+v)))
}

// Advance stores the checkpoint rev, and moves the manifest's checkpoint
// to it, if the stored checkpoint is lower and the stored record is the
// one this Etcd last wrote. The caller vouches that its record is valid
// at rev.
func (s *Etcd) Advance(ctx context.Context, rev int64) (Outcome, error) {
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
