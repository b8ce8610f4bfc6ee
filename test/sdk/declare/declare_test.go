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
	"github.com/batonrun/baton/services/etcdembed"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Publish against a real etcd, embedded in the test.

func greetings() kinds.Declaration {
	return kinds.Declaration{Queue: "greetings",
		For:  kinds.Kind{Kind: "Greeting", Resource: "greetings", Aliases: []string{"greeting"}},
		Owns: []kinds.Kind{kinds.MustBuiltin(kinds.Pod)}}
}

func etcd(t *testing.T) *clientv3.Client {
	t.Helper()
	srv := etcdembed.StartForTest(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// stored returns the value at key and its mod revision (0: absent).
func stored(t *testing.T, cli *clientv3.Client, key string) (string, int64) {
	t.Helper()
	resp, err := cli.Get(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return "", 0
	}
	return string(resp.Kvs[0].Value), resp.Kvs[0].ModRevision
}

func TestPublishWritesOnlyWhatDiffers(t *testing.T) {
	cli := etcd(t)
	decls := append(kinds.BuiltinDeclarations(), greetings())
	if err := declare.Publish(t.Context(), cli, decls, nil); err != nil {
		t.Fatal(err)
	}
	for _, d := range decls {
		v, _ := stored(t, cli, d.Key())
		got, err := kinds.Parse([]byte(v))
		if err != nil {
			t.Fatalf("%s holds %q: %v", d.Key(), v, err)
		}
		if got.Queue != d.Queue || got.For.Kind != d.For.Kind || len(got.Owns) != len(d.Owns) {
			t.Errorf("%s holds %+v, want %+v", d.Key(), got, d)
		}
	}
	_, rev := stored(t, cli, greetings().Key())
	head := func() int64 {
		resp, err := cli.Get(t.Context(), "health", clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		return resp.Header.Revision
	}
	before := head()

	// Another replica publishing the same declarations changes nothing:
	// not one etcd revision.
	if err := declare.Publish(t.Context(), cli, decls, nil); err != nil {
		t.Fatal(err)
	}
	if after := head(); after != before {
		t.Errorf("publishing the same declarations again moved etcd from revision %d to %d", before, after)
	}

	// A changed declaration is written.
	d := greetings()
	d.Owns = nil
	if err := declare.Publish(t.Context(), cli, []kinds.Declaration{d}, nil); err != nil {
		t.Fatal(err)
	}
	v, rev2 := stored(t, cli, d.Key())
	if rev2 == rev || strings.Contains(v, `"owns"`) {
		t.Errorf("a changed declaration was not written: %q at revision %d (was %d)", v, rev2, rev)
	}
}

func TestPublishChecksEverythingFirst(t *testing.T) {
	cli := etcd(t)
	bad := greetings()
	bad.Queue = "Greetings"
	for _, tc := range []struct {
		name  string
		decls []kinds.Declaration
		want  string
	}{
		{"invalid", []kinds.Declaration{greetings(), bad}, "not a DNS label"},
		{"twice", []kinds.Declaration{greetings(), greetings()}, "declared twice"},
	} {
		err := declare.Publish(t.Context(), cli, tc.decls, nil)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: Publish = %v, want an error containing %q", tc.name, err, tc.want)
		}
	}
	if v, _ := stored(t, cli, greetings().Key()); v != "" {
		t.Errorf("a refused Publish wrote %q", v)
	}
}

// flakyKV fails the first fail Txn calls, then passes them to the real KV.
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

func TestPublishRetries(t *testing.T) {
	cli := etcd(t)
	kv := &flakyKV{KV: cli, fail: 2}
	if err := declare.Publish(t.Context(), kv, []kinds.Declaration{greetings()}, nil); err != nil {
		t.Fatalf("Publish after two failures = %v", err)
	}
	if v, _ := stored(t, cli, greetings().Key()); v == "" {
		t.Error("nothing published")
	}
	if n := kv.calls.Load(); n != 3 {
		t.Errorf("%d calls, want 3", n)
	}
}
