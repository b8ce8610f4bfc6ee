package store

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/batonrun/baton/services/queue/internal/format"
	"go.etcd.io/raft/v3/raftpb"
)

// TestNewerVersionIsRefusedByName: a segment or snapshot whose header says
// a version this build does not read is refused with format's ErrNewer,
// naming the file and both versions, and never taken for corruption
// (which repair would cut away): another build reads it.
func TestNewerVersionIsRefusedByName(t *testing.T) {
	newer := func(path, kind string) {
		t.Helper()
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		copy(b, format.Header(kind, 99))
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	check := func(what string, err error, file string) {
		t.Helper()
		if !errors.Is(err, format.ErrNewer) || errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), file) || !strings.Contains(err.Error(), "version 99") {
			t.Errorf("%s: %v, want format.ErrNewer naming %s and version 99, not ErrCorrupt", what, err, file)
		}
	}

	// A single member's segment, and its snapshot.
	dir := t.TempDir()
	s, _ := mustOpen(t, Options{Dir: dir})
	if err := commit(t, s, putRec(nil, "k", 1)); err != nil {
		t.Fatal(err)
	}
	if err := s.Snapshot(walkOf(state{"k": 1})); err != nil {
		t.Fatal(err)
	}
	if err := commit(t, s, putRec(nil, "j", 1)); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	segs, _ := filepath.Glob(filepath.Join(dir, "wal-*.log"))
	snaps, _ := filepath.Glob(filepath.Join(dir, "snap-*.snap"))
	if len(segs) == 0 || len(snaps) != 1 {
		t.Fatalf("segments %v, snapshots %v", segs, snaps)
	}
	seg := segs[len(segs)-1]
	newer(seg, walKind)
	_, _, err := openState(t, Options{Dir: dir})
	check("a segment of version 99", err, filepath.Base(seg))
	fixHeader(t, seg, walMagic)
	newer(snaps[0], snapKind)
	_, _, err = openState(t, Options{Dir: dir})
	check("a snapshot of version 99", err, filepath.Base(snaps[0]))

	// A replicated member's Raft log segment.
	rdir := t.TempDir()
	l, err := OpenRaftLog(RaftLogOptions{Dir: rdir})
	if err != nil {
		t.Fatal(err)
	}
	if err := l.Save(raftpb.HardState{Term: 1, Commit: 1}, []raftpb.Entry{{Term: 1, Index: 1}}, raftpb.Snapshot{}); err != nil {
		t.Fatal(err)
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	rsegs, _ := filepath.Glob(filepath.Join(rdir, "raft-*"))
	if len(rsegs) == 0 {
		t.Fatal("no raft segment")
	}
	newer(rsegs[0], raftKind)
	_, err = OpenRaftLog(RaftLogOptions{Dir: rdir})
	check("a raft segment of version 99", err, filepath.Base(rsegs[0]))
}

func mustRead(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// fixHeader writes header over the start of the file p.
func fixHeader(t *testing.T, p, header string) {
	t.Helper()
	b := mustRead(t, p)
	copy(b, header)
	if err := os.WriteFile(p, b, 0o600); err != nil {
		t.Fatal(err)
	}
}
