// Package server implements baton.observer.v1.ObserverService over the
// observer's cache: validate the request, read the cache (waiting for
// min_revision), translate errors to gRPC codes once, here.
package server

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"time"

	observerv1 "github.com/batonrun/baton/proto/baton/observer/v1"
	"github.com/batonrun/baton/services/observer/internal/cache"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Page sizes of List.
const (
	DefaultPageSize = 100
	MaxPageSize     = 10000
)

// Observer is what the server needs besides the cache.
type Observer interface {
	// Nudge asks every watch for a progress notification (min_revision
	// waits call it so an idle prefix catches up quickly).
	Nudge()
	// ReadWaited observes how long a read with a min_revision waited for
	// the cache to reach it.
	ReadWaited(d time.Duration)
	// Status describes the watches, outboxes and rules; with a queue, only
	// that queue's rules and the declarations' revision.
	Status(queue string) *observerv1.StatusResponse
}

type server struct {
	observerv1.UnimplementedObserverServiceServer
	cache *cache.Cache
	obs   Observer
}

var _ observerv1.ObserverServiceServer = (*server)(nil)

// New returns the service implementation.
func New(c *cache.Cache, obs Observer) observerv1.ObserverServiceServer {
	return &server{cache: c, obs: obs}
}

// waitError translates a failed min_revision wait.
func waitError(err error, rev, have int64) error {
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		return status.Errorf(codes.DeadlineExceeded, "cache at revision %d has not reached min_revision %d", have, rev)
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, "canceled while waiting for min_revision")
	default:
		return status.Error(codes.Internal, err.Error())
	}
}

// wait waits for the cache to reach rev on prefixes, and reports how long
// that took.
func (s *server) wait(ctx context.Context, rev int64, prefixes ...string) error {
	start := time.Now()
	if err := s.cache.Wait(ctx, rev, s.obs.Nudge, prefixes...); err != nil {
		return waitError(err, rev, s.cache.Revision(prefixes...))
	}
	s.obs.ReadWaited(time.Since(start))
	return nil
}

func (s *server) Get(ctx context.Context, req *observerv1.GetRequest) (*observerv1.GetResponse, error) {
	if req.GetKey() == "" {
		return nil, status.Error(codes.InvalidArgument, "key is empty")
	}
	if req.GetMinRevision() < 0 {
		return nil, status.Errorf(codes.InvalidArgument, "min_revision %d is negative", req.GetMinRevision())
	}
	prefix, ok := s.cache.PrefixOf(req.GetKey())
	if !ok {
		return nil, status.Errorf(codes.InvalidArgument, "key %q is under no watched prefix (%v)", req.GetKey(), s.cache.Prefixes())
	}
	if rev := req.GetMinRevision(); rev > 0 {
		if err := s.wait(ctx, rev, prefix); err != nil {
			return nil, err
		}
		if _, ok := s.cache.PrefixOf(req.GetKey()); !ok {
			// Its prefix stopped being watched while the read waited.
			return nil, status.Errorf(codes.InvalidArgument, "key %q is under no watched prefix (%v)", req.GetKey(), s.cache.Prefixes())
		}
	}
	// The revision is read before the object: the object is then at least
	// as new as the revision claims.
	rev := s.cache.Revision(prefix)
	obj, ok := s.cache.Get(req.GetKey())
	if !ok {
		return nil, status.Errorf(codes.NotFound, "%s not found at revision %d", req.GetKey(), rev)
	}
	return &observerv1.GetResponse{Object: obj.Value, ModRevision: obj.ModRevision, Revision: rev}, nil
}

func (s *server) List(ctx context.Context, req *observerv1.ListRequest) (*observerv1.ListResponse, error) {
	owner := cache.Owner{UID: req.GetOwnerUid(), Kind: req.GetOwnerKind(), Name: req.GetOwnerName(), Namespace: req.GetOwnerNamespace()}
	switch {
	case (owner.Kind == "") != (owner.Name == ""):
		return nil, status.Error(codes.InvalidArgument, "owner_kind and owner_name go together")
	case owner.Namespace != "" && owner.Kind == "":
		return nil, status.Error(codes.InvalidArgument, "owner_namespace needs owner_kind and owner_name")
	case req.GetPageSize() > MaxPageSize:
		return nil, status.Errorf(codes.InvalidArgument, "page_size %d is above %d", req.GetPageSize(), MaxPageSize)
	case req.GetMinRevision() < 0:
		return nil, status.Errorf(codes.InvalidArgument, "min_revision %d is negative", req.GetMinRevision())
	}
	after, err := decodeToken(req.GetPageToken())
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "page_token: %v", err)
	}
	size := int(req.GetPageSize())
	if size == 0 {
		size = DefaultPageSize
	}
	prefixes := s.cache.Covering(req.GetPrefix())
	if rev := req.GetMinRevision(); rev > 0 && len(prefixes) > 0 {
		if err := s.wait(ctx, rev, prefixes...); err != nil {
			return nil, err
		}
	}
	rev := s.cache.Revision(prefixes...)
	items, more := s.cache.List(req.GetPrefix(), owner, after, size)
	resp := &observerv1.ListResponse{Items: make([]*observerv1.Object, len(items)), Revision: rev}
	for i, o := range items {
		resp.Items[i] = &observerv1.Object{Key: o.Key, Value: o.Value, ModRevision: o.ModRevision}
	}
	if more {
		resp.NextPageToken = encodeToken(items[len(items)-1].Key)
	}
	return resp, nil
}

func (s *server) Status(_ context.Context, req *observerv1.StatusRequest) (*observerv1.StatusResponse, error) {
	return s.obs.Status(req.GetQueue()), nil
}

// A page token is the last key of the previous page, opaque to clients.
func encodeToken(lastKey string) string {
	return base64.RawURLEncoding.EncodeToString([]byte("k:" + lastKey))
}

func decodeToken(tok string) (string, error) {
	if tok == "" {
		return "", nil
	}
	b, err := base64.RawURLEncoding.DecodeString(tok)
	if err != nil || len(b) < 2 || string(b[:2]) != "k:" {
		return "", fmt.Errorf("not a token from a previous List")
	}
	return string(b[2:]), nil
}
