package service_test

import (
	"flag"
	"io"
	"slices"
	"testing"

	"github.com/batonrun/baton/services/worker/service"
)

// --etcd-endpoints takes a comma-separated list, as the observer's does.
func TestEtcdEndpointsFlag(t *testing.T) {
	cfg := service.DefaultConfig()
	fs := flag.NewFlagSet("baton-worker", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	cfg.RegisterFlags(fs)
	if got := fs.Lookup("etcd-endpoints").DefValue; got != "http://127.0.0.1:2379" {
		t.Errorf("default %q", got)
	}
	if err := fs.Parse([]string{"--etcd-endpoints", "http://a:2379, http://b:2379"}); err != nil {
		t.Fatal(err)
	}
	if want := []string{"http://a:2379", "http://b:2379"}; !slices.Equal(cfg.EtcdEndpoints, want) {
		t.Errorf("EtcdEndpoints = %q, want %q", cfg.EtcdEndpoints, want)
	}
	if err := fs.Parse([]string{"--etcd-endpoints", " , "}); err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err == nil {
		t.Error("an empty --etcd-endpoints validated")
	}
}
