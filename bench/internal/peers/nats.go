package peers

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// NATS is a NATS JetStream server with one file-backed stream of WorkQueue
// retention and one durable pull consumer with explicit acks: the usual way
// to build a work queue on JetStream. Keys are message ids (Nats-Msg-Id), so
// the stream's duplicate window collapses a key announced again while its
// first message is still within the window. The server is embedded in this
// process (StartNATS) or runs apart from it (DialNATS, e.g. to a Proc).
type NATS struct {
	srv      *server.Server // nil when the server runs elsewhere
	url      string
	leaseFor time.Duration
	// reconnect: url lists a cluster's servers and the connection moves
	// between them (NATSCluster); otherwise it never reconnects.
	reconnect bool
	replicas  int // the stream's and consumer's; 0 is 1
	nc        *nats.Conn
	js        jetstream.JetStream
	cons      jetstream.Consumer
}

// natsOptions is the server's configuration, embedded or in a child
// process: file storage under dir, loopback only. syncAlways sets
// JetStream's sync_interval to always (fsync per write); otherwise the
// default applies (fsync every 2 minutes).
func natsOptions(dir string, port int, syncAlways bool) *server.Options {
	return &server.Options{
		Host: "127.0.0.1", Port: port, NoLog: true, NoSigs: true,
		JetStream: true, StoreDir: dir, SyncAlways: syncAlways,
		MaxPayload: 1 << 20,
	}
}

// StartNATS starts the server in this process with its store under dir (on
// the disk to measure) and sets up the stream; leases (AckWait) last a
// minute.
func StartNATS(ctx context.Context, dir string, syncAlways bool) (*NATS, error) {
	srv, err := startNATSServer(natsOptions(dir, server.RANDOM_PORT, syncAlways), 30*time.Second)
	if err != nil {
		return nil, err
	}
	n, err := DialNATS(ctx, srv.ClientURL(), time.Minute)
	if err != nil {
		srv.Shutdown()
		srv.WaitForShutdown()
		return nil, err
	}
	n.srv = srv
	return n, nil
}

// DialNATS connects to the server at url and creates the stream and the
// consumer (or keeps them, if they exist with this configuration); a
// delivered message not acked within leaseFor is delivered again.
func DialNATS(ctx context.Context, url string, leaseFor time.Duration) (*NATS, error) {
	n := &NATS{url: url, leaseFor: leaseFor}
	if err := n.connect(); err != nil {
		return nil, err
	}
	if err := n.setup(ctx); err != nil {
		n.Close()
		return nil, err
	}
	return n, nil
}

// setup creates the stream and the consumer, with n.replicas replicas
// each, or keeps them if they exist with this configuration.
func (n *NATS) setup(ctx context.Context) error {
	st, err := n.js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name: "Q", Subjects: []string{"q"}, Retention: jetstream.WorkQueuePolicy,
		Storage: jetstream.FileStorage, Duplicates: 2 * time.Minute, Replicas: n.replicas,
	})
	if err != nil {
		return fmt.Errorf("create stream: %w", err)
	}
	n.cons, err = st.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable: "workers", AckPolicy: jetstream.AckExplicitPolicy, AckWait: n.leaseFor,
		MaxAckPending: -1, MaxWaiting: 1024, MaxDeliver: -1, Replicas: n.replicas,
	})
	if err != nil {
		return fmt.Errorf("create consumer: %w", err)
	}
	return nil
}

// connect opens the connection. It does not reconnect by itself: a server
// that went away fails every call, as baton's does, until Redial.
func (n *NATS) connect() error {
	opts := []nats.Option{nats.NoReconnect()}
	if n.reconnect {
		opts = reconnectOptions()
	}
	var err error
	if n.nc, err = nats.Connect(n.url, opts...); err != nil {
		return err
	}
	n.js, err = jetstream.New(n.nc, jetstream.WithPublishAsyncMaxPending(1<<17))
	return err
}

// Redial drops the connection and connects again (after the server
// restarted), with the existing stream and consumer. Nothing may use n
// meanwhile.
func (n *NATS) Redial(ctx context.Context) error {
	n.nc.Close()
	if err := n.connect(); err != nil {
		return err
	}
	var err error
	n.cons, err = n.js.Consumer(ctx, "Q", "workers")
	return err
}

// Unfinished is the number of messages in the stream: with WorkQueue
// retention, those not acked yet.
func (n *NATS) Unfinished(ctx context.Context) (int64, error) {
	st, err := n.js.Stream(ctx, "Q")
	if err != nil {
		return 0, err
	}
	return int64(st.CachedInfo().State.Msgs), nil
}

// Add implements Queue: asynchronous publishes, then wait for every
// publish acknowledgement (the stream's "stored" answer).
func (n *NATS) Add(ctx context.Context, keys []string) error {
	if len(keys) == 1 {
		_, err := n.js.PublishMsg(ctx, msg(keys[0]))
		return err
	}
	futs := make([]jetstream.PubAckFuture, 0, len(keys))
	for _, k := range keys {
		f, err := n.js.PublishMsgAsync(msg(k))
		if err != nil {
			return err
		}
		futs = append(futs, f)
	}
	for _, f := range futs {
		select {
		case <-f.Ok():
		case err := <-f.Err():
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

func msg(key string) *nats.Msg {
	m := nats.NewMsg("q")
	m.Header.Set(jetstream.MsgIDHeader, key)
	return m
}

// Lease implements Queue with a Fetch of up to max messages.
func (n *NATS) Lease(ctx context.Context, _ string, max int, wait time.Duration) ([]Leased, error) {
	if wait < time.Millisecond {
		wait = time.Millisecond
	}
	b, err := n.cons.Fetch(max, jetstream.FetchMaxWait(wait))
	if err != nil {
		return nil, err
	}
	var out []Leased
	for m := range b.Messages() {
		out = append(out, Leased{Key: m.Headers().Get(jetstream.MsgIDHeader), handle: m})
	}
	if err := b.Error(); err != nil && !errors.Is(err, nats.ErrTimeout) && !errors.Is(err, context.DeadlineExceeded) {
		return out, err
	}
	return out, nil
}

// Ack implements Queue with the client's default Ack (not waiting for the
// server's confirmation), as a JetStream consumer usually acks.
func (n *NATS) Ack(_ context.Context, _ string, ls []Leased) error {
	for _, l := range ls {
		if err := l.handle.(jetstream.Msg).Ack(); err != nil {
			return err
		}
	}
	return nil
}

// Close implements Queue.
func (n *NATS) Close() error {
	if n.nc != nil {
		n.nc.Close()
	}
	if n.srv != nil {
		n.srv.Shutdown()
		n.srv.WaitForShutdown()
	}
	return nil
}
