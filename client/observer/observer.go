// Package observer is the Go client of baton.observer.v1.ObserverService,
// the shared informer's cache: reads of one object or of a prefix (only the
// children of an owner, if asked), at least as new as a revision the caller
// names, so a worker reads its own writes; pages are followed here.
//
//	c, err := observer.Dial("127.0.0.1:7071")
//	obj, err := c.Get(ctx, "/registry/replicasets/default/web", rev)
//	if errors.Is(err, observer.ErrNotFound) { … }
//	pods, err := c.List(ctx, observer.ListOptions{Prefix: "/registry/pods/default/",
//		Owner: observer.Owner{Kind: "ReplicaSet", Name: "web", Namespace: "default"}, MinRevision: rev})
package observer

import (
	"context"
	"errors"
	"fmt"

	"github.com/batonrun/baton/client/internal/dial"
	"github.com/batonrun/baton/client/tlsfiles"
	observerv1 "github.com/batonrun/baton/proto/baton/observer/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// MaxPageSize is the largest page the observer serves; List asks for it.
const MaxPageSize = 10000

// ErrNotFound is returned by Get when the cache holds no object at the key
// (at a revision at least the one asked for).
var ErrNotFound = errors.New("observer: not found")

// Client reads the observer's cache. It is safe for concurrent use.
type Client struct {
	conn *grpc.ClientConn // nil when built with New
	cc   grpc.ClientConnInterface
	rpc  observerv1.ObserverServiceClient
}

// Option configures Dial.
type Option func(*options)

// options are Dial's.
type options struct{ tls *tlsfiles.Source }

// WithTLS makes Dial connect over TLS (docs/security.md): the client
// presents src's certificate, if it has one (an observer with a CA
// requires one), and verifies the observer's against src's CA bundle and
// the host of each address dialed. The files are re-read when they change.
func WithTLS(src *tlsfiles.Source) Option { return func(o *options) { o.tls = src } }

// Dial connects to the observer at addr (host:port, or a comma-separated
// list to fail over between). It dials plaintext gRPC unless WithTLS is
// given.
func Dial(addr string, opts ...Option) (*Client, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	conn, err := dial.Conn("observer", addr, dial.Options{TLS: o.tls})
	if err != nil {
		return nil, err
	}
	c := New(conn)
	c.conn = conn
	return c, nil
}

// New wraps an existing connection; Close then leaves it open.
func New(conn grpc.ClientConnInterface) *Client {
	return &Client{cc: conn, rpc: observerv1.NewObserverServiceClient(conn)}
}

// Close closes the connection made by Dial.
func (c *Client) Close() error {
	if c.conn == nil {
		return nil
	}
	return c.conn.Close()
}

// Raw returns the generated client, for calls this package does not wrap.
func (c *Client) Raw() observerv1.ObserverServiceClient { return c.rpc }

// Object is one cached object: its etcd key, its JSON value and the
// revision that last changed it.
type Object struct {
	Key         string
	Value       []byte
	ModRevision int64
}

// Get reads the object at key, from a cache at least at minRevision (0:
// whatever the cache has); the call waits for the cache to catch up within
// ctx's deadline.
func (c *Client) Get(ctx context.Context, key string, minRevision int64) (Object, error) {
	resp, err := c.rpc.Get(ctx, &observerv1.GetRequest{Key: key, MinRevision: minRevision})
	if status.Code(err) == codes.NotFound {
		return Object{}, fmt.Errorf("get %s: %w", key, ErrNotFound)
	}
	if err != nil {
		return Object{}, fmt.Errorf("get %s from the observer: %w", key, err)
	}
	return Object{Key: key, Value: resp.GetObject(), ModRevision: resp.GetModRevision()}, nil
}

// Owner selects the children of one owner: objects whose
// metadata.ownerReferences name it. Empty fields do not filter.
type Owner struct {
	Kind, Name, Namespace, UID string
}

// ListOptions qualify a List.
type ListOptions struct {
	// Prefix is the etcd prefix to list; it must be one the observer watches.
	Prefix string
	// Owner, if any field is set, keeps only that owner's children.
	Owner Owner
	// MinRevision: the answer reflects at least this revision.
	MinRevision int64
}

// List returns every object under o.Prefix (only o.Owner's children, if
// set), in key order, following the pages; and the cache's revision.
func (c *Client) List(ctx context.Context, o ListOptions) ([]Object, int64, error) {
	req := &observerv1.ListRequest{
		Prefix: o.Prefix, OwnerKind: o.Owner.Kind, OwnerName: o.Owner.Name, OwnerNamespace: o.Owner.Namespace,
		OwnerUid: o.Owner.UID, PageSize: MaxPageSize, MinRevision: o.MinRevision,
	}
	var out []Object
	for {
		resp, err := c.rpc.List(ctx, req)
		if err != nil {
			return out, 0, fmt.Errorf("list %s from the observer: %w", o.Prefix, err)
		}
		for _, it := range resp.GetItems() {
			out = append(out, Object{Key: it.GetKey(), Value: it.GetValue(), ModRevision: it.GetModRevision()})
		}
		if resp.GetNextPageToken() == "" {
			return out, resp.GetRevision(), nil
		}
		// Every page at least as new as the first, so the pages agree.
		req.PageToken, req.MinRevision = resp.GetNextPageToken(), max(req.MinRevision, resp.GetRevision())
	}
}

// ErrNotServing is returned by Healthy when the observer answers that it
// is not ready.
var ErrNotServing = errors.New("observer: not ready")

// Healthy returns nil when the observer's grpc.health.v1 says it is
// SERVING (what its /readyz answers: etcd answers and its first lists are
// done), an error wrapping ErrNotServing when it answers anything else,
// and the call's error when it does not answer.
func (c *Client) Healthy(ctx context.Context) error {
	resp, err := healthpb.NewHealthClient(c.cc).Check(ctx, &healthpb.HealthCheckRequest{Service: observerv1.ObserverService_ServiceDesc.ServiceName})
	if err != nil {
		return fmt.Errorf("observer health: %w", err)
	}
	if st := resp.GetStatus(); st != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("%w: its health service says %s", ErrNotServing, st)
	}
	return nil
}

// Status returns the observer's view of its watches, outbox and rules.
func (c *Client) Status(ctx context.Context) (*observerv1.StatusResponse, error) {
	resp, err := c.rpc.Status(ctx, &observerv1.StatusRequest{})
	if err != nil {
		return nil, fmt.Errorf("observer status: %w", err)
	}
	return resp, nil
}
