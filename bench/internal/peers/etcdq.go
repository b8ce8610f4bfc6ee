package peers

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/batonrun/baton/services/etcdembed"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// EtcdQueue is the obvious "just use etcd" queue: one key per item under a
// prefix; its value is empty while pending and "holder|expiry" while
// leased. Add puts the key (empty value, overwriting whatever was there);
// Lease reads pending keys and claims them by transaction (compare the
// key's mod_revision, put holder and expiry); Ack deletes the key if it was
// not changed since the lease (compare mod_revision), so a key announced
// again while leased stays for another delivery. Transactions hold at most
// 128 operations, etcd's default limit.
type EtcdQueue struct {
	srv      *etcdembed.Server // nil when etcd runs elsewhere
	endpoint string
	leaseFor time.Duration
	cli      *clientv3.Client
	prefix   string
}

const etcdTxnOps = 128

// StartEtcdQueue starts an embedded etcd with its data under dir; leases
// last a minute.
func StartEtcdQueue(ctx context.Context, dir string) (*EtcdQueue, error) {
	srv, err := etcdembed.Start(ctx, etcdembed.Config{Dir: dir, ClientURL: "http://127.0.0.1:0"})
	if err != nil {
		return nil, err
	}
	e, err := DialEtcdQueue(srv.Endpoints()[0], time.Minute)
	if err != nil {
		srv.Close()
		return nil, err
	}
	e.srv = srv
	return e, nil
}

// DialEtcdQueue connects to the etcd at endpoint; a lease expires after
// leaseFor.
func DialEtcdQueue(endpoint string, leaseFor time.Duration) (*EtcdQueue, error) {
	e := &EtcdQueue{endpoint: endpoint, leaseFor: leaseFor, prefix: "/q/"}
	if err := e.connect(); err != nil {
		return nil, err
	}
	return e, nil
}

func (e *EtcdQueue) connect() error {
	var err error
	e.cli, err = clientv3.New(clientv3.Config{Endpoints: []string{e.endpoint}, DialTimeout: 10 * time.Second, MaxCallSendMsgSize: 64 << 20, MaxCallRecvMsgSize: 64 << 20, Logger: zap.NewNop()})
	return err
}

// Redial drops the client and connects again (after etcd restarted: the
// client's own reconnection backs off for up to two minutes). Nothing may
// use e meanwhile.
func (e *EtcdQueue) Redial(context.Context) error {
	e.cli.Close()
	return e.connect()
}

// Unfinished counts the keys under the prefix: pending or leased.
func (e *EtcdQueue) Unfinished(ctx context.Context) (int64, error) {
	r, err := e.cli.Get(ctx, e.prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return 0, err
	}
	return r.Count, nil
}

// Add implements Queue.
func (e *EtcdQueue) Add(ctx context.Context, keys []string) error {
	for len(keys) > 0 {
		n := min(len(keys), etcdTxnOps)
		ops := make([]clientv3.Op, n)
		for i, k := range keys[:n] {
			ops[i] = clientv3.OpPut(e.prefix+k, "")
		}
		if _, err := e.cli.Txn(ctx).Then(ops...).Commit(); err != nil {
			return err
		}
		keys = keys[n:]
	}
	return nil
}

type etcdHandle struct{ rev int64 }

// Lease implements Queue: range over the prefix for free keys (pending, or
// leased with an expired lease), claim them a transaction at a time; a
// transaction that loses a race is retried key by key.
func (e *EtcdQueue) Lease(ctx context.Context, worker string, max int, wait time.Duration) ([]Leased, error) {
	deadline := time.Now().Add(wait)
	for {
		out, err := e.lease(ctx, worker, max)
		if err != nil || len(out) > 0 || time.Now().After(deadline) || ctx.Err() != nil {
			return out, err
		}
		time.Sleep(time.Millisecond)
	}
}

func (e *EtcdQueue) lease(ctx context.Context, worker string, max int) ([]Leased, error) {
	resp, err := e.cli.Get(ctx, e.prefix, clientv3.WithPrefix(), clientv3.WithLimit(int64(4*max+256)))
	if err != nil {
		return nil, err
	}
	now := time.Now()
	var free []*struct {
		key string
		rev int64
	}
	for _, kv := range resp.Kvs {
		if len(free) == max {
			break
		}
		if v := string(kv.Value); v != "" {
			if _, exp, ok := strings.Cut(v, "|"); ok {
				if ns, err := strconv.ParseInt(exp, 10, 64); err == nil && now.UnixNano() < ns {
					continue // held
				}
			}
		}
		free = append(free, &struct {
			key string
			rev int64
		}{string(kv.Key), kv.ModRevision})
	}
	holder := worker + "|" + strconv.FormatInt(now.Add(e.leaseFor).UnixNano(), 10)
	var out []Leased
	claim := func(batch []*struct {
		key string
		rev int64
	}) (bool, error) {
		cmps := make([]clientv3.Cmp, len(batch))
		ops := make([]clientv3.Op, len(batch))
		for i, f := range batch {
			cmps[i] = clientv3.Compare(clientv3.ModRevision(f.key), "=", f.rev)
			ops[i] = clientv3.OpPut(f.key, holder)
		}
		r, err := e.cli.Txn(ctx).If(cmps...).Then(ops...).Commit()
		if err != nil || !r.Succeeded {
			return false, err
		}
		for _, f := range batch {
			out = append(out, Leased{Key: strings.TrimPrefix(f.key, e.prefix), handle: etcdHandle{rev: r.Header.Revision}})
		}
		return true, nil
	}
	for len(free) > 0 {
		n := min(len(free), etcdTxnOps)
		ok, err := claim(free[:n])
		if err != nil {
			return out, err
		}
		if !ok && n > 1 {
			for i := range free[:n] {
				if _, err := claim(free[i : i+1]); err != nil {
					return out, err
				}
			}
		}
		free = free[n:]
	}
	return out, nil
}

// Ack implements Queue.
func (e *EtcdQueue) Ack(ctx context.Context, _ string, ls []Leased) error {
	del := func(batch []Leased) (bool, error) {
		cmps := make([]clientv3.Cmp, len(batch))
		ops := make([]clientv3.Op, len(batch))
		for i, l := range batch {
			k := e.prefix + l.Key
			cmps[i] = clientv3.Compare(clientv3.ModRevision(k), "=", l.handle.(etcdHandle).rev)
			ops[i] = clientv3.OpDelete(k)
		}
		r, err := e.cli.Txn(ctx).If(cmps...).Then(ops...).Commit()
		if err != nil {
			return false, fmt.Errorf("ack: %w", err)
		}
		return r.Succeeded, nil
	}
	for len(ls) > 0 {
		n := min(len(ls), etcdTxnOps)
		ok, err := del(ls[:n])
		if err != nil {
			return err
		}
		if !ok && n > 1 {
			// Some key changed since its lease (announced again): delete the
			// others; the changed ones stay pending.
			for i := range ls[:n] {
				if _, err := del(ls[i : i+1]); err != nil {
					return err
				}
			}
		}
		ls = ls[n:]
	}
	return nil
}

// Close implements Queue.
func (e *EtcdQueue) Close() error {
	e.cli.Close()
	if e.srv != nil {
		e.srv.Close()
	}
	return nil
}
