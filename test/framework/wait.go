package framework

import (
	"testing"
	"time"
)

// WaitFor polls cond every 10 ms until it returns true, and fails the test
// (t.Fatalf, naming what) if it has not after timeout.
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(pollInterval)
	}
}

// WaitForNoError is WaitFor for a condition that says why it does not hold
// yet: it polls until cond returns nil, and the failure names the last
// error.
func WaitForNoError(t testing.TB, timeout time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s; last: %v", timeout, what, err)
		}
		time.Sleep(pollInterval)
	}
}
