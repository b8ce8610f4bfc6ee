package trust

import (
	"errors"
	"flag"
	"strings"
	"testing"

	"github.com/batonrun/baton/services/runtime/flagenv"
)

func TestIsLoopback(t *testing.T) {
	for addr, want := range map[string]bool{
		"127.0.0.1:7070": true, "127.1.2.3:0": true, "[::1]:7070": true, "localhost:7070": true, "LOCALHOST:1": true,
		":7070": false, "0.0.0.0:7070": false, "[::]:7070": false, "10.0.0.1:7070": false, "queue:7070": false,
		"example.com:1": false, "127.0.0.1": false, "": false,
	} {
		if got := IsLoopback(addr); got != want {
			t.Errorf("IsLoopback(%q) = %v, want %v", addr, got, want)
		}
	}
}

func TestCheckServe(t *testing.T) {
	cases := []struct {
		name  string
		c     Config
		addrs []string
		want  string // in the error; "" for none
	}{
		{"plaintext on loopback", Config{}, []string{"127.0.0.1:7070", "localhost:9090"}, ""},
		{"plaintext on a wildcard", Config{}, []string{"127.0.0.1:7070", ":9090"},
			"refusing to serve plaintext on :9090, which is not a loopback address: give --tls-cert-file, --tls-key-file and --tls-ca-file (mutual TLS), or --insecure to serve plaintext anyway"},
		{"plaintext anywhere with --insecure", Config{Insecure: true}, []string{":7070", "0.0.0.0:9090"}, ""},
		{"TLS on a wildcard", Config{CertFile: "c", KeyFile: "k", CAFile: "ca"}, []string{":7070"}, ""},
		{"TLS without a CA", Config{CertFile: "c", KeyFile: "k"}, []string{":7070"}, ""},
		{"an empty address is skipped", Config{}, []string{"", "127.0.0.1:1"}, ""},
		{"a certificate without its key", Config{CertFile: "c"}, nil, "--tls-cert-file is set without --tls-key-file"},
		{"a key without its certificate", Config{KeyFile: "k"}, nil, "--tls-key-file is set without --tls-cert-file"},
		{"a CA without a certificate", Config{CAFile: "ca"}, nil, "--tls-ca-file is set without --tls-cert-file and --tls-key-file"},
		{"--insecure with TLS", Config{CertFile: "c", KeyFile: "k", Insecure: true}, nil, "exclude each other"},
		{"a policy without a CA", Config{CertFile: "c", KeyFile: "k", AuthzPolicy: "p.yaml"}, nil, "--authz-policy needs --tls-ca-file"},
		{"a policy without TLS", Config{AuthzPolicy: "p.yaml"}, nil, "--authz-policy needs --tls-ca-file"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.c.CheckServe(tc.addrs...)
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("CheckServe = %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("CheckServe = %v, want %q", err, tc.want)
			case err != nil && strings.Contains(err.Error(), "\n"):
				t.Fatalf("CheckServe's error is more than one line: %q", err)
			}
		})
	}
	var pe *PlaintextError
	if err := (Config{}).CheckListen(":7070"); !errors.As(err, &pe) || pe.Addr != ":7070" {
		t.Errorf("CheckListen(:7070) = %v, want a *PlaintextError naming :7070", err)
	}
}

// TestFlags: the names of docs/design.md, each mirrored from the
// environment as every flag is.
func TestFlags(t *testing.T) {
	var c Config
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	c.RegisterFlags(fs)
	env := map[string]string{
		"BATON_QUEUE_TLS_CERT_FILE": "q.crt", "BATON_QUEUE_TLS_KEY_FILE": "q.key", "BATON_QUEUE_TLS_CA_FILE": "ca.crt",
		"BATON_QUEUE_INSECURE": "true", "BATON_QUEUE_AUTHZ_POLICY": "p.yaml",
	}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	if err := flagenv.Parse(fs, "BATON_QUEUE", []string{"--tls-ca-file", "other.crt"}, lookup); err != nil {
		t.Fatal(err)
	}
	want := Config{CertFile: "q.crt", KeyFile: "q.key", CAFile: "other.crt", Insecure: true, AuthzPolicy: "p.yaml"}
	if c != want {
		t.Errorf("flags gave %+v, want %+v", c, want)
	}
	var client Config
	cfs := flag.NewFlagSet("y", flag.ContinueOnError)
	client.RegisterClientFlags(cfs)
	if cfs.Lookup(FlagInsecure) != nil || cfs.Lookup(FlagAuthzPolicy) != nil || cfs.Lookup(FlagCAFile) == nil {
		t.Error("RegisterClientFlags registers the certificate flags only")
	}
}
