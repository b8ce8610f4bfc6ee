package broker

import (
	"context"
	"flag"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/batonrun/baton/services/queue/internal/format"
	"github.com/batonrun/baton/services/queue/internal/replica"
	"github.com/batonrun/baton/services/queue/internal/store"
	"github.com/batonrun/baton/services/queue/internal/workqueue"
)

// The fixtures of every format version the queue has written live in
// ../format/testdata/v<N>/, written once by a build of that version (with
// -update-fixtures, which writes the current version's and touches no
// other) and read by every later build: a single member's data directory
// (single/) and a replicated member's Raft log (raft/), each with the
// state it holds (*.golden, a record a line as dump shows them). A change
// to a format raises its version (package format) and adds a directory;
// the old ones stay, and this test keeps reading them.
var updateFixtures = flag.Bool("update-fixtures", false, "write the fixtures of the current format version under ../format/testdata")

const fixtureDir = "../format/testdata"

// fixtureFormats are the formats of the fixtures here: a data
// directory's and a Raft log's (the backup file has fixtures of its own,
// in package backup).
var fixtureFormats = []format.Format{format.WALSegment, format.WALSnapshot, format.RaftSegment, format.RaftEntry, format.RaftSnapshot}

// fixtureVersion names the fixtures a build writes: the versions of
// every format of fixtureFormats, in order, so that a change to any one
// of them makes a new directory.
func fixtureVersion() string {
	var parts []string
	for _, f := range fixtureFormats {
		parts = append(parts, fmt.Sprint(f.Current))
	}
	return "v" + strings.Join(parts, ".")
}

// TestFormatFixtures: every fixture directory reads, with this build, as
// the state it was written with.
func TestFormatFixtures(t *testing.T) {
	if *updateFixtures {
		writeFixtures(t, filepath.Join(fixtureDir, fixtureVersion()))
	}
	dirs, err := filepath.Glob(filepath.Join(fixtureDir, "v*"))
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no fixtures under %s (%v): write the current version's with -update-fixtures", fixtureDir, err)
	}
	if !slices.Contains(dirs, filepath.Join(fixtureDir, fixtureVersion())) {
		t.Errorf("no fixtures of this build's formats (%s): write them with go test -run TestFormatFixtures -update-fixtures", fixtureVersion())
	}
	for _, dir := range dirs {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			t.Run("single", func(t *testing.T) {
				b, err := Open(Config{Queue: workqueue.DefaultConfig()}, store.Options{Dir: copyDir(t, filepath.Join(dir, "single"))}, nil, nil)
				if err != nil {
					t.Fatalf("open the fixture: %v", err)
				}
				defer b.Close()
				wantGolden(t, filepath.Join(dir, "single.golden"), dump(t, b))
			})
			t.Run("raft", func(t *testing.T) {
				b := openFixtureMember(t, copyDir(t, filepath.Join(dir, "raft")))
				defer b.Close()
				within(t, 20*time.Second, "the fixture's member leads", b.Leading)
				wantGolden(t, filepath.Join(dir, "raft.golden"), dump(t, b))
			})
		})
	}
}

// openFixtureMember opens the fixture's Raft log as its one member, id 1
// of cluster 0xba70, which elects itself.
func openFixtureMember(t *testing.T, dir string) *Broker {
	t.Helper()
	rlog, err := store.OpenRaftLog(store.RaftLogOptions{Dir: dir})
	if err != nil {
		t.Fatalf("open the fixture's raft log: %v", err)
	}
	b, err := OpenReplicated(Config{Queue: workqueue.DefaultConfig()}, replica.Config{
		ID: 1, ClusterID: 0xba70, Peers: map[uint64]string{1: "127.0.0.1:1"}, Log: rlog, TickInterval: 10 * time.Millisecond,
	}, nil, slog.New(slog.DiscardHandler))
	if err != nil {
		rlog.Close()
		t.Fatalf("open the fixture's member: %v", err)
	}
	return b
}

