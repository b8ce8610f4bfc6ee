package main

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/batonrun/baton/services/etcdembed"
	observerservice "github.com/batonrun/baton/services/observer/service"
	queueservice "github.com/batonrun/baton/services/queue/service"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestGreeter runs the example against real etcd, queue and observer (with
// a rules file that feeds the greetings queue), as docs/workers.md does.
func TestGreeter(t *testing.T) {
	srv := etcdembed.StartForTest(t)
	ctx, cancel := context.WithCancel(context.Background())
	var done []chan struct{}
	t.Cleanup(func() {
		cancel()
		for _, d := range done {
			<-d
		}
	})
	goRun := func(f func() error) {
		d := make(chan struct{})
		done = append(done, d)
		go func() {
			defer close(d)
			if err := f(); err != nil && ctx.Err() == nil {
				t.Error(err)
			}
		}()
	}

	qcfg := queueservice.DefaultConfig()
	qcfg.GRPCAddr, qcfg.HTTPAddr, qcfg.DataDir = "127.0.0.1:0", "127.0.0.1:0", t.TempDir()
	qcfg.GracePeriod = time.Second
	qaddr := make(chan string, 1)
	qcfg.OnListen = func(g, _ net.Addr) { qaddr <- g.String() }
	goRun(func() error { return queueservice.Run(ctx, qcfg, nil) })
	queueAddr := <-qaddr

	rules := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(rules, []byte("rules:\n  - queue: greetings\n    prefix: /registry/greetings/\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ocfg := observerservice.DefaultConfig()
	ocfg.GRPCAddr, ocfg.HTTPAddr, ocfg.RulesFile = "127.0.0.1:0", "127.0.0.1:0", rules
	ocfg.GracePeriod = time.Second
	ocfg.EtcdEndpoints, ocfg.QueueAddr = srv.Endpoints(), queueAddr
	oaddr := make(chan string, 1)
	ocfg.OnListen = func(g, _ net.Addr) { oaddr <- g.String() }
	goRun(func() error { return observerservice.Run(ctx, ocfg, nil) })
	observerAddr := <-oaddr

	goRun(func() error { return run(ctx, queueAddr, observerAddr, srv.Endpoints()[0], nil) })

	cli, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	key := "/registry/greetings/default/hi"
	if _, err := cli.Put(t.Context(), key, `{"kind":"Greeting","metadata":{"name":"hi","namespace":"default","uid":"u1","generation":1},"spec":{"name":"world"}}`); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		resp, err := cli.Get(t.Context(), key)
		if err != nil {
			t.Fatal(err)
		}
		var g Greeting
		json.Unmarshal(resp.Kvs[0].Value, &g)
		if g.Status.Message == "hello, world" && g.Status.ObservedGeneration == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("status never set: %s", resp.Kvs[0].Value)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
