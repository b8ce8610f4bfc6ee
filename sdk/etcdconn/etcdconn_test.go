package etcdconn

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	clientv3 "go.etcd.io/etcd/client/v3"
)

func TestValidate(t *testing.T) {
	https, http := []string{"https://127.0.0.1:2379"}, []string{"http://127.0.0.1:2379"}
	for _, tc := range []struct {
		name string
		c    Config
		eps  []string
		want string
	}{
		{"nothing", Config{}, http, ""},
		{"a CA for https", Config{CACert: "ca"}, https, ""},
		{"a client certificate for https", Config{CACert: "ca", Cert: "c", Key: "k"}, https, ""},
		{"a user over plaintext", Config{Username: "u", PasswordFile: "p"}, http, ""},
		{"a CA for http", Config{CACert: "ca"}, http, "--etcd-endpoints http://127.0.0.1:2379 is not https://"},
		{"one endpoint of two plaintext", Config{CACert: "ca"}, append(https, http...), "is not https://"},
		{"a certificate without its key", Config{Cert: "c"}, https, "--etcd-cert is set without --etcd-key"},
		{"a key without its certificate", Config{Key: "k"}, https, "--etcd-key is set without --etcd-cert"},
		{"a user without a password", Config{Username: "u"}, http, "--etcd-username is set without --etcd-password-file"},
		{"a password without a user", Config{PasswordFile: "p"}, http, "--etcd-password-file is set without --etcd-username"},
	} {
		err := tc.c.Validate(tc.eps)
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: Validate = %v, want %q", tc.name, err, tc.want)
		}
	}
}

func TestApply(t *testing.T) {
	dir := t.TempDir()
	pw := filepath.Join(dir, "pw")
	for content, want := range map[string]string{"s3cret\n": "s3cret", "s3cret": "s3cret", "s3cret\r\n": "s3cret", "a b\n\n": "a b\n"} {
		if err := os.WriteFile(pw, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg := clientv3.Config{Endpoints: []string{"http://127.0.0.1:2379"}}
		if err := (Config{Username: "root", PasswordFile: pw}).Apply(&cfg, nil); err != nil {
			t.Fatal(err)
		}
		if cfg.Username != "root" || cfg.Password != want {
			t.Errorf("file %q: user %q password %q, want root and %q", content, cfg.Username, cfg.Password, want)
		}
	}
	os.WriteFile(pw, []byte("\n"), 0o600)
	cfg := clientv3.Config{}
	if err := (Config{Username: "root", PasswordFile: pw}).Apply(&cfg, nil); err == nil || !strings.Contains(err.Error(), pw) {
		t.Errorf("an empty password file: %v, want an error naming it", err)
	}
	missing := filepath.Join(dir, "none")
	if err := (Config{Username: "root", PasswordFile: missing}).Apply(&cfg, nil); err == nil || !strings.Contains(err.Error(), "--etcd-password-file") {
		t.Errorf("a missing password file: %v, want an error naming the flag", err)
	}
	cfg = clientv3.Config{Endpoints: []string{"https://127.0.0.1:2379"}}
	if err := (Config{CACert: filepath.Join(dir, "ca.crt")}).Apply(&cfg, nil); err == nil || !strings.Contains(err.Error(), "ca.crt") {
		t.Errorf("a missing CA file: %v, want an error naming it", err)
	}
}
