package service_test

import (
	"context"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/batonrun/baton/client/kinds"
	"github.com/batonrun/baton/services/etcdembed"
	"github.com/batonrun/baton/services/worker/service"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestWorkerPublishesItsDeclarations: baton-worker publishes what each of
// its controllers watches (client/kinds' built-in declarations; the
// garbage collector declares nothing) before it leases, so it does so with
// no queue to lease from, and the records stay after it stops. The
// per-kind declarations of an earlier version's garbage collector are
// gone.
func TestWorkerPublishesItsDeclarations(t *testing.T) {
	srv := etcdembed.StartForTest(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	noQueue := l.Addr().String()
	l.Close()

	legacy := kinds.Declaration{Queue: kinds.GarbageCollectorQueuePrefix + "pods", For: kinds.MustBuiltin(kinds.Pod), IgnoreOwnStatus: true}
	b, err := legacy.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Put(t.Context(), legacy.Key(), string(b)); err != nil {
		t.Fatal(err)
	}

	cfg := service.DefaultConfig()
	cfg.HTTPAddr, cfg.QueueAddr, cfg.ObserverAddr = "127.0.0.1:0", noQueue, ""
	cfg.EtcdEndpoints = srv.Endpoints()
	cfg.GracePeriod = time.Second
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- service.Run(ctx, cfg, nil) }()

	declared := func() []kinds.Declaration {
		resp, err := cli.Get(t.Context(), kinds.DeclarationPrefix, clientv3.WithPrefix())
		if err != nil {
			t.Fatal(err)
		}
		var out []kinds.Declaration
		for _, kv := range resp.Kvs {
			d, err := kinds.Parse(kv.Value)
			if err != nil {
				t.Fatalf("%s: %v", kv.Key, err)
			}
			out = append(out, d)
		}
		return out
	}
	want := kinds.BuiltinDeclarations()
	deadline := time.Now().Add(30 * time.Second)
	for got := declared(); len(got) != len(want) || slices.ContainsFunc(got, func(d kinds.Declaration) bool { return d.Queue == legacy.Queue }); got = declared() {
		if time.Now().After(deadline) {
			t.Fatalf("after 30s, etcd holds %d declarations, want %d", len(declared()), len(want))
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the worker did not stop")
	}

	got := declared()
	queue := func(d kinds.Declaration) string { return d.Queue }
	var gotQ, wantQ []string
	for _, d := range got {
		gotQ = append(gotQ, queue(d))
	}
	for _, d := range want {
		wantQ = append(wantQ, queue(d))
	}
	slices.Sort(gotQ)
	slices.Sort(wantQ)
	if !slices.Equal(gotQ, wantQ) {
		t.Errorf("after the worker stopped, etcd declares %v, want %v", gotQ, wantQ)
	}
	for _, d := range got {
		w := want[slices.IndexFunc(want, func(w kinds.Declaration) bool { return w.Queue == d.Queue })]
		a, _ := d.Marshal()
		b, _ := w.Marshal()
		if string(a) != string(b) {
			t.Errorf("%s: %s, want %s", d.Key(), a, b)
		}
	}
}
