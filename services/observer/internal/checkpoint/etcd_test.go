package checkpoint

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/batonrun/baton/services/etcdembed"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

func testClient(t *testing.T) *clientv3.Client {
	t.Helper()
	srv := etcdembed.StartForTest(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints(), DialTimeout: 5 * time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func sets(ss ...Set) func() []Set { return func() []Set { return ss } }

// randomKeys are n keys that do not compress, to make many chunks.
func randomKeys(prefix string, n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%sns/%06d-%x", prefix, i, uint64(i)*0x9e3779b97f4a7c15)
	}
	slices.Sort(keys)
	return keys
}

// chunkKeys lists the chunk keys stored.
func chunkKeys(t *testing.T, cli *clientv3.Client) []string {
	t.Helper()
	resp, err := cli.Get(testCtx(t), chunkRoot, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, kv := range resp.Kvs {
		out = append(out, string(kv.Key))
	}
	return out
}

func TestWriteReadAdvance(t *testing.T) {
	cli := testClient(t)
	ctx := testCtx(t)
	s := NewEtcd(cli)
	s.chunkBytes = 4 << 10 // several chunks
	pods, rss := randomKeys("/registry/pods/", 2000), randomKeys("/registry/replicasets/", 3)

	if rec, err := s.Read(ctx, "/registry/pods/"); rec != nil || err != nil {
		t.Fatalf("Read before any write = %v, %v; want nothing", rec, err)
	}
	if s.Owns() {
		t.Fatal("a new Etcd owns the record")
	}
	if out, err := s.Advance(ctx, 5); out != NotMine || err != nil {
		t.Fatalf("Advance before any Write = %v, %v; want NotMine", out, err)
	}
	out, n, err := s.Write(ctx, 10, sets(Set{Prefix: "/registry/pods/", Keys: pods}, Set{Prefix: "/registry/replicasets/", Keys: rss}, Set{Prefix: "/registry/jobs/", Keys: nil}))
	if out != Written || err != nil || n == 0 {
		t.Fatalf("Write = %v, %d bytes, %v; want Written", out, n, err)
	}
	if c := len(chunkKeys(t, cli)); c < 4 {
		t.Errorf("%d chunks stored, want several (chunks of 4 KiB)", c)
	}
	for _, want := range []Set{{Prefix: "/registry/pods/", Keys: pods}, {Prefix: "/registry/replicasets/", Keys: rss}, {Prefix: "/registry/jobs/", Keys: nil}} {
		rec, err := s.Read(ctx, want.Prefix)
		if err != nil || rec == nil {
			t.Fatalf("Read %s = %v, %v", want.Prefix, rec, err)
		}
		if !slices.Equal(rec.Keys, want.Keys) || rec.Revision != 10 || rec.Checkpoint != 10 {
			t.Errorf("Read %s = %d keys at %d (checkpoint %d), want %d at 10", want.Prefix, len(rec.Keys), rec.Revision, rec.Checkpoint, len(want.Keys))
		}
	}
	if rec, err := s.Read(ctx, "/registry/deployments/"); rec != nil || err != nil {
		t.Errorf("Read of an unrecorded prefix = %v, %v; want nothing", rec, err)
	}
	if c, err := s.Checkpoint(ctx); c != 10 || err != nil {
		t.Errorf("Checkpoint = %d, %v; want 10", c, err)
	}

	// Advance moves both the checkpoint and the record's revision.
	if out, err := s.Advance(ctx, 12); out != Written || err != nil {
		t.Fatalf("Advance = %v, %v", out, err)
	}
	if out, err := s.Advance(ctx, 12); out != Behind || err != nil {
		t.Errorf("Advance to the same revision = %v, %v; want Behind", out, err)
	}
	rec, err := s.Read(ctx, "/registry/replicasets/")
	if err != nil || rec.Revision != 12 || rec.Checkpoint != 12 || !slices.Equal(rec.Keys, rss) {
		t.Errorf("Read after Advance = %+v, %v; want the same keys at 12", rec, err)
	}

	// A new Write replaces the generation: the old chunks go.
	before := chunkKeys(t, cli)
	if out, _, err := s.Write(ctx, 20, sets(Set{Prefix: "/registry/pods/", Keys: pods[:10]})); out != Written || err != nil {
		t.Fatalf("second Write = %v, %v", out, err)
	}
	after := chunkKeys(t, cli)
	for _, k := range after {
		if slices.Contains(before, k) {
			t.Errorf("chunk %s of the old generation is still stored", k)
		}
	}
	if rec, err := s.Read(ctx, "/registry/replicasets/"); rec != nil || err != nil {
		t.Errorf("Read of a prefix the new record lacks = %v, %v; want nothing", rec, err)
	}
}

// Two observers share the keys: the one behind writes nothing, Advance
// refuses to vouch for the other's record, and the chunks of a Write that
// loses the race are removed.
func TestTwoStores(t *testing.T) {
	cli := testClient(t)
	ctx := testCtx(t)
	a, b := NewEtcd(cli), NewEtcd(cli)
	keysA, keysB := randomKeys("/p/", 5), randomKeys("/p/", 7)
	if out, _, err := a.Write(ctx, 10, sets(Set{Prefix: "/p/", Keys: keysA})); out != Written || err != nil {
		t.Fatalf("a.Write = %v, %v", out, err)
	}
	if out, _, err := b.Write(ctx, 20, sets(Set{Prefix: "/p/", Keys: keysB})); out != Written || err != nil {
		t.Fatalf("b.Write = %v, %v", out, err)
	}
	called := false
	if out, _, err := a.Write(ctx, 15, func() []Set { called = true; return nil }); out != Behind || err != nil || called {
		t.Errorf("a.Write behind b = %v, %v (keys asked for: %v); want Behind without asking", out, err, called)
	}
	if out, err := a.Advance(ctx, 30); out != NotMine || err != nil || a.Owns() {
		t.Errorf("a.Advance over b's record = %v, %v (owns %v); want NotMine", out, err, a.Owns())
	}
	if c, _ := a.Checkpoint(ctx); c != 20 {
		t.Errorf("checkpoint %d after a refused Advance, want 20", c)
	}
	if out, err := b.Advance(ctx, 25); out != Written || err != nil {
		t.Errorf("b.Advance = %v, %v", out, err)
	}
	rec, err := a.Read(ctx, "/p/")
	if err != nil || !slices.Equal(rec.Keys, keysB) || rec.Revision != 25 {
		t.Errorf("Read = %+v, %v; want b's keys at 25", rec, err)
	}

	// a's write loses the race after its chunks are stored: b moves the
	// checkpoint on in between (sets is called after the first check).
	out, n, err := a.Write(ctx, 40, func() []Set {
		if o, err := b.Advance(ctx, 50); o != Written || err != nil {
			t.Errorf("b.Advance during a's Write = %v, %v", o, err)
		}
		return []Set{{Prefix: "/p/", Keys: keysA}}
	})
	if out != Behind || err != nil || n == 0 {
		t.Errorf("a.Write that lost the race = %v, %d bytes, %v; want Behind after writing chunks", out, n, err)
	}
	for _, k := range chunkKeys(t, cli) {
		if strings.Contains(k, "-"+a.id+"-") {
			t.Errorf("chunk %s of the lost write is still stored", k)
		}
	}
	if rec, err := b.Read(ctx, "/p/"); err != nil || !slices.Equal(rec.Keys, keysB) || rec.Revision != 50 {
		t.Errorf("Read = %+v, %v; want b's keys at 50", rec, err)
	}
	// a writes again once it is ahead; b's generation goes.
	if out, _, err := a.Write(ctx, 60, sets(Set{Prefix: "/p/", Keys: keysA})); out != Written || err != nil {
		t.Fatalf("a.Write ahead = %v, %v", out, err)
	}
	for _, k := range chunkKeys(t, cli) {
		if strings.Contains(k, "-"+b.id+"-") {
			t.Errorf("chunk %s of b's older generation is still stored", k)
		}
	}
}

// An observer that keeps no record (an older version) moves the checkpoint
// past the record: Read says how far the record is valid.
func TestRecordOlderThanCheckpoint(t *testing.T) {
	cli := testClient(t)
	ctx := testCtx(t)
	s := NewEtcd(cli)
	if out, _, err := s.Write(ctx, 10, sets(Set{Prefix: "/p/", Keys: randomKeys("/p/", 3)})); out != Written || err != nil {
		t.Fatalf("Write = %v, %v", out, err)
	}
	if _, err := cli.Put(ctx, Key, pad(50)); err != nil {
		t.Fatal(err)
	}
	rec, err := s.Read(ctx, "/p/")
	if err != nil || rec.Revision != 10 || rec.Checkpoint != 50 {
		t.Errorf("Read = %+v, %v; want revision 10, checkpoint 50", rec, err)
	}
	// The Etcd still owns its record and vouches for it at a later
	// revision (its own informers know every key up to it).
	if out, err := s.Advance(ctx, 60); out != Written || err != nil {
		t.Errorf("Advance = %v, %v", out, err)
	}
}

func TestCorruptRecord(t *testing.T) {
	cli := testClient(t)
	ctx := testCtx(t)
	s := NewEtcd(cli)
	s.chunkBytes = 1 << 10
	if out, _, err := s.Write(ctx, 10, sets(Set{Prefix: "/p/", Keys: randomKeys("/p/", 500)})); out != Written || err != nil {
		t.Fatalf("Write = %v, %v", out, err)
	}
	chunks := chunkKeys(t, cli)
	if _, err := cli.Put(ctx, chunks[1], "not the chunk"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Read(ctx, "/p/"); !errors.Is(err, ErrCorrupt) {
		t.Errorf("Read with a damaged chunk = %v, want ErrCorrupt", err)
	}
	if _, err := cli.Delete(ctx, chunks[1]); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Read(ctx, "/p/"); !errors.Is(err, ErrCorrupt) {
		t.Errorf("Read with a missing chunk = %v, want ErrCorrupt", err)
	}
	if _, err := cli.Put(ctx, RecordKey, "{"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Read(ctx, "/p/"); !errors.Is(err, ErrCorrupt) {
		t.Errorf("Read with a bad manifest = %v, want ErrCorrupt", err)
	}
	if _, err := cli.Put(ctx, Key, "x"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Checkpoint(ctx); !errors.Is(err, ErrMalformed) {
		t.Errorf("Checkpoint of %q = %v, want ErrMalformed", "x", err)
	}
}

// ReadPrefix tells a record that does not cover a prefix (it was not
// watched when the record was written) from no record at all.
func TestReadPrefixNotRecorded(t *testing.T) {
	cli := testClient(t)
	ctx := testCtx(t)
	s := NewEtcd(cli)
	if rec, err := s.ReadPrefix(ctx, "/registry/pods/"); rec != nil || err != nil {
		t.Fatalf("ReadPrefix before any write = %v, %v; want nothing", rec, err)
	}
	if out, _, err := s.Write(ctx, 10, sets(Set{Prefix: "/registry/pods/", Keys: []string{"/registry/pods/a/p"}})); out != Written || err != nil {
		t.Fatalf("Write = %v, %v", out, err)
	}
	if _, err := s.ReadPrefix(ctx, "/registry/greetings/"); !errors.Is(err, ErrNotRecorded) {
		t.Errorf("ReadPrefix of a prefix the record lacks = %v, want ErrNotRecorded", err)
	}
	if rec, err := s.ReadPrefix(ctx, "/registry/pods/"); err != nil || len(rec.Keys) != 1 {
		t.Errorf("ReadPrefix of a recorded prefix = %+v, %v", rec, err)
	}
}

// revision returns etcd's revision now.
func revision(t *testing.T, cli *clientv3.Client) int64 {
	t.Helper()
	resp, err := cli.Get(testCtx(t), Key)
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.Revision
}

// liveGenerations returns the generations of the chunks stored.
func liveGenerations(t *testing.T, cli *clientv3.Client) []string {
	t.Helper()
	var out []string
	for _, k := range chunkKeys(t, cli) {
		g, _, _ := strings.Cut(strings.TrimPrefix(k, chunkRoot), "/")
		if !slices.Contains(out, g) {
			out = append(out, g)
		}
	}
	return out
}

// A record costs etcd what changed, not what is watched: many prefixes
// share their chunks (a few puts, not one per prefix), a write that keeps
// the prefixes that did not change writes only those that did, and the
// chunks no stored record names are deleted.
func TestWriteCostFollowsWhatChanged(t *testing.T) {
	cli := testClient(t)
	ctx := testCtx(t)
	s := NewEtcd(cli)
	pods := randomKeys("/registry/pods/", 2000)
	var all []Set
	for i := range 300 {
		p := fmt.Sprintf("/registry/r%03d/", i)
		all = append(all, Set{Prefix: p, Keys: randomKeys(p, i%3)})
	}
	all = append(all, Set{Prefix: "/registry/pods/", Keys: pods})

	before := revision(t, cli)
	out, full, err := s.Write(ctx, 10, sets(all...))
	if out != Written || err != nil {
		t.Fatalf("Write = %v, %v", out, err)
	}
	if used := revision(t, cli) - before; used > 4 {
		t.Errorf("a record of %d prefixes took %d etcd revisions, want a few (chunks shared)", len(all), used)
	}

	// One small prefix changed; the others are kept.
	changed := slices.Clone(all)
	for i := range changed {
		changed[i] = Set{Prefix: all[i].Prefix, Keep: true}
	}
	changed[7] = Set{Prefix: all[7].Prefix, Keys: randomKeys(all[7].Prefix, 5)}
	out, part, err := s.Write(ctx, 20, sets(changed...))
	if out != Written || err != nil {
		t.Fatalf("incremental Write = %v, %v", out, err)
	}
	if part > full/4 {
		t.Errorf("a write of one changed prefix cost %d bytes, the full record %d", part, full)
	}
	for i, want := range all {
		if i == 7 {
			want = changed[7]
		}
		rec, err := s.Read(ctx, want.Prefix)
		if err != nil || rec == nil || !slices.Equal(rec.Keys, want.Keys) || rec.Revision != 20 {
			t.Fatalf("Read %s = %+v, %v; want %d keys at 20", want.Prefix, rec, err, len(want.Keys))
		}
	}
	if g := liveGenerations(t, cli); len(g) != 2 {
		t.Errorf("generations stored %q, want the first (kept prefixes) and the second", g)
	}

	// Everything rewritten: only the newest generation is left.
	if out, _, err := s.Write(ctx, 30, sets(all...)); out != Written || err != nil {
		t.Fatalf("full Write = %v, %v", out, err)
	}
	if g := liveGenerations(t, cli); len(g) != 1 || !strings.HasPrefix(g[0], pad(30)) {
		t.Errorf("generations stored %q, want the one written at 30", g)
	}
	if s.Generations() != 1 {
		t.Errorf("Generations() = %d, want 1", s.Generations())
	}
}

// A record an observer of the first format wrote (one chunk series per
// prefix) is still read, and the first write replaces it.
func TestReadsVersion1Record(t *testing.T) {
	cli := testClient(t)
	ctx := testCtx(t)
	keys := randomKeys("/registry/pods/", 50)
	data, raw, err := encode("/registry/pods/", keys)
	if err != nil {
		t.Fatal(err)
	}
	gen := pad(10) + "-0123456789abcdef"
	sum := sha256.Sum256(data)
	m, _ := json.Marshal(manifest{Version: 1, Generation: gen, Checkpoint: 10, Prefixes: []prefixEntry{
		{Prefix: "/registry/pods/", Keys: len(keys), Chunks: 1, Bytes: len(data), RawBytes: raw, SHA256: hex.EncodeToString(sum[:])}}})
	if _, err := cli.Txn(ctx).Then(clientv3.OpPut(chunkKeyV1(gen, 0, 0), string(data)), clientv3.OpPut(RecordKey, string(m)), clientv3.OpPut(Key, pad(10))).Commit(); err != nil {
		t.Fatal(err)
	}
	s := NewEtcd(cli)
	rec, err := s.Read(ctx, "/registry/pods/")
	if err != nil || rec == nil || !slices.Equal(rec.Keys, keys) || rec.Revision != 10 {
		t.Fatalf("Read of a version 1 record = %+v, %v", rec, err)
	}
	if at, covered, err := s.Covers(ctx); err != nil || at != 10 || !slices.Equal(covered, []string{"/registry/pods/"}) {
		t.Errorf("Covers = %d, %q, %v", at, covered, err)
	}
	if out, _, err := s.Write(ctx, 20, sets(Set{Prefix: "/registry/pods/", Keys: keys[:3]})); out != Written || err != nil {
		t.Fatalf("Write over a version 1 record = %v, %v", out, err)
	}
	if g := liveGenerations(t, cli); len(g) != 1 || g[0] == gen {
		t.Errorf("generations stored %q, want only the new one", g)
	}
	if at, covered, err := s.Covers(ctx); err != nil || at != 20 || !slices.Equal(covered, []string{"/registry/pods/"}) {
		t.Errorf("Covers = %d, %q, %v", at, covered, err)
	}
}
