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

// NATS is an embedded NATS JetStream server with one file-backed stream of
// WorkQueue retention and one durable pull consumer with explicit acks: the
// usual way to build a work queue on JetStream. Keys are message ids
// (Nats-Msg-Id), so the stream's duplicate window collapses a key announced
// again while its first message is still within the window.
type NATS struct {
	opts *server.Options
	srv  *server.Server
	nc   *nats.Conn
	js   jetstream.JetStream
	cons jetstream.Consumer
}

// StartNATS starts the server with its store under dir (on the disk to
// measure). syncAlways sets JetStream's sync_interval to always (fsync per
// write); otherwise the default applies (fsync every 2 minutes).
func StartNATS(ctx context.Context, dir string, syncAlways bool) (*NATS, error) {
	opts := &server.Options{
		Host: "127.0.0.1", Port: server.RANDOM_PORT, NoLog: true, NoSigs: true,
		JetStream: true, StoreDir: dir, SyncAlways: syncAlways,
		MaxPayload: 1 << 20,
	}
	srv, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("nats server: %w", err)
	}
	go srv.Start()
	if !srv.ReadyForConnections(30 * time.Second) {
		srv.Shutdown()
		return nil, errors.New("nats server not ready in 30 s")
	}
	n := &NATS{srv: srv, opts: opts}
	if err := n.connect(); err != nil {
		n.Close()
		return nil, err
	}
	st, err := n.js.CreateStream(ctx, jetstream.StreamConfig{
		Name: "Q", Subjects: []string{"q"}, Retention: jetstream.WorkQueuePolicy,
		Storage: jetstream.FileStorage, Duplicates: 2 * time.Minute,
	})
	if err != nil {
		n.Close()
		return nil, fmt.Errorf("create stream: %w", err)
	}
	n.cons, err = st.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable: "workers", AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Minute,
		MaxAckPending: -1, MaxWaiting: 1024, MaxDeliver: -1,
	})
	if err != nil {
		n.Close()
		return nil, fmt.Errorf("create consumer: %w", err)
	}
	return n, nil
}

func (n *NATS) connect() error {
	var err error
	if n.nc, err = nats.Connect(n.srv.ClientURL(), nats.MaxReconnects(-1)); err != nil {
		return err
	}
	n.js, err = jetstream.New(n.nc, jetstream.WithPublishAsyncMaxPending(1<<17))
	return err
}

// Restart shuts the server down (gracefully: an embedded server cannot be
// SIGKILLed apart from this process), starts it again on the same store
// and returns the time from the new server's creation until the stream
// answers with want messages.
func (n *NATS) Restart(ctx context.Context, want uint64) (time.Duration, error) {
	n.nc.Close()
	n.srv.Shutdown()
	n.srv.WaitForShutdown()
	start := time.Now()
	srv, err := server.NewServer(n.opts)
	if err != nil {
		return 0, err
	}
	n.srv = srv
	go srv.Start()
	if !srv.ReadyForConnections(2 * time.Minute) {
		return 0, errors.New("nats server not ready in 2 minutes after restart")
	}
	if err := n.connect(); err != nil {
		return 0, err
	}
	for {
		st, err := n.js.Stream(ctx, "Q")
		if err == nil && st.CachedInfo().State.Msgs == want {
			return time.Since(start), nil
		}
		if ctx.Err() != nil || time.Since(start) > 2*time.Minute {
			return 0, fmt.Errorf("stream not back with %d messages: %v", want, err)
		}
		time.Sleep(time.Millisecond)
	}
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
	n.srv.Shutdown()
	n.srv.WaitForShutdown()
	return nil
}
