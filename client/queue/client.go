package queue

// The Go client of baton.queue.v1.QueueService, used by the observer, the
// workers and batonctl (see the package doc in go).

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/batonrun/baton/client/internal/dial"
	"github.com/batonrun/baton/client/queue/limits"
	"github.com/batonrun/baton/client/tlsfiles"
	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// requestBudget is what one call may carry: the server's default
// --max-request-bytes, less room for the request's other fields.
const requestBudget = limits.DefaultMaxRequestBytes - 4<<10

// batches calls f with consecutive [start, end) ranges of n items, each of at
// most limits.MaxBatch items whose sizes (with their framing) fit requestBudget.
func batches(n int, size func(i int) int, f func(start, end int) error) error {
	for start := 0; start < n; {
		end, bytes := start, 0
		for end < n && end-start < limits.MaxBatch {
			b := size(end) + 16 // tag, length and submessage framing
			if end > start && bytes+b > requestBudget {
				break
			}
			bytes += b
			end++
		}
		if err := f(start, end); err != nil {
			return err
		}
		start = end
	}
	return nil
}

// Client calls one queue service. It is safe for concurrent use.
type Client struct {
	conn    interface{ Close() error } // what Dial opened; nil when built with New
	members *dial.Members              // Dial's, for a list of addresses
	cc      grpc.ClientConnInterface
	rpc     queuev1.QueueServiceClient
	retry   Backoff
	tls     *tlsfiles.Source // Dial's
}

// Backoff configures retries of calls refused with codes.Unavailable.
type Backoff struct {
	// Initial is the first wait (default 50 ms); each retry doubles it.
	Initial time.Duration
	// Max caps a wait (default 2 s).
	Max time.Duration
	// Attempts bounds the tries of one call, the first included; 0 means
	// until the context ends.
	Attempts int
	// PerMember makes Attempts count the tries on each member of a list
	// of addresses (Dial's): a call tries every member before it gives
	// up, so a member that is down does not hide the others.
	PerMember bool
}

// Option configures a Client.
type Option func(*Client)

// WithBackoff sets the retry policy for Unavailable.
func WithBackoff(b Backoff) Option { return func(c *Client) { c.retry = b } }

// WithTLS makes Dial connect over TLS (docs/security.md): the client
// presents src's certificate, if it has one (a queue with a CA requires
// one), and verifies the queue's against src's CA bundle and the host of
// each address dialed. The files are re-read when they change. New
// ignores it.
func WithTLS(src *tlsfiles.Source) Option { return func(c *Client) { c.tls = src } }

// Dial connects to the queue at addr: host:port, or a comma-separated
// list of members to fail over between. With a list, calls go to one
// member at a time, the first at the start, and each retry of a call
// refused UNAVAILABLE (the member is down, or cannot serve: it knows no
// leader, or cannot reach the one it knows) goes to the next member. It
// dials plaintext gRPC unless WithTLS is given.
func Dial(addr string, opts ...Option) (*Client, error) {
	var o Client
	for _, opt := range opts {
		opt(&o)
	}
	addrs, err := dial.Addrs(addr)
	if err != nil {
		return nil, fmt.Errorf("dial queue: %w", err)
	}
	if len(addrs) == 1 {
		conn, err := dial.Conn("queue", addr, dial.Options{TLS: o.tls})
		if err != nil {
			return nil, err
		}
		c := New(conn, opts...)
		c.conn = conn
		return c, nil
	}
	m, err := dial.MemberConns("queue", addr, dial.Options{TLS: o.tls})
	if err != nil {
		return nil, err
	}
	c := New(m, opts...)
	c.conn, c.members = m, m
	return c, nil
}

// New wraps an existing connection; Close then leaves it open.
func New(conn grpc.ClientConnInterface, opts ...Option) *Client {
	c := &Client{cc: conn, rpc: queuev1.NewQueueServiceClient(conn), retry: Backoff{Initial: 50 * time.Millisecond, Max: 2 * time.Second}}
	for _, o := range opts {
		o(c)
	}
	return c
}

// Close closes the connection made by Dial.
func (c *Client) Close() error {
	if c.conn == nil {
		return nil
	}
	return c.conn.Close()
}

// Healthy returns nil when the queue's grpc.health.v1 says it is SERVING
// (its store open and writable), the error or the status otherwise. With
// a list of members (Dial) it asks each in turn, once, until one is
// SERVING, and leaves the next call on that one: the queue is healthy
// when a member serves.
func (c *Client) Healthy(ctx context.Context) error {
	tries := 1
	if c.members != nil {
		tries = c.members.Len()
	}
	var err error
	for range tries {
		var at uint32
		if c.members != nil {
			at = c.members.Current()
		}
		err = c.healthy(ctx)
		if err == nil || ctx.Err() != nil {
			return err
		}
		if c.members != nil {
			c.members.Next(at)
		}
	}
	return err
}

