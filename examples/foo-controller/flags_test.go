package main

import (
	"reflect"
	"strings"
	"testing"
)

// The flags' defaults are make run's addresses; the environment fills in
// what the command line leaves out, and the command line wins.
func TestParseFlags(t *testing.T) {
	cfg, err := parseFlags(nil, noEnv)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.QueueAddr != "127.0.0.1:7070" || cfg.ObserverAddr != "127.0.0.1:7071" || !reflect.DeepEqual(cfg.EtcdEndpoints, []string{"http://127.0.0.1:2379"}) || cfg.tls() || cfg.etcdTLS() {
		t.Errorf("defaults: %+v", cfg)
	}
	env := map[string]string{
		"BATON_FOO_QUEUE_ADDR":     "q:1",
		"BATON_FOO_ETCD_ENDPOINTS": "https://e1:2379,https://e2:2379",
		"BATON_FOO_ETCD_CACERT":    "ca.crt",
		"BATON_FOO_CONCURRENCY":    "8",
	}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	cfg, err = parseFlags([]string{"--queue-addr", "q:2", "--tls-ca-file", "ca.crt"}, lookup)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.QueueAddr != "q:2" || cfg.Concurrency != 8 || !reflect.DeepEqual(cfg.EtcdEndpoints, []string{"https://e1:2379", "https://e2:2379"}) ||
		cfg.EtcdCACert != "ca.crt" || !cfg.tls() || !cfg.etcdTLS() {
		t.Errorf("from flags and environment: %+v", cfg)
	}
}

// Flags that cannot work are refused, naming the flag.
func TestParseFlagsRefuses(t *testing.T) {
	for _, tc := range []struct {
		args []string
		env  map[string]string
		want string
	}{
		{[]string{"--tls-cert-file", "c"}, nil, "--tls-cert-file and --tls-key-file go together"},
		{[]string{"--etcd-key", "k", "--etcd-endpoints", "https://e:2379"}, nil, "--etcd-cert and --etcd-key go together"},
		{[]string{"--etcd-cacert", "ca"}, nil, "--etcd-endpoints http://127.0.0.1:2379 is not https://"},
		{[]string{"--etcd-endpoints", "127.0.0.1:2379"}, nil, `"127.0.0.1:2379" is not an http:// or https:// URL`},
		{[]string{"--concurrency", "0"}, nil, "--concurrency 0: at least 1"},
		{[]string{"--queue-addr", ""}, nil, "--queue-addr and --observer-addr are required"},
		{[]string{"extra"}, nil, `unknown argument "extra"`},
		{[]string{"--no-such-flag"}, nil, "flag provided but not defined: -no-such-flag"},
		{nil, map[string]string{"BATON_FOO_CONCURRENCY": "many"}, `BATON_FOO_CONCURRENCY="many"`},
	} {
		lookup := func(k string) (string, bool) { v, ok := tc.env[k]; return v, ok }
		if _, err := parseFlags(tc.args, lookup); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("parseFlags(%q, %v) = %v, want an error containing %q", tc.args, tc.env, err, tc.want)
		}
	}
}
