package etcdembed_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/batonrun/baton/services/etcdembed"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func TestRestartKeepsData(t *testing.T) {
	srv := etcdembed.StartForTest(t)
	if ep := srv.Endpoints()[0]; strings.HasSuffix(ep, ":0") || !strings.HasPrefix(ep, "http://127.0.0.1:") {
		t.Fatalf("endpoint %q: want a concrete loopback port", ep)
	}
	cli, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints(), DialTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()

	put, err := cli.Put(ctx, "/registry/pods/default/a", "v1")
	if err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	if srv.Running() {
		t.Fatal("Running after Stop")
	}
	short, cancelShort := context.WithTimeout(ctx, 300*time.Millisecond)
	_, err = cli.Get(short, "/registry/pods/default/a")
	cancelShort()
	if err == nil {
		t.Fatal("Get succeeded while etcd is stopped")
	}
	if err := srv.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	// The same client reconnects to the same port.
	got, err := cli.Get(ctx, "/registry/pods/default/a")
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Kvs) != 1 || string(got.Kvs[0].Value) != "v1" || got.Kvs[0].ModRevision != put.Header.Revision {
		t.Fatalf("after restart got %v, want v1 at revision %d", got.Kvs, put.Header.Revision)
	}
}

func TestStartValidates(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  etcdembed.Config
	}{
		{"no dir", etcdembed.Config{}},
		{"bad client url", etcdembed.Config{Dir: t.TempDir(), ClientURL: "http://no-port"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if s, err := etcdembed.Start(t.Context(), tc.cfg); err == nil {
				s.Close()
				t.Fatal("Start succeeded, want an error")
			}
		})
	}
}