func (c *Client) healthy(ctx context.Context) error {
	resp, err := healthpb.NewHealthClient(c.cc).Check(ctx, &healthpb.HealthCheckRequest{Service: queuev1.QueueService_ServiceDesc.ServiceName})
	if err != nil {
		return fmt.Errorf("queue health: %w", err)
	}
	if st := resp.GetStatus(); st != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("queue health: %s", st)
	}
	return nil
}

// Raw returns the generated client, for calls this package does not wrap.
func (c *Client) Raw() queuev1.QueueServiceClient { return c.rpc }

// call runs f, retrying Unavailable with backoff until the context ends.
func call[T any](ctx context.Context, c *Client, f func(context.Context) (T, error)) (T, error) {
	wait := c.retry.Initial
	if wait <= 0 {
		wait = 50 * time.Millisecond
	}
	maxWait := c.retry.Max
	if maxWait <= 0 {
		maxWait = 2 * time.Second
	}
	attempts := c.retry.Attempts
	if c.retry.PerMember && c.members != nil {
		attempts *= c.members.Len()
	}
	for attempt := 1; ; attempt++ {
		var at uint32
		if c.members != nil {
			at = c.members.Current()
		}
		v, err := f(ctx)
		if c.members != nil && status.Code(err) == codes.Unavailable {
			c.members.Next(at) // the retry, or the next call, goes to another member
		}
		if err == nil || status.Code(err) != codes.Unavailable || (attempts > 0 && attempt >= attempts) {
			return v, typed(err)
		}
		// Full jitter keeps a fleet of workers from retrying in lockstep
		// after the queue restarts.
		d := time.Duration(rand.Int64N(int64(wait)) + 1)
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return v, errors.Join(typed(err), ctx.Err())
		case <-t.C:
		}
		wait = min(2*wait, maxWait)
	}
}

// Priority is the priority of an announcement.
type Priority = queuev1.Priority

// Priorities.
const (
	PriorityNormal = queuev1.Priority_PRIORITY_NORMAL
	PriorityLow    = queuev1.Priority_PRIORITY_LOW
	PriorityHigh   = queuev1.Priority_PRIORITY_HIGH
)

// AddOptions qualify an Add.
type AddOptions struct {
	// Delay makes the keys ready no sooner than now + Delay.
	Delay time.Duration
	// Priority of the announcement (default NORMAL).
	Priority Priority
	// Source names the announcer, for the queue's logs.
	Source string
	// Revision is the etcd revision of the newest change the keys stand
	// for (0: none): the queue hands the highest it was given out with
	// every lease (Lease.MinRevision).
	Revision int64
}

// AddResult counts an Add's keys: Queued + Collapsed = len(keys).
type AddResult struct {
	Queued, Collapsed int
}

// Add announces keys, in calls the server takes (see batches). On error,
// the batches before the failing one are stored; retrying the whole Add is
// safe.
func (c *Client) Add(ctx context.Context, queue string, keys []string, o AddOptions) (AddResult, error) {
	var res AddResult
	err := batches(len(keys), func(i int) int { return len(keys[i]) }, func(start, end int) error {
		req := &queuev1.AddRequest{Queue: queue, Keys: keys[start:end], Priority: o.Priority, Source: o.Source, Revision: o.Revision}
		if o.Delay > 0 {
			req.Delay = durationpb.New(o.Delay)
		}
		resp, err := call(ctx, c, func(ctx context.Context) (*queuev1.AddResponse, error) { return c.rpc.Add(ctx, req) })
		if err != nil {
			return fmt.Errorf("add to %s: %w", queue, err)
		}
		res.Queued += int(resp.GetQueued())
		res.Collapsed += int(resp.GetCollapsed())
		return nil
	})
	return res, err
}

// LeaseOptions qualify a Lease.
type LeaseOptions struct {
	// Worker names the holder (shown by Inspect).
	Worker string
	// MaxItems is the most keys to take (0 means 1, at most limits.MaxBatch).
	MaxItems int
	// Duration of the lease (0 means the server's default).
	Duration time.Duration
	// Wait long-polls up to this long for a ready key (at most 30 s).
	Wait time.Duration
}

