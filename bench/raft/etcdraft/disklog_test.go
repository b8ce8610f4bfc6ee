package etcdraft

import (
	"os"
	"path/filepath"
	"testing"

	"go.etcd.io/raft/v3/raftpb"
)

func entries(term uint64, from, to uint64) []raftpb.Entry {
	var es []raftpb.Entry
	for i := from; i <= to; i++ {
		es = append(es, raftpb.Entry{Term: term, Index: i, Data: []byte{byte(term), byte(i)}})
	}
	return es
}

// A new leader's entries replace an uncommitted suffix; a torn last frame
// is cut away; the last hard state wins.
func TestDiskLogReplay(t *testing.T) {
	path := filepath.Join(t.TempDir(), "raft.log")
	l, _, _, err := openDiskLog(path)
	if err != nil {
		t.Fatal(err)
	}
	steps := []struct {
		hs   raftpb.HardState
		ents []raftpb.Entry
	}{
		{raftpb.HardState{Term: 1, Vote: 1, Commit: 0}, entries(1, 1, 5)},
		{raftpb.HardState{Term: 2, Vote: 2, Commit: 3}, entries(2, 4, 6)},
		{raftpb.HardState{Term: 2, Vote: 2, Commit: 6}, nil},
	}
	for _, s := range steps {
		if err := l.save(s.hs, s.ents, true); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.close(); err != nil {
		t.Fatal(err)
	}
	// A torn frame: a header promising more bytes than follow.
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte{0, 0, 1, 0, 1, 2, 3, 4, 1, 9}); err != nil {
		t.Fatal(err)
	}
	f.Close()

	l, hs, ents, err := openDiskLog(path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.close()
	if hs.Term != 2 || hs.Vote != 2 || hs.Commit != 6 {
		t.Fatalf("hard state %+v", hs)
	}
	want := append(entries(1, 1, 3), entries(2, 4, 6)...)
	if len(ents) != len(want) {
		t.Fatalf("%d entries, want %d", len(ents), len(want))
	}
	for i := range want {
		if ents[i].Index != want[i].Index || ents[i].Term != want[i].Term || string(ents[i].Data) != string(want[i].Data) {
			t.Fatalf("entry %d is %+v, want %+v", i, ents[i], want[i])
		}
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	// Appending after the repair continues the log.
	if err := l.save(raftpb.HardState{Term: 2, Vote: 2, Commit: 7}, entries(2, 7, 7), true); err != nil {
		t.Fatal(err)
	}
	l.close()
	l, _, ents, err = openDiskLog(path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.close()
	if len(ents) != 7 || ents[6].Index != 7 {
		t.Fatalf("after the repair and one more save: %d entries (file was %d bytes)", len(ents), st.Size())
	}
}
