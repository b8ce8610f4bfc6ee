// Package watchmux puts the watches of every informer on one etcd watch
// stream, so that a watched prefix costs the observer a watch (a few
// hundred bytes here and in etcd), not a gRPC stream with its goroutines
// and buffers on both ends. etcd multiplexes any number of watches on a
// stream; clientv3 does too, but it hides what this package needs to know
// to trust a progress notification, and it resumes broken streams on its
// own, so the mux speaks etcd's watch protocol itself.
//
// # Progress notifications on a shared stream
//
// The observer asks etcd for progress (RequestProgress) so that an idle
// prefix follows etcd's head. etcd answers a progress request on a stream
// with one notification (watch id -1) for all its watches, computed only
// when every watch on the stream has been sent every event up to its
// revision R. Trusting it for a watch just created is unsafe: a
// notification computed before the watch existed can reach the client
// after the watch's creation response and before the events it must catch
// up on (etcd sends the two on different internal channels). A watch
// therefore takes a notification only when it is known to have been
// computed after the watch was created:
//
//   - its revision is above the revision in the watch's creation response
//     (that was etcd's revision once the watch was registered), or
//   - the watch has already been sent a message of its own (an event, or
//     etcd's periodic progress notification of that watch): etcd sends a
//     stream's notifications and events in the order it made them, so every
//     notification made before the watch existed has been received by then.
//
// A watch that has neither, because etcd has been idle since it was made
// and nothing happened under its prefix, would otherwise wait for the next
// write anywhere in etcd (or etcd's periodic notification, every 10 minutes
// by default). After ProbeAfter the mux probes for such watches: it opens a
// short-lived stream, watches their prefixes there from where each is
// known to be, asks for progress only once every probe watch exists, and
// tells each watch that saw no event there that nothing happened up to the
// answer's revision (a watch that did see one will get that event itself).
// One probe runs at a time, for every watch that needs it.
//
// # Breaks
//
// When the stream breaks (etcd restarted, connection lost, etcd's member
// lost its leader: the stream asks for one, clientv3.WithRequireLeader),
// every watch on it ends with the error, and each owner opens its watch
// again from where it was (package informer); the first to do so opens a
// new stream, possibly to another member.
//
// # Private streams
//
// A watch whose progress must be trusted from its first moment (the
// replay of history at start) gets a stream of its own through Private,
// as every watch had before; at most MaxPrivate (32) are open at once, so
// a start with many prefixes does not open a stream for each at once.
package watchmux

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/api/v3/mvccpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// Options tune a Mux; zero values take the defaults.
type Options struct {
	// ProbeAfter is how long a watch that cannot trust a progress
	// notification yet waits for one it can before it is probed (default
	// 1 s).
	ProbeAfter time.Duration
	// MaxPrivate bounds the private streams open at once (default 32).
	MaxPrivate int
	// Logger; nil discards.
	Logger *slog.Logger
}

// probeTimeout bounds one probe; a watch it could not help is probed again.
const probeTimeout = 10 * time.Second

// maxProbe bounds the watches one probe opens.
const maxProbe = 256

// probeRepeat is how often a probe asks for progress until it is answered.
const probeRepeat = 100 * time.Millisecond

// ErrClosed ends the watches of a closed Mux.
var ErrClosed = errors.New("watchmux: closed")

// ErrBroken ends the watches of a stream that broke; the Mux logs the
// break once, for all of them.
var ErrBroken = errors.New("watch stream broke")

// Mux is safe for concurrent use.
type Mux struct {
	cli     *clientv3.Client
	opts    Options
	log     *slog.Logger
	ctx     context.Context
	cancel  context.CancelFunc
	private chan struct{}
	wg      sync.WaitGroup

	streams, probes atomic.Uint64
	privateN        atomic.Uint64

	mu      sync.Mutex
	cur     *stream
	probing bool
	closed  bool
}