// Lease is one key held by this worker.
type Lease struct {
	Key          string
	Token        uint64
	Attempt      int // failures so far
	ExpiresAt    time.Time
	PendingSince time.Time
	// MinRevision is the etcd revision to read the observer's cache at
	// (min_revision) so that the read sees the change that announced the
	// key; 0 when the queue knows none.
	MinRevision int64
}

// Lease takes up to o.MaxItems ready keys; none is not an error.
func (c *Client) Lease(ctx context.Context, queue string, o LeaseOptions) ([]Lease, error) {
	req := &queuev1.LeaseRequest{Queue: queue, Worker: o.Worker, MaxItems: uint32(o.MaxItems)}
	if o.Duration > 0 {
		req.LeaseDuration = durationpb.New(o.Duration)
	}
	if o.Wait > 0 {
		req.Wait = durationpb.New(o.Wait)
	}
	resp, err := call(ctx, c, func(ctx context.Context) (*queuev1.LeaseResponse, error) { return c.rpc.Lease(ctx, req) })
	if err != nil {
		return nil, fmt.Errorf("lease from %s: %w", queue, err)
	}
	out := make([]Lease, len(resp.GetLeases()))
	for i, l := range resp.GetLeases() {
		out[i] = leaseOf(l)
	}
	return out, nil
}

func leaseOf(l *queuev1.Lease) Lease {
	return Lease{Key: l.GetKey(), Token: l.GetToken(), Attempt: int(l.GetAttempt()),
		ExpiresAt: l.GetExpiresAt().AsTime(), PendingSince: l.GetPendingSince().AsTime(), MinRevision: l.GetMinRevision()}
}

// Outcome is the result of a reconcile, reported by Ack.
type Outcome struct {
	kind  int // 0 success, 1 failure, 2 requeue, 3 terminal
	err   string
	after time.Duration
}

// Success forgets the key (unless it was announced again while leased).
func Success() Outcome { return Outcome{} }

// Failure retries the key after backoff and records err as its last error
// (cut to limits.MaxErrorBytes, as the server would store it).
func Failure(err string) Outcome { return Outcome{kind: 1, err: limits.ErrorText(err)} }

// RequeueAfter offers the key again after d, with attempts reset.
func RequeueAfter(d time.Duration) Outcome { return Outcome{kind: 2, after: d} }

// Terminal parks the key with err as its last error: retrying cannot help.
// It is offered again if it is announced again (also while leased).
func Terminal(err string) Outcome { return Outcome{kind: 3, err: limits.ErrorText(err)} }

// Ack reports the outcome of one lease.
type Ack struct {
	Key     string
	Token   uint64
	Outcome Outcome
}

// proto is the ack on the wire.
func (a Ack) proto() *queuev1.Ack {
	pa := &queuev1.Ack{Key: a.Key, Token: a.Token}
	switch a.Outcome.kind {
	case 0:
		pa.Outcome = &queuev1.Ack_Success{Success: &queuev1.AckSuccess{}}
	case 1:
		pa.Outcome = &queuev1.Ack_Failure{Failure: &queuev1.AckFailure{Error: a.Outcome.err}}
	case 3:
		pa.Outcome = &queuev1.Ack_Terminal{Terminal: &queuev1.AckTerminal{Error: a.Outcome.err}}
	default:
		pa.Outcome = &queuev1.Ack_RequeueAfter{RequeueAfter: durationpb.New(a.Outcome.after)}
	}
	return pa
}

// IsSuccess reports whether o is Success.
func (o Outcome) IsSuccess() bool { return o.kind == 0 }

// Status is the result of one ack or extension.
type Status int

// Statuses.
const (
	// OK: accepted and durable.
	OK Status = iota
	// LeaseLost: the token was not the key's live lease; nothing changed.
	LeaseLost
)

func (s Status) String() string {
	if s == OK {
		return "OK"
	}
	return "LEASE_LOST"
}

// Result is the result of one ack or extension, in request order.
type Result struct {
	Key       string
	Status    Status
	ExpiresAt time.Time // Extend only
}

func toStatus(s queuev1.AckStatus) Status {
	if s == queuev1.AckStatus_ACK_STATUS_OK {
		return OK
	}
	return LeaseLost
}

