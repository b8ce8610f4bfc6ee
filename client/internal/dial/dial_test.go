package dial

import (
	"context"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/batonrun/baton/client/certs"
	"github.com/batonrun/baton/client/tlsfiles"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

func TestAddrs(t *testing.T) {
	got, err := Addrs(" a:1, b:2 ,,")
	if err != nil || strings.Join(got, ",") != "a:1,b:2" {
		t.Fatalf("Addrs = %v, %v", got, err)
	}
	for _, bad := range []string{"", " , ", "a", "a:1,b", "a:"} {
		if _, err := Addrs(bad); err == nil {
			t.Errorf("Addrs(%q) accepted", bad)
		}
	}
	if _, err := Conn("queue", "nohost", Options{}); err == nil || !strings.Contains(err.Error(), "dial queue") {
		t.Errorf("Conn of a bad address = %v, want an error naming the service", err)
	}
}

// serveHealth serves grpc.health.v1 on a fresh loopback port.
func serveHealth(t *testing.T) (addr string, stop func()) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	healthpb.RegisterHealthServer(s, health.NewServer())
	go s.Serve(lis)
	t.Cleanup(s.Stop)
	return lis.Addr().String(), s.Stop
}

// deadAddr is a loopback address nothing listens on.
func deadAddr(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := lis.Addr().String()
	lis.Close()
	return addr
}

// callUntil retries a health check, as the clients retry UNAVAILABLE,
// until it succeeds or d passes.
func callUntil(t *testing.T, conn *grpc.ClientConn, d time.Duration) error {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		_, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
		cancel()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func TestConnFailsOverToTheNextAddress(t *testing.T) {
	dead := deadAddr(t)
	first, stopFirst := serveHealth(t)
	second, _ := serveHealth(t)

	conn, err := Conn("queue", dead+","+first+","+second, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := callUntil(t, conn, 10*time.Second); err != nil {
		t.Fatalf("with the first address dead: %v", err)
	}
	stopFirst()
	if err := callUntil(t, conn, 10*time.Second); err != nil {
		t.Fatalf("after the serving address stopped: %v", err)
	}
}

// TestMembersMoveOnWhenTold: calls stay on the current member, even one
// whose answers are refusals, until Next moves them; Next from a stale
// index (another caller moved them already) does nothing, and the last
// member wraps to the first.
func TestMembersMoveOnWhenTold(t *testing.T) {
	refusing, _ := serveHealth(t)
	other, _ := serveHealth(t)
	m, err := MemberConns("queue", refusing+","+other+","+deadAddr(t), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	check := func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_, err := healthpb.NewHealthClient(m).Check(ctx, &healthpb.HealthCheckRequest{})
		return err
	}
	if err := check(); err != nil || m.Current() != 0 {
		t.Fatalf("first call: %v on member %d", err, m.Current())
	}
	m.Next(0)
	m.Next(0) // stale: moved already
	if m.Current() != 1 {
		t.Fatalf("after Next(0) twice: member %d, want 1", m.Current())
	}
	if err := check(); err != nil {
		t.Fatalf("on the second member: %v", err)
	}
	m.Next(1)
	if err := check(); err == nil {
		t.Fatal("a call on the dead third member succeeded")
	}
	m.Next(2)
	if m.Current() != 0 {
		t.Fatalf("after the last member: %d, want 0", m.Current())
	}
	if _, err := MemberConns("queue", "a:1,nohost", Options{}); err == nil {
		t.Error("MemberConns accepted a bad address")
	}
}

func TestConnOneAddressFailsWhenItIsDown(t *testing.T) {
	conn, err := Conn("queue", deadAddr(t), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if _, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{}); err == nil {
		t.Fatal("a call to a dead address succeeded")
	}
}

// tlsFiles writes a CA and certificates named by leaves into a new
// directory and returns the Source of each, verifying against the CA.
func tlsFiles(t *testing.T, leaves ...certs.Leaf) map[string]*tlsfiles.Source {
	t.Helper()
	dir := t.TempDir()
	now := time.Now()
	ca, err := certs.NewCA(2, now)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := certs.Init(dir, ca, leaves, false, now); err != nil {
		t.Fatal(err)
	}
	out := map[string]*tlsfiles.Source{}
	for _, l := range leaves {
		src, err := tlsfiles.Load(tlsfiles.Config{
			CertFile: filepath.Join(dir, l.Name+".crt"), KeyFile: filepath.Join(dir, l.Name+".key"),
			CAFile: filepath.Join(dir, "ca.crt"),
		})
		if err != nil {
			t.Fatal(err)
		}
		out[l.Name] = src
	}
	return out
}

// TestConnTLSVerifiesEachAddressHost dials a list over TLS whose live
// member has a certificate for "localhost" only: reached by that name it
// answers; reached by its IP address it must not, since each address is
// verified against its own host (not the target, which is the whole list).
func TestConnTLSVerifiesEachAddressHost(t *testing.T) {
	src := tlsFiles(t,
		certs.Leaf{Name: "server", Hosts: []string{"localhost"}, Days: 1},
		certs.Leaf{Name: "client", Days: 1})
	creds, err := src["server"].ServerCredentials(tlsfiles.RequireClientCert)
	if err != nil {
		t.Fatal(err)
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer(grpc.Creds(creds))
	healthpb.RegisterHealthServer(s, health.NewServer())
	go s.Serve(lis)
	t.Cleanup(s.Stop)
	_, port, _ := net.SplitHostPort(lis.Addr().String())
	dead := deadAddr(t)

	for _, single := range []bool{true, false} {
		list := func(host string) string {
			if single {
				return net.JoinHostPort(host, port)
			}
			return dead + "," + net.JoinHostPort(host, port)
		}
		conn, err := Conn("queue", list("localhost"), Options{TLS: src["client"]})
		if err != nil {
			t.Fatal(err)
		}
		if err := callUntil(t, conn, 10*time.Second); err != nil {
			t.Errorf("%s: %v", list("localhost"), err)
		}
		conn.Close()

		conn, err = Conn("queue", list("127.0.0.1"), Options{TLS: src["client"]})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err = healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
		cancel()
		conn.Close()
		if err == nil || !strings.Contains(err.Error(), "127.0.0.1") {
			t.Errorf("%s, whose certificate names localhost only: %v, want a refusal naming 127.0.0.1", list("127.0.0.1"), err)
		}
	}
}
