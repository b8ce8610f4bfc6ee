package manager

import (
	"sync"
	"testing"
	"time"
)

// A job never waits for a busy pool: with its one goroutine blocked, the
// next job still starts.
func TestPoolRunsAJobWhenEveryGoroutineIsBusy(t *testing.T) {
	var wg sync.WaitGroup
	p := newPool(1, &wg)
	release := make(chan struct{})
	first, second := make(chan struct{}), make(chan struct{})
	p.run(func() { close(first); <-release })
	<-first
	p.run(func() { close(second) })
	select {
	case <-second:
	case <-time.After(10 * time.Second):
		t.Fatal("the second job did not start while the first held the pool's goroutine")
	}
	close(release)
	p.close()
	waitGroup(t, &wg)
}

// Jobs run one after another on the pool's goroutines, never on one of
// their own while a pool goroutine is free, and close lets them end.
func TestPoolReusesItsGoroutines(t *testing.T) {
	var wg sync.WaitGroup
	p := newPool(2, &wg)
	var mu sync.Mutex
	ran := 0
	for range 100 {
		// Both pool goroutines free (the last job's has counted itself
		// back), whether or not either is parked at its receive yet.
		waitFor(t, func() bool { return p.idle.Load() == 2 })
		done := make(chan struct{})
		p.run(func() { mu.Lock(); ran++; mu.Unlock(); close(done) })
		<-done
	}
	p.close()
	waitGroup(t, &wg)
	if ran != 100 {
		t.Fatalf("ran %d jobs, want 100", ran)
	}
	if n := p.extra.Load(); n != 0 {
		t.Fatalf("%d of 100 jobs started a goroutine of their own; the pool's were free", n)
	}
}

// waitFor polls cond until it holds, for up to 10 seconds.
func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(100 * time.Microsecond) {
		if time.Now().After(deadline) {
			t.Fatal("condition not met in 10 s")
		}
	}
}

func waitGroup(t *testing.T, wg *sync.WaitGroup) {
	t.Helper()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the pool's goroutines did not end after close")
	}
}