// Ack reports outcomes, in calls the server takes (see batches).
func (c *Client) Ack(ctx context.Context, queue string, acks []Ack) ([]Result, error) {
	out := make([]Result, 0, len(acks))
	err := batches(len(acks), func(i int) int { return len(acks[i].Key) + len(acks[i].Outcome.err) + 16 }, func(start, end int) error {
		batch := acks[start:end]
		req := &queuev1.AckRequest{Queue: queue, Acks: make([]*queuev1.Ack, len(batch))}
		for i, a := range batch {
			req.Acks[i] = a.proto()
		}
		resp, err := call(ctx, c, func(ctx context.Context) (*queuev1.AckResponse, error) { return c.rpc.Ack(ctx, req) })
		if err != nil {
			return fmt.Errorf("ack to %s: %w", queue, err)
		}
		for _, r := range resp.GetResults() {
			out = append(out, Result{Key: r.GetKey(), Status: toStatus(r.GetStatus())})
		}
		return nil
	})
	return out, err
}

// LeaseRef names a lease to extend.
type LeaseRef struct {
	Key   string
	Token uint64
}

// Extend pushes the expiry of live leases to now + d (0 means the server's
// default).
func (c *Client) Extend(ctx context.Context, queue string, refs []LeaseRef, d time.Duration) ([]Result, error) {
	out := make([]Result, 0, len(refs))
	err := batches(len(refs), func(i int) int { return len(refs[i].Key) + 8 }, func(start, end int) error {
		batch := refs[start:end]
		req := &queuev1.ExtendRequest{Queue: queue, Leases: make([]*queuev1.LeaseRef, len(batch))}
		if d > 0 {
			req.LeaseDuration = durationpb.New(d)
		}
		for i, r := range batch {
			req.Leases[i] = &queuev1.LeaseRef{Key: r.Key, Token: r.Token}
		}
		resp, err := call(ctx, c, func(ctx context.Context) (*queuev1.ExtendResponse, error) { return c.rpc.Extend(ctx, req) })
		if err != nil {
			return fmt.Errorf("extend in %s: %w", queue, err)
		}
		for _, r := range resp.GetResults() {
			out = append(out, Result{Key: r.GetKey(), Status: toStatus(r.GetStatus()), ExpiresAt: r.GetExpiresAt().AsTime()})
		}
		return nil
	})
	return out, err
}

// Forget removes keys in any state and returns how many were present.
func (c *Client) Forget(ctx context.Context, queue string, keys []string) (int, error) {
	n := 0
	err := batches(len(keys), func(i int) int { return len(keys[i]) }, func(start, end int) error {
		req := &queuev1.ForgetRequest{Queue: queue, Keys: keys[start:end]}
		resp, err := call(ctx, c, func(ctx context.Context) (*queuev1.ForgetResponse, error) { return c.rpc.Forget(ctx, req) })
		if err != nil {
			return fmt.Errorf("forget in %s: %w", queue, err)
		}
		n += int(resp.GetForgotten())
		return nil
	})
	return n, err
}

// Inspect returns one key's item (state ABSENT when the queue holds nothing).
func (c *Client) Inspect(ctx context.Context, queue, key string) (*queuev1.Item, error) {
	req := &queuev1.InspectRequest{Queue: queue, Key: key}
	resp, err := call(ctx, c, func(ctx context.Context) (*queuev1.InspectResponse, error) { return c.rpc.Inspect(ctx, req) })
	if err != nil {
		return nil, fmt.Errorf("inspect %s in %s: %w", key, queue, err)
	}
	return resp.GetItem(), nil
}

// List returns every item of a queue in state (ITEM_STATE_UNSPECIFIED for
// all), following pages of pageSize (0 means the server's default).
func (c *Client) List(ctx context.Context, queue string, state queuev1.ItemState, pageSize int) ([]*queuev1.Item, error) {
	var out []*queuev1.Item
	token := ""
	for {
		req := &queuev1.ListRequest{Queue: queue, State: state, PageSize: uint32(pageSize), PageToken: token}
		resp, err := call(ctx, c, func(ctx context.Context) (*queuev1.ListResponse, error) { return c.rpc.List(ctx, req) })
		if err != nil {
			return out, fmt.Errorf("list %s: %w", queue, err)
		}
		out = append(out, resp.GetItems()...)
		if token = resp.GetNextPageToken(); token == "" {
			return out, nil
		}
	}
}

// Stats returns one queue's stats, or every queue's when queue is empty.
func (c *Client) Stats(ctx context.Context, queue string) ([]*queuev1.QueueStats, error) {
	req := &queuev1.StatsRequest{Queue: queue}
	resp, err := call(ctx, c, func(ctx context.Context) (*queuev1.StatsResponse, error) { return c.rpc.Stats(ctx, req) })
	if err != nil {
		return nil, fmt.Errorf("stats: %w", err)
	}
	return resp.GetQueues(), nil
}
