package manager

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonrun/baton/client/kinds"
	"github.com/batonrun/baton/sdk/reconcile"
)

// TestAddWhileRunning: a controller added while Run runs publishes its
// declaration and leases at once; one added after Run's context is done is
// refused, and Run still returns once every controller stopped.
func TestAddWhileRunning(t *testing.T) {
	f, q := startFakeQueue(t)
	kv := &recordingKV{values: map[string]string{}}
	var first, late atomic.Int32
	counter := func(n *atomic.Int32) reconcile.Reconciler {
		return reconcile.Func(func(context.Context, reconcile.Request) (reconcile.Result, error) {
			n.Add(1)
			return reconcile.Result{}, nil
		})
	}
	m := New(q, Options{Etcd: kv})
	if err := m.Add(Controller{Name: "things", Reconciler: counter(&first), PollWait: 100 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	add(t, q, "default/a")
	eventually(t, "the first controller's reconcile", func() bool { return first.Load() == 1 && f.empty() })

	greeting := kinds.Kind{Kind: "Greeting", Resource: "greetings"}
	if err := m.Add(Controller{Name: "greetings", Reconciler: counter(&late), For: greeting, PollWait: 100 * time.Millisecond}); err != nil {
		t.Fatalf("Add while running: %v", err)
	}
	kv.mu.Lock()
	got, err := kinds.Parse([]byte(kv.values["/baton/rules/greetings"]))
	kv.mu.Unlock()
	if err != nil || got.For.Kind != "Greeting" {
		t.Fatalf("Add while running published %+v, %v", got, err)
	}
	if err := m.Add(Controller{Name: "greetings", Reconciler: counter(&late)}); err == nil || !strings.Contains(err.Error(), "twice") {
		t.Errorf("the same name again while running: %v", err)
	}
	// The fake queue serves every queue's keys to whoever leases: keys
	// reconciled by the late controller show that it leases.
	deadline := time.Now().Add(20 * time.Second)
	for late.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the controller added while running never reconciled")
		}
		add(t, q, "default/b")
		eventually(t, "the key reconciled", f.empty)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return")
	}
	if err := m.Add(Controller{Name: "after", Reconciler: counter(&late)}); err == nil {
		t.Error("Add after Run ended succeeded")
	}
}
