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

// Jobs run one after another on the pool's goroutines, and close lets them
// end.
func TestPoolReusesItsGoroutines(t *testing.T) {
	var wg sync.WaitGroup
	p := newPool(2, &wg)
	var mu sync.Mutex
	ran := 0
	for range 100 {
		done := make(chan struct{})
		p.run(func() { mu.Lock(); ran++; mu.Unlock(); close(done) })
		<-done
	}
	p.close()
	waitGroup(t, &wg)
	if ran != 100 {
		t.Fatalf("ran %d jobs, want 100", ran)
	}
	// A goroutine that has just run a job may not be back waiting when the
	// next one comes, so a few may get their own; most must not.
	if n := p.extra.Load(); n > 50 {
		t.Fatalf("%d of 100 jobs started a goroutine of their own; the pool's were idle", n)
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