// New returns a Mux of cli's connection; Close ends it.
func New(cli *clientv3.Client, opts Options) *Mux {
	if opts.ProbeAfter <= 0 {
		opts.ProbeAfter = time.Second
	}
	if opts.MaxPrivate <= 0 {
		opts.MaxPrivate = 32
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Mux{cli: cli, opts: opts, log: opts.Logger, ctx: ctx, cancel: cancel, private: make(chan struct{}, opts.MaxPrivate)}
}

// Client returns the etcd client the Mux watches through.
func (m *Mux) Client() *clientv3.Client { return m.cli }

// Close ends every watch (with ErrClosed) and stream, and waits for the
// Mux's goroutines.
func (m *Mux) Close() {
	m.mu.Lock()
	m.closed = true
	st := m.cur
	m.mu.Unlock()
	if st != nil {
		st.fail(ErrClosed)
	}
	m.cancel()
	m.wg.Wait()
}

// Streams returns how many shared streams the Mux has opened, and how many
// probes it has made.
func (m *Mux) Streams() (streams, probes uint64) { return m.streams.Load(), m.probes.Load() }

// Response is what a watch hands on: events, or a progress notification
// it can trust.
type Response struct {
	// Events, in revision order.
	Events []*mvccpb.Event
	// Progress, when there are no events: every event under the prefix up
	// to this revision has been handed on.
	Progress int64
	// Head is etcd's revision when the response was sent (it may be ahead
	// of the events it carries).
	Head int64
}

// Watch is one prefix watched on the shared stream.
type Watch struct {
	m      *Mux
	st     *stream
	req    *pb.WatchCreateRequest
	prefix string

	// Under st.mu.
	id         int64 // etcd's id, -1 until created
	createdRev int64 // etcd's revision in the creation response
	createdAt  time.Time
	synced     bool  // sent a message of its own: every notification now is trustworthy
	known      int64 // everything up to it has been handed on
	closed     bool  // closed by its owner

	mu       sync.Mutex
	queue    []Response
	err      error
	notify   chan struct{}
	created  chan struct{} // closed once etcd has answered the creation (or the watch ended)
	once     sync.Once
	firstRev int64 // createdRev, for Created
}

// Watch watches every key under prefix from revision from on (etcd's
// history from it, then every change). The first event handed on may be
// at from itself: the owner, which knows everything up to from, skips
// it. Starting at a revision the owner has seen, rather than the next,
// keeps the watch from starting beyond etcd's head, which would make etcd
// answer no progress request on the stream until its next write.
//
// With from 0 the watch starts at etcd's head: Created returns the
// revision the owner must then list the prefix at, and the watch hands on
// every change after it (and maybe some at or before it). Such a watch is
// up to date from the start, so it never holds etcd's answers back or
// needs a probe. The caller must Close the watch.
func (m *Mux) Watch(prefix string, from int64) *Watch {
	w := newWatch(m, prefix, from)
	for {
		m.mu.Lock()
		if m.closed {
			m.mu.Unlock()
			w.fail(ErrClosed)
			return w
		}
		st := m.cur
		if st == nil {
			st = m.newStream()
			m.cur = st
		}
		m.mu.Unlock()
		if st.add(w) {
			return w
		}
		// It broke meanwhile: the next one.
		m.mu.Lock()
		if m.cur == st {
			m.cur = nil
		}
		m.mu.Unlock()
	}
}

func newWatch(m *Mux, prefix string, from int64) *Watch {
	return &Watch{m: m, prefix: prefix, id: -1, known: from, notify: make(chan struct{}, 1), created: make(chan struct{}),
		req: &pb.WatchCreateRequest{Key: []byte(prefix), RangeEnd: []byte(clientv3.GetPrefixRangeEnd(prefix)),
			StartRevision: from, ProgressNotify: true}}
}

// Created waits until etcd has created the watch and returns the revision
// it was created at (a watch from 0 hands on every change after it); an
// error if the watch ended first.
func (w *Watch) Created(ctx context.Context) (int64, error) {
	select {
	case <-ctx.Done():
		return 0, ctx.Err()
	case <-w.created:
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.firstRev == 0 {
		return 0, w.err
	}
	return w.firstRev, nil
}

// Next returns the next response, waiting for one; an error ends the
// watch: the stream broke, etcd cancelled the watch (an error wrapping
// rpctypes.ErrCompacted when its revision is compacted), the watch was
// closed, or ctx ended.
func (w *Watch) Next(ctx context.Context) (Response, error) {
	for {
		w.mu.Lock()
		if len(w.queue) > 0 {
			r := w.queue[0]
			w.queue[0] = Response{}
			w.queue = w.queue[1:]
			w.mu.Unlock()
			return r, nil
		}
		err := w.err
		w.mu.Unlock()
		if err != nil {
			return Response{}, err
		}
		select {
		case <-ctx.Done():
			return Response{}, ctx.Err()
		case <-w.notify:
		}
	}
}

// Close stops the watch; etcd is told.
func (w *Watch) Close() {
	w.fail(ErrClosed)
	st := w.st
	if st == nil {
		return
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	w.closed = true
	if w.id >= 0 && st.byID[w.id] == w {
		delete(st.byID, w.id)
		st.send(cancelReq(w.id))
	}
	// A watch still waiting for its creation is cancelled when it comes.
}

func (w *Watch) push(r Response) {
	w.mu.Lock()
	if w.err == nil {
		w.queue = append(w.queue, r)
	}
	w.mu.Unlock()
	w.wake()
}

// fail ends the watch with err, after the responses already queued.
func (w *Watch) fail(err error) {
	w.mu.Lock()
	if w.err == nil {
		w.err = err
	}
	w.mu.Unlock()
	w.once.Do(func() { close(w.created) })
	w.wake()
}

func (w *Watch) wake() {
	select {
	case w.notify <- struct{}{}:
	default:
	}
}

func cancelReq(id int64) *pb.WatchRequest {
	return &pb.WatchRequest{RequestUnion: &pb.WatchRequest_CancelRequest{CancelRequest: &pb.WatchCancelRequest{WatchId: id}}}
}

func progressReq() *pb.WatchRequest {
	return &pb.WatchRequest{RequestUnion: &pb.WatchRequest_ProgressRequest{ProgressRequest: &pb.WatchProgressRequest{}}}
}

// stream is one gRPC watch stream and the watches on it.
type stream struct {
	m      *Mux
	ctx    context.Context
	cancel context.CancelFunc

	mu      sync.Mutex
	sendq   []*pb.WatchRequest
	pending []*Watch         // created in this order, awaiting etcd's answer
	byID    map[int64]*Watch // created
	broken  error
	sendC   chan struct{}
}

// callOptions are clientv3's for its own watch streams.
var callOptions = []grpc.CallOption{grpc.WaitForReady(true), grpc.MaxCallRecvMsgSize(math.MaxInt32)}

func (m *Mux) newStream() *stream {
	ctx, cancel := context.WithCancel(clientv3.WithRequireLeader(m.ctx))
	st := &stream{m: m, ctx: ctx, cancel: cancel, byID: map[int64]*Watch{}, sendC: make(chan struct{}, 1)}
	m.streams.Add(1)
	m.wg.Go(st.run)
	return st
}

// add queues w's creation; false if the stream is broken.
func (st *stream) add(w *Watch) bool {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.broken != nil {
		return false
	}
	w.st = st
	st.pending = append(st.pending, w)
	st.send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: w.req}})
	return true
}

