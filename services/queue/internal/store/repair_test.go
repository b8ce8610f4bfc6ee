package store

import (
	"errors"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestRepair damages a log the ways Open refuses, and runs Repair on it: a
// dry run reports without changing anything; a repair keeps everything it
// can read, names the keys the damage held, moves the old files aside, and
// Open accepts the result, which survives a restart.
func TestRepair(t *testing.T) {
	tests := []struct {
		name string
		// damage breaks the log and returns the keys it loses.
		damage func(t *testing.T, l *logLayout) (lost []string, named bool)
		why    string
	}{
		{name: "a flipped bit in a middle frame's checksum", why: "checksum mismatch", damage: func(t *testing.T, l *logLayout) ([]string, bool) {
			seg := l.segs[1]
			p := filepath.Join(l.dir, seg)
			writeOS(t, p, flip(readOS(t, p), l.offs[seg][1]+5, 0x04))
			return l.keys[seg][1], true
		}},
		{name: "a flipped bit in a middle frame's records", why: "checksum mismatch", damage: func(t *testing.T, l *logLayout) ([]string, bool) {
			seg := l.segs[1]
			p := filepath.Join(l.dir, seg)
			writeOS(t, p, flip(readOS(t, p), l.offs[seg][1]+frameHeader+3, 0x04))
			return l.keys[seg][1], false // what is read of it may be altered
		}},
		{name: "a flipped bit in the last frame's checksum", why: "checksum mismatch", damage: func(t *testing.T, l *logLayout) ([]string, bool) {
			seg := l.segs[1]
			p := filepath.Join(l.dir, seg)
			last := len(l.offs[seg]) - 1
			writeOS(t, p, flip(readOS(t, p), l.offs[seg][last]+6, 0x01))
			return l.keys[seg][last], true
		}},
		{name: "a missing segment", why: "segment is missing", damage: func(t *testing.T, l *logLayout) ([]string, bool) {
			if err := os.Remove(filepath.Join(l.dir, l.segs[0])); err != nil {
				t.Fatal(err)
			}
			return slices.Concat(l.keys[l.segs[0]]...), false
		}},
		{name: "a log cut short after a clean shutdown", why: "cut short", damage: func(t *testing.T, l *logLayout) ([]string, bool) {
			seg := l.segs[1]
			p := filepath.Join(l.dir, seg)
			writeOS(t, p, readOS(t, p)[:l.offs[seg][2]])
			return slices.Concat(l.keys[seg][2:]...), false
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l := osLog(t, []int{2, 4}, 0)
			lost, named := tt.damage(t, l)
			want := maps.Clone(l.state)
			for _, k := range lost {
				delete(want, k)
			}
			if _, _, err := openState(t, Options{Dir: l.dir}); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Open of the damaged log = %v, want ErrCorrupt", err)
			}
			before, _ := OS{}.List(l.dir)

			dry, err := Repair(Options{Dir: l.dir}, true)
			if err != nil {
				t.Fatalf("dry run: %v", err)
			}
			if len(dry.Damage) != 1 || !strings.Contains(dry.Damage[0].Why, tt.why) || dry.Moved != "" {
				t.Fatalf("dry run reported %+v, want one damage saying %q and nothing moved", dry.Damage, tt.why)
			}
			after, _ := OS{}.List(l.dir)
			if !slices.Equal(slices.Sorted(slices.Values(after)), slices.Sorted(slices.Values(before))) {
				t.Fatalf("the dry run changed the directory: %v, before %v", after, before)
			}

			rep, err := Repair(Options{Dir: l.dir}, false)
			if err != nil {
				t.Fatalf("repair: %v", err)
			}
			if rep.Moved == "" || rep.KeptKeys != len(want) {
				t.Fatalf("repair kept %d keys (moved to %q), want %d", rep.KeptKeys, rep.Moved, len(want))
			}
			if named {
				var got []string
				for _, k := range rep.Keys {
					got = append(got, k.Key)
					if k.Now != nil {
						t.Errorf("lost key %s is %s, want absent", k.Key, Describe(k.Now))
					}
				}
				if !slices.Equal(got, slices.Sorted(slices.Values(lost))) {
					t.Errorf("the report names %v, want the damaged frame's %v", got, lost)
				}
			}
			moved, _ := OS{}.List(rep.Moved)
			if !slices.ContainsFunc(moved, func(n string) bool { return strings.HasPrefix(n, "wal-") }) {
				t.Errorf("the damaged segments were not kept in %s: %v", rep.Moved, moved)
			}
			s, got, err := openState(t, Options{Dir: l.dir})
			if err != nil {
				t.Fatalf("Open after the repair: %v", err)
			}
			if d := diffStates(got, want); d != "" {
				t.Errorf("after the repair: %s", d)
			}
			mustCommit(t, s, putRec(nil, "after", 1))
			want["after"] = 1
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			s, got = mustOpen(t, Options{Dir: l.dir})
			if d := diffStates(got, want); d != "" {
				t.Errorf("after the repair and a restart: %s", d)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			if again, err := Repair(Options{Dir: l.dir}, false); err != nil || len(again.Damage) != 0 || again.Moved != "" {
				t.Errorf("a second repair: %+v %v, want nothing to do", again, err)
			}
		})
	}
}

// TestRepairRefusesALiveQueue: the directory's lock keeps Repair (and a
// second queue) away from a queue that is running.
func TestRepairRefusesALiveQueue(t *testing.T) {
	dir := t.TempDir()
	s, _ := mustOpen(t, Options{Dir: dir})
	defer s.Close()
	if _, err := Repair(Options{Dir: dir}, false); !errors.Is(err, ErrLocked) {
		t.Errorf("Repair beside a live store = %v, want ErrLocked", err)
	}
	if _, err := Open(Options{Dir: dir}, nil); !errors.Is(err, ErrLocked) {
		t.Errorf("a second Open = %v, want ErrLocked", err)
	}
}
