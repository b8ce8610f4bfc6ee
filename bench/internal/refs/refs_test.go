package refs

import (
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
)

func TestReferences(t *testing.T) {
	ctx := t.Context()
	if r, err := Fsync(ctx, t.TempDir(), 20*time.Millisecond); err != nil || r.Items == 0 {
		t.Fatalf("fsync: %+v %v", r, err)
	}
	// A server of the references elsewhere (the bench runs it in a child
	// process), and one in this process ("").
	for _, addr := range []string{serveRefs(t), ""} {
		if r, err := Echo(ctx, addr, 2, 20*time.Millisecond); err != nil || r.Calls == 0 || len(r.Latencies) != int(r.Calls) {
			t.Fatalf("echo at %q: %+v %v", addr, r, err)
		}
		r, err := Carry(ctx, addr, 2, 1000, 20*time.Millisecond)
		if err != nil || r.Calls == 0 || r.Items != 1000*r.Calls {
			t.Fatalf("carry at %q: %+v %v", addr, r, err)
		}
	}
}

// serveRefs serves the references on loopback until the test ends and
// returns their address.
func serveRefs(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	Register(s)
	go func() { _ = s.Serve(lis) }()
	t.Cleanup(s.Stop)
	return lis.Addr().String()
}

func TestKeys(t *testing.T) {
	k := Keys("c01", 5, 2)
	if len(k) != 2 || k[0] != "c01/0000005" || len(k[1]) != 11 {
		t.Fatalf("%q", k)
	}
}