// send queues req (st.mu held): the sender sends in order, so creations
// are answered in the order of pending.
func (st *stream) send(req *pb.WatchRequest) {
	if st.broken != nil {
		return
	}
	st.sendq = append(st.sendq, req)
	select {
	case st.sendC <- struct{}{}:
	default:
	}
}

// run opens the stream and dispatches what etcd sends until it breaks.
// Sending has a goroutine of its own: a send waiting for etcd to read must
// never keep the stream from being read (etcd stops reading while it
// cannot send).
func (st *stream) run() {
	wc, err := pb.NewWatchClient(st.m.cli.ActiveConnection()).Watch(st.ctx, callOptions...)
	if err != nil {
		st.fail(rpctypes.Error(err))
		return
	}
	st.m.wg.Go(func() { st.sendLoop(wc) })
	for {
		resp, err := wc.Recv()
		if err != nil {
			st.fail(rpctypes.Error(err))
			return
		}
		st.dispatch(resp)
	}
}

func (st *stream) sendLoop(wc pb.Watch_WatchClient) {
	for {
		select {
		case <-st.ctx.Done():
			return
		case <-st.sendC:
		}
		st.mu.Lock()
		q := st.sendq
		st.sendq = nil
		st.mu.Unlock()
		for _, req := range q {
			if err := wc.Send(req); err != nil {
				st.fail(rpctypes.Error(err))
				return
			}
		}
	}
}

