package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/batonrun/baton/test/framework"
)

func TestMain(m *testing.M) { os.Exit(framework.RunTests(m)) }

// TestGreeter runs the example against real etcd and the real queue and
// observer binaries (with a rules file that feeds the greetings queue), as
// docs/workers.md does.
func TestGreeter(t *testing.T) {
	etcd := framework.StartEtcd(t)
	q := framework.StartQueue(t, framework.QueueOptions{})
	o := framework.StartObserver(t, framework.ObserverOptions{
		EtcdEndpoints: etcd.Endpoints(), QueueAddr: q.Addr,
		Rules: "rules:\n  - queue: greetings\n    prefix: /registry/greetings/\n",
	})

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		cfg, err := parseFlags([]string{"--queue-addr", q.Addr, "--observer-addr", o.Addr, "--etcd-endpoints", etcd.Endpoints()[0]}, noEnv)
		if err != nil {
			t.Error(err)
			return
		}
		if err := run(ctx, cfg, nil); err != nil && ctx.Err() == nil {
			t.Error(err)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })

	key := "/registry/greetings/default/hi"
	if _, err := etcd.Client.Put(t.Context(), key, `{"kind":"Greeting","metadata":{"name":"hi","namespace":"default","uid":"u1","generation":1},"spec":{"name":"world"}}`); err != nil {
		t.Fatal(err)
	}
	framework.WaitForNoError(t, 30*time.Second, "the greeting's status", func() error {
		resp, err := etcd.Client.Get(t.Context(), key)
		if err != nil {
			return err
		}
		var g Greeting
		json.Unmarshal(resp.Kvs[0].Value, &g)
		if g.Status.Message == "hello, world" && g.Status.ObservedGeneration == 1 {
			return nil
		}
		return fmt.Errorf("status never set: %s", resp.Kvs[0].Value)
	})
}
