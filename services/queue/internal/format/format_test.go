package format

import (
	"errors"
	"slices"
	"strings"
	"testing"
)

// TestCheck: a version from Oldest to Current reads; a newer one is
// ErrNewer and an older one ErrOlder, each naming the format, the version
// met and the versions this build reads.
func TestCheck(t *testing.T) {
	f := Format{Name: "thing", Current: 3, Oldest: 2}
	for v, want := range map[Version]error{1: ErrOlder, 2: nil, 3: nil, 4: ErrNewer} {
		err := f.Check(v)
		if !errors.Is(err, want) || (want != nil && !strings.Contains(err.Error(), "thing version") || want != nil && !strings.Contains(err.Error(), "versions 2 to 3")) {
			t.Errorf("Check(%d) = %v, want %v naming the format and what it reads", v, err, want)
		}
	}
}

// TestHeader: a header round-trips; what is not one is ErrNotHeader, and a
// version this build does not read is Check's error.
func TestHeader(t *testing.T) {
	f := Format{Name: "thing", Current: 2, Oldest: 1}
	for _, v := range []Version{1, 2} {
		h := Header("ABCDEF", v)
		if len(h) != HeaderLen {
			t.Fatalf("Header = %q", h)
		}
		if got, err := ParseHeader(append(h, "rest"...), "ABCDEF", f); err != nil || got != v {
			t.Errorf("ParseHeader(%q) = %d, %v, want %d", h, got, err, v)
		}
	}
	if _, err := ParseHeader(Header("ABCDEF", 3), "ABCDEF", f); !errors.Is(err, ErrNewer) {
		t.Errorf("a header of version 3: %v, want ErrNewer", err)
	}
	for _, b := range []string{"", "ABCDE", "ABCDEF0", "ABCDEX01", "ABCDEF00", "ABCDEF0x", "abcdef01"} {
		if _, err := ParseHeader([]byte(b), "ABCDEF", f); !errors.Is(err, ErrNotHeader) {
			t.Errorf("ParseHeader(%q) = %v, want ErrNotHeader", b, err)
		}
	}
}

// TestAllListsEveryFormat holds All to the formats declared here, each
// with a name and Oldest <= Current.
func TestAllListsEveryFormat(t *testing.T) {
	want := []Format{Records, WALSegment, WALSnapshot, RaftSegment, RaftEntry, RaftSnapshot, Backup, IDFile}
	if len(All) != len(want) {
		t.Fatalf("All has %d formats, want %d", len(All), len(want))
	}
	for i, f := range All {
		if f.Name != want[i].Name || f.Name == "" || f.Oldest < 1 || f.Oldest > f.Current {
			t.Errorf("All[%d] = %+v", i, f)
		}
	}
}

// TestWrites: a format writes, at each level, the newest version that
// level reaches: a member one level behind reads everything the leader of
// a queue at its level writes.
func TestWrites(t *testing.T) {
	f := Format{Name: "thing", Current: 3, Oldest: 1, Since: []Level{1, 2, 4}}
	for l, want := range map[Level]Version{0: 1, 1: 1, 2: 2, 3: 2, 4: 3, 9: 3} {
		if got := f.Writes(l); got != want {
			t.Errorf("Writes(%d) = %d, want %d", l, got, want)
		}
	}
	for _, f := range All {
		if got := f.Writes(BuildLevel); got != f.Current {
			t.Errorf("%s at this build's level writes version %d, not its current %d", f.Name, got, f.Current)
		}
	}
}

// TestContainersMoveTogether: every container of records says which
// record version each of its versions holds, never an older one for a
// newer container version, and its current version holds the current
// records: a new record version that a container does not follow fails
// here, before a writer could put new records in an old container.
func TestContainersMoveTogether(t *testing.T) {
	for _, f := range Containers {
		if len(f.Records) != int(f.Current-f.Oldest)+1 {
			t.Errorf("%s reads versions %d to %d and says what records %d of them hold", f.Name, f.Oldest, f.Current, len(f.Records))
			continue
		}
		for v := f.Oldest; v <= f.Current; v++ {
			r := f.RecordsAt(v)
			if err := Records.Check(r); err != nil {
				t.Errorf("%s version %d holds records this build does not read: %v", f.Name, v, err)
			}
			if v > f.Oldest && r < f.RecordsAt(v-1) {
				t.Errorf("%s version %d holds records %d, older than version %d's", f.Name, v, r, v-1)
			}
		}
		if got := f.RecordsAt(f.Current); got != Records.Current {
			t.Errorf("%s version %d (current) holds records %d, not the current %d", f.Name, f.Current, got, Records.Current)
		}
	}
	for _, f := range All {
		if f.Records != nil && !slices.ContainsFunc(Containers, func(c Format) bool { return c.Name == f.Name }) {
			t.Errorf("%s holds records and is not among Containers", f.Name)
		}
	}
}

// TestHolding: a container is written at the newest version its level
// writes that holds the records given, and at none if no such version is
// written at that level.
func TestHolding(t *testing.T) {
	f := Format{Name: "box", Current: 3, Oldest: 1, Since: []Level{1, 2, 3}, Records: []Version{1, 1, 2}}
	for _, c := range []struct {
		records Version
		level   Level
		want    Version
		ok      bool
	}{{1, 1, 1, true}, {1, 2, 2, true}, {1, 3, 2, true}, {2, 3, 3, true}, {2, 2, 0, false}} {
		got, ok := f.Holding(c.records, c.level)
		if got != c.want || ok != c.ok {
			t.Errorf("Holding(records %d, level %d) = %d, %v, want %d, %v", c.records, c.level, got, ok, c.want, c.ok)
		}
	}
}