// fail breaks the stream: every watch on it ends with err.
func (st *stream) fail(err error) {
	st.mu.Lock()
	if st.broken != nil {
		st.mu.Unlock()
		return
	}
	st.broken = fmt.Errorf("%w: %w", ErrBroken, err)
	ws := slices.Concat(st.pending, slices.Collect(mapValues(st.byID)))
	st.pending, st.byID, st.sendq = nil, map[int64]*Watch{}, nil
	st.mu.Unlock()
	st.cancel()
	if !errors.Is(err, ErrClosed) && st.m.ctx.Err() == nil {
		st.m.log.Warn("watch stream broke; its watches resume", "watches", len(ws), "error", err)
	}
	for _, w := range ws {
		w.fail(st.broken)
	}
	st.m.mu.Lock()
	if st.m.cur == st {
		st.m.cur = nil
	}
	st.m.mu.Unlock()
}

func mapValues(m map[int64]*Watch) func(func(*Watch) bool) {
	return func(yield func(*Watch) bool) {
		for _, w := range m {
			if !yield(w) {
				return
			}
		}
	}
}

// dispatch hands one response of etcd's to the watches it concerns.
func (st *stream) dispatch(resp *pb.WatchResponse) {
	head := resp.GetHeader().GetRevision()
	st.mu.Lock()
	defer st.mu.Unlock()
	switch {
	case resp.Created:
		if len(st.pending) == 0 {
			return
		}
		w := st.pending[0]
		st.pending[0] = nil
		st.pending = st.pending[1:]
		if resp.Canceled || resp.WatchId == clientv3.InvalidWatchID {
			w.fail(fmt.Errorf("watch of %s refused by etcd: %s", w.prefix, resp.CancelReason))
			return
		}
		if w.closed {
			st.send(cancelReq(resp.WatchId))
			return
		}
		w.id, w.createdRev, w.createdAt = resp.WatchId, head, time.Now()
		if w.req.StartRevision == 0 {
			// The owner lists at the creation's revision.
			w.known = head
		}
		st.byID[w.id] = w
		w.mu.Lock()
		w.firstRev = head
		w.mu.Unlock()
		w.once.Do(func() { close(w.created) })
	case resp.WatchId == clientv3.InvalidWatchID:
		// A progress notification for the whole stream.
		if len(resp.Events) > 0 || resp.Canceled || resp.CompactRevision != 0 {
			return
		}
		for _, w := range st.byID {
			if (w.synced || head > w.createdRev) && head > w.known {
				w.known = head
				w.push(Response{Progress: head, Head: head})
			}
		}
	default:
		w := st.byID[resp.WatchId]
		if w == nil {
			return // closed meanwhile
		}
		switch {
		case resp.CompactRevision != 0:
			delete(st.byID, w.id)
			st.send(cancelReq(w.id))
			w.fail(fmt.Errorf("watch of %s from %d: %w (compacted at %d)", w.prefix, w.req.StartRevision, rpctypes.ErrCompacted, resp.CompactRevision))
		case resp.Canceled:
			delete(st.byID, w.id)
			w.fail(fmt.Errorf("watch of %s cancelled by etcd: %s", w.prefix, resp.CancelReason))
		case len(resp.Events) > 0:
			w.synced = true
			w.known = max(w.known, resp.Events[len(resp.Events)-1].Kv.ModRevision)
			w.push(Response{Events: resp.Events, Head: head})
		default:
			// etcd's periodic notification of this watch alone: made after
			// it was created, once it had been sent everything up to head.
			w.synced = true
			if head > w.known {
				w.known = head
				w.push(Response{Progress: head, Head: head})
			}
		}
	}
}

// RequestProgress asks etcd for a progress notification on the shared
// stream, and probes the watches that cannot trust one yet (at most one
// probe at a time).
func (m *Mux) RequestProgress() {
	m.mu.Lock()
	st := m.cur
	m.mu.Unlock()
	if st == nil {
		return
	}
	st.mu.Lock()
	st.send(progressReq())
	var stuck []*Watch
	now := time.Now()
	for _, w := range st.byID {
		if !w.synced && w.known < w.createdRev && now.Sub(w.createdAt) >= m.opts.ProbeAfter && len(stuck) < maxProbe {
			stuck = append(stuck, w)
		}
	}
	from := make([]int64, len(stuck))
	for i, w := range stuck {
		from[i] = w.known + 1
	}
	st.mu.Unlock()
	if len(stuck) == 0 {
		return
	}
	m.mu.Lock()
	if m.probing || m.closed {
		m.mu.Unlock()
		return
	}
	m.probing = true
	m.mu.Unlock()
	m.probes.Add(1)
	m.wg.Go(func() {
		defer func() {
			m.mu.Lock()
			m.probing = false
			m.mu.Unlock()
		}()
		if err := m.probe(st, stuck, from); err != nil && m.ctx.Err() == nil {
			m.log.Debug("watch probe", "watches", len(stuck), "error", err)
		}
	})
}

