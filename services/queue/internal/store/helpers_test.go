package store

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/batonrun/baton/services/queue/internal/record"
)

const testQueue = "q"

// payload is the last_error a test stores with version ver of key: it makes
// records of many sizes, and recovery checks it, so a record that comes back
// damaged is noticed and not only one that is lost.
func payload(key string, ver uint32) string {
	n := (int(ver)*37 + len(key)*11) % 300
	return strings.Repeat(string(rune('a'+ver%26)), n)
}

func putRec(dst []byte, key string, ver uint32) []byte {
	return record.Append(dst, &record.Record{
		Kind: record.KindPut, Queue: testQueue, Key: key,
		State: record.StatePending, Priority: 1, Attempts: ver,
		NotBefore: int64(ver) * 1000, PendingSince: 1, LastError: payload(key, ver),
	}, 1)
}

func delRec(dst []byte, key string) []byte {
	return record.Append(dst, &record.Record{Kind: record.KindDelete, Queue: testQueue, Key: key}, 1)
}

// state is what a store holds: the version of every present key.
type state map[string]uint32

// replayer rebuilds a state from the records Open replays.
type replayer struct {
	st     state
	queues int
	bad    []string // records that did not come back as written
}

func newReplayer() *replayer { return &replayer{st: state{}} }

func (r *replayer) apply(rec *record.Record) {
	switch rec.Kind {
	case record.KindQueue:
		r.queues++
	case record.KindDelete:
		delete(r.st, rec.Key)
	case record.KindPut:
		if rec.Queue != testQueue || rec.LastError != payload(rec.Key, rec.Attempts) || rec.NotBefore != int64(rec.Attempts)*1000 {
			r.bad = append(r.bad, fmt.Sprintf("key %q version %d came back damaged", rec.Key, rec.Attempts))
		}
		r.st[rec.Key] = rec.Attempts
	}
}

// openState opens a store and returns what it recovered.
func openState(t *testing.T, opts Options) (*Store, state, error) {
	t.Helper()
	r := newReplayer()
	s, err := Open(opts, r.apply)
	if err != nil {
		return nil, nil, err
	}
	if len(r.bad) > 0 {
		t.Errorf("recovery returned damaged records: %v", r.bad)
	}
	return s, r.st, nil
}

// mustOpen is openState that fails the test on an error and closes the
// store at the end of the test.
func mustOpen(t *testing.T, opts Options) (*Store, state) {
	t.Helper()
	s, st, err := openState(t, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s, st
}

// walkOf returns a snapshot walk that emits st, in a few frames' worth of
// calls so snapshots hold more than one frame when st is large.
func walkOf(st state) func(emit func([]byte) error) error {
	keys := slices.Sorted(maps.Keys(st))
	return func(emit func([]byte) error) error {
		buf := record.Append(nil, &record.Record{Kind: record.KindQueue, Queue: testQueue}, 1)
		for i, k := range keys {
			buf = putRec(buf, k, st[k])
			if i%50 == 49 {
				if err := emit(buf); err != nil {
					return err
				}
				buf = buf[:0]
			}
		}
		return emit(buf)
	}
}

// commit appends recs and waits for the batch.
func commit(t *testing.T, s *Store, recs []byte) error {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	b, err := s.Append(recs)
	if err != nil {
		return err
	}
	return b.Wait(ctx)
}

// mustAppend appends recs and returns the batch, failing the test if the
// append is refused.
func mustAppend(t *testing.T, s *Store, recs []byte) *Batch {
	t.Helper()
	b, err := s.Append(recs)
	if err != nil {
		t.Fatalf("append: %v", err)
	}
	return b
}

// mustCommit is commit that fails the test on an error.
func mustCommit(t *testing.T, s *Store, recs []byte) {
	t.Helper()
	if err := commit(t, s, recs); err != nil {
		t.Fatalf("commit: %v", err)
	}
}

func diffStates(got, want state) string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(want)) {
		if g, ok := got[k]; !ok {
			out = append(out, fmt.Sprintf("%s: missing, want version %d", k, want[k]))
		} else if g != want[k] {
			out = append(out, fmt.Sprintf("%s: version %d, want %d", k, g, want[k]))
		}
	}
	for _, k := range slices.Sorted(maps.Keys(got)) {
		if _, ok := want[k]; !ok {
			out = append(out, fmt.Sprintf("%s: version %d, want absent", k, got[k]))
		}
	}
	if len(out) > 8 {
		out = append(out[:8], fmt.Sprintf("... and %d more", len(out)-8))
	}
	return strings.Join(out, "; ")
}
