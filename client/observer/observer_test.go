package observer

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"

	observerv1 "github.com/batonrun/baton/proto/baton/observer/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// pages serves List in pages of two and Get of one key, over real gRPC:
// the client's paging and error translation at its network boundary (the
// observer's own tests, and the workers', run it against the real server).
type pages struct {
	observerv1.UnimplementedObserverServiceServer
	keys []string
	seen []*observerv1.ListRequest
}

func (p *pages) List(_ context.Context, req *observerv1.ListRequest) (*observerv1.ListResponse, error) {
	p.seen = append(p.seen, req)
	start := 0
	if req.GetPageToken() != "" {
		start, _ = strconv.Atoi(req.GetPageToken())
	}
	end := min(start+2, len(p.keys))
	resp := &observerv1.ListResponse{Revision: int64(100 + start)}
	for _, k := range p.keys[start:end] {
		resp.Items = append(resp.Items, &observerv1.Object{Key: k, Value: []byte(`{}`), ModRevision: 7})
	}
	if end < len(p.keys) {
		resp.NextPageToken = strconv.Itoa(end)
	}
	return resp, nil
}

func (p *pages) Get(_ context.Context, req *observerv1.GetRequest) (*observerv1.GetResponse, error) {
	if req.GetKey() != "/registry/pods/default/a" {
		return nil, status.Error(codes.NotFound, "no such key")
	}
	return &observerv1.GetResponse{Object: []byte(`{"kind":"Pod"}`), ModRevision: 5, Revision: 9}, nil
}

func serve(t *testing.T, srv observerv1.ObserverServiceServer) *Client {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	observerv1.RegisterObserverServiceServer(gs, srv)
	go gs.Serve(l)
	t.Cleanup(gs.Stop)
	c, err := Dial(l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestListFollowsPages(t *testing.T) {
	p := &pages{}
	for i := range 5 {
		p.keys = append(p.keys, fmt.Sprintf("/registry/pods/default/p%d", i))
	}
	c := serve(t, p)
	objs, rev, err := c.List(t.Context(), ListOptions{Prefix: "/registry/pods/", Owner: Owner{Kind: "ReplicaSet", Name: "web"}, MinRevision: 50})
	if err != nil || len(objs) != 5 || objs[4].Key != p.keys[4] || rev != 104 {
		t.Fatalf("List: %d objects, revision %d, %v", len(objs), rev, err)
	}
	if len(p.seen) != 3 || p.seen[0].GetOwnerKind() != "ReplicaSet" || p.seen[0].GetMinRevision() != 50 || p.seen[1].GetMinRevision() != 100 {
		t.Fatalf("requests: %v", p.seen)
	}
}

func TestGet(t *testing.T) {
	c := serve(t, &pages{})
	obj, err := c.Get(t.Context(), "/registry/pods/default/a", 3)
	if err != nil || string(obj.Value) != `{"kind":"Pod"}` || obj.ModRevision != 5 {
		t.Fatalf("Get: %+v %v", obj, err)
	}
	if _, err := c.Get(t.Context(), "/registry/pods/default/gone", 0); !errors.Is(err, ErrNotFound) || status.Code(err) == codes.OK {
		t.Fatalf("Get of a missing key: %v, want ErrNotFound", err)
	}
}

// TestHealthy: Healthy is nil while the observer's health service says
// SERVING for ObserverService, ErrNotServing naming the status while it
// says another, and the call's error when nothing answers.
func TestHealthy(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	hs := health.NewServer()
	healthpb.RegisterHealthServer(gs, hs)
	go gs.Serve(l)
	t.Cleanup(gs.Stop)
	c, err := Dial(l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	svc := observerv1.ObserverService_ServiceDesc.ServiceName
	hs.SetServingStatus(svc, healthpb.HealthCheckResponse_NOT_SERVING)
	if err := c.Healthy(t.Context()); !errors.Is(err, ErrNotServing) || !strings.Contains(err.Error(), "NOT_SERVING") {
		t.Errorf("not serving: %v, want ErrNotServing naming NOT_SERVING", err)
	}
	hs.SetServingStatus(svc, healthpb.HealthCheckResponse_SERVING)
	if err := c.Healthy(t.Context()); err != nil {
		t.Errorf("serving: %v", err)
	}
	gs.Stop()
	if err := c.Healthy(t.Context()); status.Code(err) != codes.Unavailable || errors.Is(err, ErrNotServing) {
		t.Errorf("stopped: %v, want UNAVAILABLE", err)
	}
}
