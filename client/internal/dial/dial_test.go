package dial

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

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
	if _, err := Conn("queue", "nohost"); err == nil || !strings.Contains(err.Error(), "dial queue") {
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

	conn, err := Conn("queue", dead+","+first+","+second)
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

func TestConnOneAddressFailsWhenItIsDown(t *testing.T) {
	conn, err := Conn("queue", deadAddr(t))
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
