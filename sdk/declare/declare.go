// Package declare publishes what controllers watch: each controller's
// kinds.Declaration, as JSON, at its Key() in etcd
// (/baton/rules/<queue>), where the observer finds the rules to announce
// the controller's keys by and batonctl finds the controller's kinds.
//
// A declaration describes the controller, not the process, as a
// CustomResourceDefinition does: it is written before the worker leases and
// stays when the worker stops. Every replica of a worker publishes the same
// value, so Publish writes only a value that differs from the stored one:
// one compare-and-put transaction per declaration, which changes nothing
// (and makes no etcd revision) when the value is already there.
//
//	err := declare.Publish(ctx, etcdClient, kinds.BuiltinDeclarations(), log)
//
// Most SDK users do not call it: a manager.Manager given Options.Etcd
// publishes its controllers' declarations before it starts leasing.
package declare

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/batonrun/baton/client/kinds"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The bounded retry of an etcd failure: Attempts tries, the first pause
// FirstBackoff, each pause twice the one before; each call bounded by
// CallTimeout. Together about 6 s of pauses, so a worker started a moment
// before etcd answers waits for it, and one that cannot reach etcd fails
// instead of running with its watches undeclared.
const (
	Attempts     = 6
	FirstBackoff = 200 * time.Millisecond
	CallTimeout  = 5 * time.Second
)

// Publish writes each declaration at its Key(), unless etcd already holds
// exactly that value. Every declaration is checked before anything is
// written. An etcd failure is retried as the constants above say; the
// error names the declaration that could not be written. log (nil
// discards) hears of each declaration written.
func Publish(ctx context.Context, kv clientv3.KV, decls []kinds.Declaration, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	values := make([][]byte, len(decls))
	seen := map[string]bool{}
	for i, d := range decls {
		data, err := d.Marshal()
		if err != nil {
			return fmt.Errorf("declare: %w", err)
		}
		if seen[d.Queue] {
			return fmt.Errorf("declare: queue %s is declared twice", d.Queue)
		}
		seen[d.Queue] = true
		values[i] = data
	}
	for i, d := range decls {
		changed, err := publish(ctx, kv, d.Key(), values[i])
		if err != nil {
			return fmt.Errorf("declare: publish %s: %w", d.Key(), err)
		}
		if changed {
			log.Info("declared what a controller watches", "queue", d.Queue, "key", d.Key(), "for", d.For.Kind, "owns", len(d.Owns))
		}
	}
	return nil
}

// publish puts value at key unless it is there already, retrying etcd
// failures; it reports whether it wrote.
func publish(ctx context.Context, kv clientv3.KV, key string, value []byte) (bool, error) {
	pause := FirstBackoff
	var err error
	for attempt := 1; ; attempt++ {
		cctx, cancel := context.WithTimeout(ctx, CallTimeout)
		var resp *clientv3.TxnResponse
		resp, err = kv.Txn(cctx).
			If(clientv3.Compare(clientv3.Value(key), "=", string(value))).
			Else(clientv3.OpPut(key, string(value))).
			Commit()
		cancel()
		if err == nil {
			return !resp.Succeeded, nil
		}
		if attempt == Attempts || ctx.Err() != nil {
			return false, err
		}
		select {
		case <-ctx.Done():
			return false, err
		case <-time.After(pause):
		}
		pause *= 2
	}
}
