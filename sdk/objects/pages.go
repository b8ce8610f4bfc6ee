package objects

// ListPages: a walk over many objects, a page at a time, through the
// observer's cache or etcd.

import (
	"context"
	"fmt"

	observerclient "github.com/batonrun/baton/client/observer"
	observerv1 "github.com/batonrun/baton/proto/baton/observer/v1"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// ListPages calls fn with the objects under prefix, in key order, at most
// size at a time, reading through the cache (or etcd) as List does; fn's
// error ends the walk and is returned. A walk over every object of a kind
// (the garbage collector's scan at its start) so holds one page, not the
// whole kind. Pages are read one after another, not at one revision: an
// object changed during the walk may be seen as it was, or as it is.
// A Cache other than the observer's is read whole and handed on in pages.
func (s *Client) ListPages(ctx context.Context, prefix string, size int, fn func(page []Raw) error) error {
	if size <= 0 || size > observerclient.MaxPageSize {
		return fmt.Errorf("objects: page size %d, want 1 to %d", size, observerclient.MaxPageSize)
	}
	switch c := s.cache.(type) {
	case nil:
		return s.etcdPages(ctx, prefix, size, fn)
	case observerCache:
		return s.observerPages(ctx, c.c, prefix, size, fn)
	}
	raws, err := s.List(ctx, prefix, OwnedBy{})
	if err != nil {
		return err
	}
	for len(raws) > 0 {
		n := min(size, len(raws))
		if err := fn(raws[:n]); err != nil {
			return err
		}
		raws = raws[n:]
	}
	return nil
}

func (s *Client) observerPages(ctx context.Context, o *observerclient.Client, prefix string, size int, fn func([]Raw) error) error {
	token := ""
	for {
		s.cacheReads.Add(1)
		octx, cancel := context.WithTimeout(ctx, s.opTimeout)
		resp, err := o.Raw().List(octx, &observerv1.ListRequest{
			Prefix: prefix, PageSize: uint32(size), PageToken: token, MinRevision: s.readRevision(ctx),
		})
		cancel()
		if err != nil {
			return fmt.Errorf("list %s from the observer: %w", prefix, err)
		}
		page := make([]Raw, 0, len(resp.GetItems()))
		for _, it := range resp.GetItems() {
			page = append(page, Raw{Key: it.GetKey(), Value: it.GetValue(), ModRevision: it.GetModRevision()})
		}
		if len(page) > 0 {
			if err := fn(page); err != nil {
				return err
			}
		}
		if token = resp.GetNextPageToken(); token == "" {
			return nil
		}
	}
}

func (s *Client) etcdPages(ctx context.Context, prefix string, size int, fn func([]Raw) error) error {
	end := clientv3.GetPrefixRangeEnd(prefix)
	from := prefix
	for {
		s.etcdReads.Add(1)
		octx, cancel := context.WithTimeout(ctx, s.opTimeout)
		resp, err := s.etcd.Get(octx, from, clientv3.WithRange(end), clientv3.WithLimit(int64(size)))
		cancel()
		if err != nil {
			return fmt.Errorf("list %s from etcd: %w", prefix, err)
		}
		page := make([]Raw, 0, len(resp.Kvs))
		for _, kv := range resp.Kvs {
			page = append(page, Raw{Key: string(kv.Key), Value: kv.Value, ModRevision: kv.ModRevision})
		}
		if len(page) > 0 {
			if err := fn(page); err != nil {
				return err
			}
		}
		if !resp.More || len(page) == 0 {
			return nil
		}
		from = page[len(page)-1].Key + "\x00"
	}
}