// writeFixtures writes dir's fixtures with this build: the same history on
// a single member and on a replicated member of one, with a snapshot in
// the middle, so both a snapshot and the log after it are read.
func writeFixtures(t *testing.T, dir string) {
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	single := filepath.Join(dir, "single")
	b, err := Open(Config{Queue: workqueue.DefaultConfig()}, store.Options{Dir: single}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	fixtureHistory(t, b)
	got := dump(t, b)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	writeGolden(t, filepath.Join(dir, "single.golden"), got)

	raft := filepath.Join(dir, "raft")
	b = openFixtureMember(t, raft)
	within(t, 20*time.Second, "the fixture's member leads", b.Leading)
	fixtureHistory(t, b)
	got = dump(t, b)
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	writeGolden(t, filepath.Join(dir, "raft.golden"), got)
	// The lock files are a running store's, not the format's.
	for _, d := range []string{single, raft} {
		if err := os.Remove(filepath.Join(d, "lock")); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("wrote the fixtures of %s in %s", fixtureVersion(), dir)
}

// fixtureHistory gives b every kind of record and state: queues, keys of
// each priority, a failure's attempts and error, a parked key, a delayed
// one (its time already past when the state is dumped), a forgotten key
// and an acked one, across a snapshot.
func fixtureHistory(t *testing.T, b *Broker) {
	ctx := context.Background()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	add := func(queue string, o AddOptions, keys ...string) {
		t.Helper()
		_, _, err := b.Add(ctx, queue, keys, o)
		must(err)
	}
	lease := func(queue string, n int) []workqueue.Grant {
		t.Helper()
		g, err := b.Lease(ctx, queue, LeaseOptions{Worker: "w", Max: n, Duration: time.Minute})
		must(err)
		return g
	}
	ack := func(queue string, g workqueue.Grant, o workqueue.Outcome) {
		t.Helper()
		ok, err := b.Ack(ctx, queue, nil, []AckItem{{Key: g.Key, Token: g.Token, Outcome: o}})
		must(err)
		if !ok[0] {
			t.Fatalf("ack of %s refused", g.Key)
		}
	}
	add("jobs", AddOptions{}, "default/a", "default/b", "default/c", "ns-2/d")
	add("jobs", AddOptions{Priority: workqueue.Low}, "default/low")
	add("jobs", AddOptions{Priority: workqueue.High}, "default/high")
	add("pods", AddOptions{}, "default/p1", "default/p2")
	for _, g := range lease("jobs", 3) {
		switch g.Key {
		case "default/high":
			ack("jobs", g, workqueue.Outcome{Failed: true, Error: "boom: a failure's text"})
		case "default/a":
			ack("jobs", g, workqueue.Outcome{Terminal: true, Failed: true, Error: "parked for good"})
		default:
			ack("jobs", g, workqueue.Outcome{})
		}
	}
	must(b.c.Compact(b.walk))
	add("jobs", AddOptions{Delay: time.Millisecond}, "default/later")
	_, err := b.Forget(ctx, "pods", []string{"default/p2"})
	must(err)
	add("empty", AddOptions{}, "gone")
	for _, g := range lease("empty", 1) {
		ack("empty", g, workqueue.Outcome{})
	}
	time.Sleep(10 * time.Millisecond) // default/later's time passes
}

// copyDir copies the fixture src to a temporary directory, which opening
// it may change.
func copyDir(t *testing.T, src string) string {
	t.Helper()
	dst := t.TempDir()
	err := filepath.WalkDir(src, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(src, p)
		if d.IsDir() {
			return os.MkdirAll(filepath.Join(dst, rel), 0o750)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(dst, rel), b, 0o600)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

func writeGolden(t *testing.T, p string, state []string) {
	t.Helper()
	if err := os.WriteFile(p, []byte(strings.Join(state, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
}

func wantGolden(t *testing.T, p string, got []string) {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	if !slices.Equal(got, want) {
		t.Errorf("the fixture reads as\n%s\nwant (%s)\n%s", strings.Join(got, "\n"), p, strings.Join(want, "\n"))
	}
}
