package service

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestReplicationFlagsRefused: each bad combination of the replication
// flags is refused by Validate, naming the flag; good ones pass.
func TestReplicationFlagsRefused(t *testing.T) {
	base := DefaultConfig()
	base.Name = "a"
	for _, tc := range []struct {
		name    string
		change  func(*Config)
		wantErr string // "" for none
	}{
		{"three members", func(c *Config) { c.InitialCluster = "a=10.0.0.1:7072,b=10.0.0.2:7072,c=10.0.0.3:7072" }, ""},
		{"one member", func(c *Config) { c.InitialCluster = "a=10.0.0.1:7072" }, ""},
		{"single (none)", func(c *Config) { c.InitialCluster = "" }, ""},
		{"no =", func(c *Config) { c.InitialCluster = "a=10.0.0.1:7072,b" }, `"b" is not name=host:port`},
		{"bad name", func(c *Config) { c.InitialCluster = "a=10.0.0.1:7072,b c=10.0.0.2:7072" }, "--initial-cluster: a member name"},
		{"bad address", func(c *Config) { c.InitialCluster = "a=10.0.0.1" }, "a's peer address"},
		{"wildcard address", func(c *Config) { c.InitialCluster = "a=0.0.0.0:7072" }, "a's peer address"},
		{"named twice", func(c *Config) { c.InitialCluster = "a=10.0.0.1:7072,a=10.0.0.2:7072" }, `member "a" is named twice`},
		{"one address twice", func(c *Config) { c.InitialCluster = "a=10.0.0.1:7072,b=10.0.0.1:7072" }, "have one peer address"},
		{"not this member", func(c *Config) { c.InitialCluster = "b=10.0.0.2:7072" }, `does not name this member, --name "a"`},
		{"no peer address", func(c *Config) { c.InitialCluster = "a=10.0.0.1:7072"; c.PeerAddr = "" }, "--peer-addr is empty"},
		{"no heartbeat", func(c *Config) { c.InitialCluster = "a=10.0.0.1:7072"; c.HeartbeatInterval = 0 }, "--heartbeat-interval must be positive"},
		{"short election", func(c *Config) {
			c.InitialCluster = "a=10.0.0.1:7072"
			c.ElectionTimeout = 400 * time.Millisecond
		}, "--election-timeout (400ms) must be at least 5 times --heartbeat-interval (100ms)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := base
			tc.change(&c)
			err := c.Validate()
			switch {
			case tc.wantErr == "" && err != nil:
				t.Fatalf("Validate: %v, want nil", err)
			case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
				t.Fatalf("Validate: %v, want an error with %q", err, tc.wantErr)
			}
		})
	}
}

// TestMemberIDs: ids come from names alone, differ for different names and
// are never raft's "none"; the cluster id does not depend on the order of
// --initial-cluster.
func TestMemberIDs(t *testing.T) {
	if a1, a2 := memberID("a"), memberID("a"); a1 != a2 || a1 == memberID("b") || a1 == 0 {
		t.Fatalf("memberID: a=%d b=%d", memberID("a"), memberID("b"))
	}
	x, err := parseInitialCluster("a=h1:1,b=h2:2,c=h3:3")
	if err != nil {
		t.Fatal(err)
	}
	y, err := parseInitialCluster("c=h3:3,a=h1:1,b=h2:2")
	if err != nil {
		t.Fatal(err)
	}
	z, err := parseInitialCluster("a=h1:1,b=h2:2,c=h4:3")
	if err != nil {
		t.Fatal(err)
	}
	if clusterID(x) != clusterID(y) || clusterID(x) == clusterID(z) {
		t.Fatalf("clusterID: %d %d %d", clusterID(x), clusterID(y), clusterID(z))
	}
}

// TestReplicatedRefusesSingleStore: a replicated member does not start on
// a directory holding a single member's log.
func TestReplicatedRefusesSingleStore(t *testing.T) {
	dir := t.TempDir()
	if err := refuseSingleStore(dir); err != nil {
		t.Fatalf("an empty directory: %v", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "wal-0000000000000001.log"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := refuseSingleStore(dir); err == nil || !strings.Contains(err.Error(), "holds a single member's store") {
		t.Fatalf("a directory with a store: %v", err)
	}
}
