package service

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strings"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	observerclient "github.com/batonrun/baton/client/observer"
	queueclient "github.com/batonrun/baton/client/queue"
	observerv1 "github.com/batonrun/baton/proto/baton/observer/v1"
	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
	"github.com/batonrun/baton/services/experiment/internal/experiment"
	"github.com/batonrun/baton/services/runtime/flagenv"
)

// connect reaches etcd, the queue and the observer, each within
// cfg.Timeout, and says at once which one does not answer, naming its
// address and the flag that sets it.
func connect(ctx context.Context, cfg Config) (experiment.Env, func(), error) {
	env := experiment.Env{ObserverAddr: cfg.ObserverAddr}
	var closers []func()
	closeAll := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	fail := func(err error) (experiment.Env, func(), error) {
		closeAll()
		return experiment.Env{}, func() {}, err
	}

	eps := flagenv.SplitList(cfg.EtcdEndpoints)
	var hosts []string
	for _, e := range eps {
		if u, err := url.Parse(e); err == nil && u.Host != "" {
			hosts = append(hosts, u.Host)
		} else {
			hosts = append(hosts, e)
		}
	}
	if err := refused("etcd", cfg.EtcdEndpoints, "--etcd-endpoints", hosts...); err != nil {
		return fail(err)
	}
	etcdCfg := clientv3.Config{Endpoints: eps, DialTimeout: cfg.Timeout, Logger: zap.NewNop(), DialKeepAliveTime: 30 * time.Second}
	if err := cfg.Etcd.Apply(&etcdCfg, nil); err != nil {
		return fail(err)
	}
	etcd, err := clientv3.New(etcdCfg)
	if err != nil {
		return fail(unreachable("etcd", cfg.EtcdEndpoints, "--etcd-endpoints", err))
	}
	closers = append(closers, func() { etcd.Close() })
	pctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
	_, err = etcd.Get(pctx, experiment.Unwatched, clientv3.WithCountOnly())
	cancel()
	if err != nil {
		return fail(unreachable("etcd", cfg.EtcdEndpoints, "--etcd-endpoints", err))
	}
	env.Etcd = etcd

	src, err := cfg.TLS.Load(nil)
	if err != nil {
		return fail(err)
	}
	var queueOpts []queueclient.Option
	var observerOpts []observerclient.Option
	if src != nil {
		queueOpts = append(queueOpts, queueclient.WithTLS(src))
		observerOpts = append(observerOpts, observerclient.WithTLS(src))
	}
	q, err := queueclient.Dial(cfg.QueueAddr, queueOpts...)
	if err != nil {
		return fail(unreachable("the queue", cfg.QueueAddr, "--queue-addr", err))
	}
	closers = append(closers, func() { q.Close() })
	pctx, cancel = context.WithTimeout(ctx, cfg.Timeout)
	// One raw call: the probe answers now, it does not retry through a
	// restart as the client does.
	_, err = q.Raw().Stats(pctx, &queuev1.StatsRequest{})
	cancel()
	if err != nil && isUnreachable(err) {
		return fail(unreachable("the queue", cfg.QueueAddr, "--queue-addr", err))
	}
	env.Queue = q

	obs, err := observerclient.Dial(cfg.ObserverAddr, observerOpts...)
	if err != nil {
		return fail(unreachable("the observer", cfg.ObserverAddr, "--observer-addr", err))
	}
	closers = append(closers, func() { obs.Close() })
	pctx, cancel = context.WithTimeout(ctx, cfg.Timeout)
	_, err = obs.Raw().Status(pctx, &observerv1.StatusRequest{})
	cancel()
	if err != nil && isUnreachable(err) {
		return fail(unreachable("the observer", cfg.ObserverAddr, "--observer-addr", err))
	}
	env.Observer = obs
	return env, closeAll, nil
}

// refused fails at once, naming the server and the flag, when every one of
// addrs refuses a connection: nothing listens there, and waiting out the
// timeout (the etcd client retries until it ends) would only end in
// "context deadline exceeded". An address that does not refuse (or does not
// answer within a second) is left to the real call.
func refused(what, flagValue, flagName string, addrs ...string) error {
	for _, addr := range addrs {
		conn, err := net.DialTimeout("tcp", addr, time.Second)
		if err == nil {
			conn.Close()
			return nil
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			return nil
		}
	}
	return fmt.Errorf("connection refused: is %s running at %s? (set %s)", what, flagValue, flagName)
}

// unreachable words a connection failure so that it names the endpoint and
// the flag that sets it, on one line.
func unreachable(what, addr, flagName string, err error) error {
	if strings.Contains(err.Error(), "connection refused") {
		return fmt.Errorf("connection refused: is %s running at %s? (set %s)", what, addr, flagName)
	}
	return fmt.Errorf("cannot reach %s at %s (set %s): %s", what, addr, flagName, strings.ReplaceAll(err.Error(), "\n", "; "))
}

func isUnreachable(err error) bool {
	if errors.Is(err, context.DeadlineExceeded) {
		return true
	}
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded:
		return true
	}
	s := err.Error()
	return strings.Contains(s, "connection refused") || strings.Contains(s, "deadline exceeded") || strings.Contains(s, "no such host")
}
