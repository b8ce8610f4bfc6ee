package service

import (
	"errors"
	"net"
	"strings"
	"testing"
)

// TestDefaultAdvertiseAddr: a wildcard host becomes the host name, any
// other host stays, and the bound port replaces --grpc-addr's; without a
// host name a wildcard cannot be advertised, and Validate says which flag
// to give.
func TestDefaultAdvertiseAddr(t *testing.T) {
	hostname = func() (string, error) { return "node-7", nil }
	t.Cleanup(func() { hostname = osHostname })
	bound := &net.TCPAddr{IP: net.IPv6unspecified, Port: 41234}
	for _, tc := range []struct {
		grpc  string
		bound net.Addr
		want  string
	}{
		{":7070", nil, "node-7:7070"},
		{"0.0.0.0:7070", nil, "node-7:7070"},
		{"[::]:7070", nil, "node-7:7070"},
		{":0", bound, "node-7:41234"},
		{"127.0.0.1:0", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 5555}, "127.0.0.1:5555"},
		{"10.1.2.3:7070", nil, "10.1.2.3:7070"},
		{"queue.internal:7070", nil, "queue.internal:7070"},
		{"[fd00::1]:7070", nil, "[fd00::1]:7070"},
	} {
		got, err := defaultAdvertiseAddr(tc.grpc, tc.bound)
		if err != nil || got != tc.want {
			t.Errorf("--grpc-addr %s, bound %v: %q, %v; want %q", tc.grpc, tc.bound, got, err, tc.want)
		}
	}

	hostname = func() (string, error) { return "", errors.New("uname failed") }
	if got, err := defaultAdvertiseAddr("127.0.0.1:7070", nil); err != nil || got != "127.0.0.1:7070" {
		t.Errorf("a host given needs no host name: %q, %v", got, err)
	}
	cfg := DefaultConfig()
	cfg.Name = "q"
	err := cfg.Validate()
	if err == nil || !strings.Contains(err.Error(), `--advertise-addr: --grpc-addr ":7070" has a wildcard host and the host name is unknown (uname failed): give --advertise-addr`) {
		t.Errorf("Validate with a wildcard --grpc-addr and no host name: %v", err)
	}
	cfg.AdvertiseAddr = "q.example:7070"
	if err := cfg.Validate(); err != nil && strings.Contains(err.Error(), "advertise") {
		t.Errorf("Validate with --advertise-addr given and no host name: %v", err)
	}
	if DefaultConfig().Name != "" {
		t.Errorf("without a host name --name defaults to %q, want empty (Validate asks for it)", DefaultConfig().Name)
	}
}
