package declare_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/batonrun/baton/client/kinds"
	"github.com/batonrun/baton/sdk/declare"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Publish against a real etcd is tested in the module test/sdk
// (declare/declare_test.go); these tests need nothing running.

func greetings() kinds.Declaration {
	return kinds.Declaration{Queue: "greetings",
		For:  kinds.Kind{Kind: "Greeting", Resource: "greetings", Aliases: []string{"greeting"}},
		Owns: []kinds.Kind{kinds.MustBuiltin(kinds.Pod)}}
}

// flakyKV fails the first fail Txn calls, then passes them to KV.
type flakyKV struct {
	clientv3.KV
	fail  int32
	calls atomic.Int32
}

var errDown = errors.New("etcd is down")

func (f *flakyKV) Txn(ctx context.Context) clientv3.Txn {
	if f.calls.Add(1) <= f.fail {
		return failedTxn{}
	}
	return f.KV.Txn(ctx)
}

type failedTxn struct{}

func (t failedTxn) If(...clientv3.Cmp) clientv3.Txn      { return t }
func (t failedTxn) Then(...clientv3.Op) clientv3.Txn     { return t }
func (t failedTxn) Else(...clientv3.Op) clientv3.Txn     { return t }
func (failedTxn) Commit() (*clientv3.TxnResponse, error) { return nil, errDown }

func TestPublishGivesUp(t *testing.T) {
	kv := &flakyKV{fail: declare.Attempts + 1}
	start := time.Now()
	err := declare.Publish(t.Context(), kv, []kinds.Declaration{greetings()}, nil)
	if !errors.Is(err, errDown) || !strings.Contains(err.Error(), "/baton/rules/greetings") {
		t.Fatalf("Publish against a dead etcd = %v, want errDown naming the key", err)
	}
	if n := kv.calls.Load(); n != declare.Attempts {
		t.Errorf("%d calls, want %d", n, declare.Attempts)
	}
	if d := time.Since(start); d > 30*time.Second {
		t.Errorf("gave up after %v", d)
	}

	// A cancelled context stops the retries at once.
	ctx, cancel := context.WithTimeout(t.Context(), 300*time.Millisecond)
	defer cancel()
	kv = &flakyKV{fail: declare.Attempts + 1}
	if err := declare.Publish(ctx, kv, []kinds.Declaration{greetings()}, nil); err == nil {
		t.Fatal("Publish with a cancelled context succeeded")
	}
	if n := kv.calls.Load(); n >= declare.Attempts {
		t.Errorf("%d calls after the context ended", n)
	}
}
