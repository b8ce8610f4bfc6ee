package etcdembed

import (
	"testing"
	"time"
)

// StartForTest starts a server on free loopback ports in t.TempDir(),
// without fsync, with progress notifications every 100 ms and the cheapest
// password hashes (bcrypt's cost 4, for Config.AuthUser), and stops it
// when the test ends. It fails the test if etcd does not start.
func StartForTest(t testing.TB) *Server {
	t.Helper()
	return StartForTestConfig(t, Config{})
}

// StartForTestConfig is StartForTest with cfg's fields that are set taking
// precedence over the test defaults.
func StartForTestConfig(t testing.TB, cfg Config) *Server {
	t.Helper()
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	}
	if cfg.ClientURL == "" {
		cfg.ClientURL = "http://127.0.0.1:0"
	}
	if cfg.ProgressNotifyInterval == 0 {
		cfg.ProgressNotifyInterval = 100 * time.Millisecond
	}
	cfg.UnsafeNoFsync = true
	if cfg.BcryptCost == 0 {
		cfg.BcryptCost = 4 // bcrypt.MinCost
	}
	var (
		s   *Server
		err error
	)
	// A free port picked by Start can be taken before etcd binds it (other
	// tests run in parallel on the machine); try a few times.
	for range 3 {
		if s, err = Start(t.Context(), cfg); err == nil {
			break
		}
	}
	if err != nil {
		t.Fatalf("start etcd: %v", err)
	}
	t.Cleanup(s.Close)
	return s
}