// probe watches the prefixes of ws, each from from[i], on a stream of its
// own and asks for progress only once every probe watch exists, so that
// every answer covers them all (etcd answers none while a watch on the
// stream is catching up: the request is repeated). A watch whose probe saw
// no event is told that nothing happened under its prefix up to the
// answer's revision; one whose probe saw an event gets that event itself.
func (m *Mux) probe(st *stream, ws []*Watch, from []int64) error {
	ctx, cancel := context.WithTimeout(clientv3.WithRequireLeader(m.ctx), probeTimeout)
	defer cancel()
	wc, err := pb.NewWatchClient(m.cli.ActiveConnection()).Watch(ctx, callOptions...)
	if err != nil {
		return err
	}
	// One goroutine sends: the creations, then, once every probe watch
	// exists, a progress request every probeRepeat.
	allCreated := make(chan struct{})
	m.wg.Go(func() {
		for i, w := range ws {
			req := &pb.WatchCreateRequest{Key: w.req.Key, RangeEnd: w.req.RangeEnd, StartRevision: from[i], ProgressNotify: true}
			if wc.Send(&pb.WatchRequest{RequestUnion: &pb.WatchRequest_CreateRequest{CreateRequest: req}}) != nil {
				return
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-allCreated:
		}
		t := time.NewTicker(probeRepeat)
		defer t.Stop()
		for {
			if wc.Send(progressReq()) != nil {
				return
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	})
	type probed struct {
		w    *Watch
		done bool // saw an event, or was told: nothing more to learn
	}
	byID := map[int64]*probed{}
	created, left := 0, len(ws)
	finish := func(p *probed) {
		if !p.done {
			p.done = true
			left--
		}
	}
	resolve := func(p *probed, rev int64) {
		finish(p)
		st.mu.Lock()
		defer st.mu.Unlock()
		w := p.w
		if st.byID[w.id] != w || w.synced || rev < w.createdRev {
			return
		}
		w.synced = true
		if rev > w.known {
			w.known = rev
			w.push(Response{Progress: rev, Head: rev})
		}
	}
	for left > 0 {
		resp, err := wc.Recv()
		if err != nil {
			return err
		}
		rev := resp.GetHeader().GetRevision()
		switch {
		case resp.Created:
			if created == len(ws) {
				continue
			}
			p := &probed{w: ws[created]}
			created++
			if resp.Canceled || resp.WatchId == clientv3.InvalidWatchID {
				finish(p)
			} else {
				byID[resp.WatchId] = p
			}
			if created == len(ws) {
				close(allCreated)
			}
		case resp.WatchId == clientv3.InvalidWatchID:
			// Asked for after every creation, so made after them.
			for _, p := range byID {
				if !p.done {
					resolve(p, rev)
				}
			}
		default:
			p := byID[resp.WatchId]
			switch {
			case p == nil || p.done:
			case len(resp.Events) > 0 || resp.Canceled || resp.CompactRevision != 0:
				finish(p) // the watch gets the same itself
			default:
				resolve(p, rev) // etcd's periodic notification of this probe watch
			}
		}
	}
	return nil
}

// Private returns a context whose watches (clientv3's) get a gRPC stream
// of their own, waiting while MaxPrivate are open; call release when the
// watch is done.
func (m *Mux) Private(ctx context.Context) (pctx context.Context, release func(), err error) {
	select {
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	case m.private <- struct{}{}:
	}
	// clientv3 shares a stream among watches with equal context metadata.
	id := fmt.Sprintf("%p-%d", m, m.privateN.Add(1))
	pctx = metadata.AppendToOutgoingContext(clientv3.WithRequireLeader(ctx), "baton-watch-stream", id)
	var once sync.Once
	return pctx, func() { once.Do(func() { <-m.private }) }, nil
}
