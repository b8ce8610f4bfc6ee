// Package clustertest holds the checks every raftbench.Cluster adapter must
// pass: commits from concurrent callers reach all three members in one
// order, a killed leader is replaced, and the killed member catches up.
package clustertest

import (
	"bytes"
	"context"
	"sync"
	"testing"
	"time"

	raftbench "github.com/batonrun/baton/bench/raft"
)

// StartFunc starts an adapter's cluster with opts.
type StartFunc func(opts raftbench.Options) (raftbench.Cluster, error)

// Run checks one adapter in one configuration. Timeouts are generous (a
// loaded 2-core machine under -race); every wait polls for its condition.
func Run(t *testing.T, start StartFunc, opts raftbench.Options) {
	opts.Dir = t.TempDir()
	opts.KeepApplied = true
	c, err := start(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	all := []int{0, 1, 2}

	// 200 proposals from 8 callers.
	const callers, each = 8, 25
	var wg sync.WaitGroup
	errs := make(chan error, callers*each)
	for i := range callers {
		wg.Go(func() {
			for n := range each {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				errs <- c.Propose(ctx, raftbench.Record(i, n))
				cancel()
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("propose: %v", err)
		}
	}
	leader := c.Leader()
	if leader < 0 {
		t.Fatal("no leader after the proposals")
	}
	if err := raftbench.WaitCaughtUp(c, leader, all, 20*time.Second); err != nil {
		t.Fatal(err)
	}
	got := c.Applied(leader)
	if got.Count != callers*each {
		t.Fatalf("leader applied %d records, want %d", got.Count, callers*each)
	}
	sameRecords(t, c, leader, all)

	// Kill the leader: a survivor must take over and commit.
	if err := c.Kill(leader); err != nil {
		t.Fatal(err)
	}
	if err := raftbench.ProposeRetry(c, raftbench.Record(99, 0), time.Second, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	now := c.Leader()
	if now < 0 || now == leader {
		t.Fatalf("leader after the kill is %d (killed %d)", now, leader)
	}
	if got := c.Applied(now); got.Count != callers*each+1 {
		t.Fatalf("new leader applied %d records, want %d", got.Count, callers*each+1)
	}

	// The killed member restarts and catches up to the same sequence.
	if err := c.Restart(leader); err != nil {
		t.Fatal(err)
	}
	if err := raftbench.ProposeRetry(c, raftbench.Record(99, 1), time.Second, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	now, err = raftbench.WaitLeader(c, 20*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if err := raftbench.WaitCaughtUp(c, now, all, 30*time.Second); err != nil {
		t.Fatal(err)
	}
	if got := c.Applied(leader); got.Count != callers*each+2 {
		t.Fatalf("restarted member applied %d records, want %d", got.Count, callers*each+2)
	}
	sameRecords(t, c, now, all)
}

func sameRecords(t *testing.T, c raftbench.Cluster, ref int, members []int) {
	t.Helper()
	want := c.Applied(ref).Records
	for _, m := range members {
		got := c.Applied(m).Records
		if len(got) != len(want) {
			t.Fatalf("member %d holds %d records, member %d %d", m, len(got), ref, len(want))
		}
		for i := range want {
			if !bytes.Equal(got[i], want[i]) {
				t.Fatalf("member %d's record %d differs from member %d's", m, i, ref)
			}
		}
	}
}
