package raftbench

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"
)

func TestEntryRoundTrip(t *testing.T) {
	recs := [][]byte{Record(1, 2), {}, []byte("x")}
	id, got, err := DecodeEntry(EncodeEntry(42, recs))
	if err != nil || id != 42 || len(got) != len(recs) {
		t.Fatalf("id %d, %d records, %v", id, len(got), err)
	}
	for i := range recs {
		if !bytes.Equal(got[i], recs[i]) {
			t.Fatalf("record %d differs", i)
		}
	}
	if _, _, err := DecodeEntry(EncodeEntry(1, recs)[:20]); err == nil {
		t.Fatal("a cut entry decoded")
	}
}

// The batcher answers every caller with its proposal's outcome and puts
// the callers that wait meanwhile into one proposal.
func TestBatcherCoalesces(t *testing.T) {
	gate := make(chan struct{})
	var mu sync.Mutex
	var sizes []int
	b := NewBatcher(func(recs [][]byte) func() error {
		mu.Lock()
		sizes = append(sizes, len(recs))
		first := len(sizes) == 1
		mu.Unlock()
		if first {
			<-gate // the first proposal blocks, as a busy Raft loop does
		}
		return func() error { return nil }
	})
	defer b.Close()
	var wg sync.WaitGroup
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	errs := make(chan error, 10)
	for i := range 10 {
		wg.Go(func() { errs <- b.Propose(ctx, Record(i, 0)) })
	}
	// Poll until every caller is either in the blocked proposal or queued
	// behind it.
	for ctx.Err() == nil {
		mu.Lock()
		taken := 0
		if len(sizes) > 0 {
			taken = sizes[0]
		}
		mu.Unlock()
		if taken+len(b.in) == 10 {
			break
		}
		time.Sleep(time.Millisecond)
	}
	close(gate)
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	// The blocked first proposal, then at most one more for everyone who
	// queued meanwhile (one, if all ten were queued before the first).
	total := 0
	for _, n := range sizes {
		total += n
	}
	if len(sizes) > 2 || total != 10 {
		t.Fatalf("proposal sizes %v, want one or two proposals of 10 records in all", sizes)
	}
}

func TestStateMachineSnapshot(t *testing.T) {
	a := NewStateMachine(true)
	if err := a.ApplyEntry(EncodeEntry(1, [][]byte{Record(0, 1), Record(0, 2)})); err != nil {
		t.Fatal(err)
	}
	b := NewStateMachine(true)
	if err := b.Restore(a.Marshal()); err != nil {
		t.Fatal(err)
	}
	ga, gb := a.Get(), b.Get()
	if ga.Count != gb.Count || ga.Sum != gb.Sum || len(gb.Records) != 2 {
		t.Fatalf("restored %+v from %+v", gb, ga)
	}
}
