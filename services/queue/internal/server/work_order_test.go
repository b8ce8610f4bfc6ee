package server

import (
	"net"
	"sync"
	"testing"
	"time"

	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
	"github.com/batonrun/baton/services/queue/internal/broker"
	"github.com/batonrun/baton/services/queue/internal/store"
	"github.com/batonrun/baton/services/queue/internal/workqueue"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/protobuf/types/known/durationpb"
)

// gatedFS is the real file system with a gate on fdatasync: while it is
// shut, every Sync waits, so a change applied in memory stays short of
// durable for as long as a test needs, and an answer that waits for the
// disk is held back.
type gatedFS struct {
	store.OS
	mu      sync.Mutex
	open    chan struct{} // closed while syncs may pass
	waiting int           // syncs waiting at the gate
}

func newGatedFS() *gatedFS {
	f := &gatedFS{open: make(chan struct{})}
	close(f.open)
	return f
}

// shut makes syncs wait until lift.
func (f *gatedFS) shut() {
	f.mu.Lock()
	defer f.mu.Unlock()
	select {
	case <-f.open:
		f.open = make(chan struct{})
	default:
	}
}

// lift lets every sync pass, those waiting first.
func (f *gatedFS) lift() {
	f.mu.Lock()
	defer f.mu.Unlock()
	select {
	case <-f.open:
	default:
		close(f.open)
	}
}

// held reports whether a sync waits at the gate.
func (f *gatedFS) held() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.waiting > 0
}

func (f *gatedFS) Create(name string) (store.File, error) {
	file, err := f.OS.Create(name)
	return &gatedFile{File: file, fs: f}, err
}

func (f *gatedFS) OpenAppend(name string) (store.File, error) {
	file, err := f.OS.OpenAppend(name)
	return &gatedFile{File: file, fs: f}, err
}

type gatedFile struct {
	store.File
	fs *gatedFS
}

func (g *gatedFile) Sync() error {
	f := g.fs
	f.mu.Lock()
	open := f.open
	f.waiting++
	f.mu.Unlock()
	<-open
	f.mu.Lock()
	f.waiting--
	f.mu.Unlock()
	return g.File.Sync()
}

// gatedQueue is a queue service of one member on a gatedFS, and a client
// of it.
type gatedQueue struct {
	fs      *gatedFS
	b       *broker.Broker
	streams *Streams
	c       queuev1.QueueServiceClient
}

func newGatedQueue(t *testing.T) *gatedQueue {
	t.Helper()
	q := &gatedQueue{fs: newGatedFS(), streams: NewStreams()}
	b, err := broker.Open(broker.Config{Queue: workqueue.DefaultConfig()}, store.Options{Dir: t.TempDir(), FS: q.fs}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	q.b = b
	t.Cleanup(func() { b.Close() })
	srv := grpc.NewServer()
	queuev1.RegisterQueueServiceServer(srv, NewWithStreams(b, q.streams))
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(lis) }()
	t.Cleanup(func() { srv.Stop(); <-done })
	conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	// First of the cleanups: a shut gate would hold the stop and the close.
	t.Cleanup(q.fs.lift)
	q.c = queuev1.NewQueueServiceClient(conn)
	return q
}

// workRecv is a stream's messages as they arrive, read by a goroutine of
// their own so that a test can tell "nothing yet" from a message.
type workRecv struct {
	t  *testing.T
	ws queuev1.QueueService_WorkClient
	ch chan *queuev1.WorkResponse
}

func (q *gatedQueue) open(t *testing.T, queue string, max uint32) *workRecv {
	t.Helper()
	ws, err := q.c.Work(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	if err := ws.Send(&queuev1.WorkRequest{Request: &queuev1.WorkRequest_Open{Open: &queuev1.WorkOpen{Queue: queue, Worker: "w", MaxInFlight: max, LeaseDuration: durationpb.New(time.Minute)}}}); err != nil {
		t.Fatal(err)
	}
	r := &workRecv{t: t, ws: ws, ch: make(chan *queuev1.WorkResponse, 16)}
	go func() {
		defer close(r.ch)
		for {
			m, err := ws.Recv()
			if err != nil {
				return
			}
			r.ch <- m
		}
	}()
	return r
}

// next returns the stream's next message, failing if none comes in 10 s
// or the stream ends.
func (r *workRecv) next() *queuev1.WorkResponse {
	r.t.Helper()
	select {
	case m, ok := <-r.ch:
		if !ok {
			r.t.Fatal("the stream ended")
		}
		return m
	case <-time.After(10 * time.Second):
		r.t.Fatal("no message in 10 s")
	}
	return nil
}

func (r *workRecv) lease(key string) *queuev1.Lease {
	r.t.Helper()
	m := r.next()
	if m.GetLease().GetKey() != key {
		r.t.Fatalf("want the lease of %s, got %v", key, m)
	}
	return m.GetLease()
}

func (r *workRecv) answer(key string) {
	r.t.Helper()
	m := r.next()
	if m.GetAckResult().GetKey() != key || m.GetAckResult().GetStatus() != queuev1.AckStatus_ACK_STATUS_OK {
		r.t.Fatalf("want the answer OK to the ack of %s, got %v", key, m)
	}
}

func (r *workRecv) ack(a *queuev1.Ack) {
	r.t.Helper()
	if err := r.ws.Send(&queuev1.WorkRequest{Request: &queuev1.WorkRequest_Ack{Ack: a}}); err != nil {
		r.t.Fatal(err)
	}
}

// waitFor polls cond every 5 ms, failing after 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("never %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func (q *gatedQueue) state(t *testing.T, queue, key string) workqueue.State {
	t.Helper()
	v, err := q.b.Inspect(t.Context(), queue, key, broker.ReadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return v.State
}

// quiet is how long a stream must send nothing while an answer waits for
// the disk. A lease that overtook the answer would be sent within
// microseconds of the ack's apply; waiting longer only makes that
// certain, and a correct stream never sends one, however long it is.
const quiet = 300 * time.Millisecond

// TestWorkAnswersBeforeTheNextLease: with max_in_flight 1, a lease is held
// until its ack is answered, so an ack that waits for the disk (failure,
// requeue_after) keeps the slot: the next lease comes after its answer,
// never before, though the ack is applied and another key is ready. (A
// single member grants a lease without waiting for the disk, so a slot
// freed early would be filled while the gate is shut.)
func TestWorkAnswersBeforeTheNextLease(t *testing.T) {
	q := newGatedQueue(t)
	if _, _, err := q.b.Add(t.Context(), "q", []string{"a", "b", "c"}, broker.AddOptions{}); err != nil {
		t.Fatal(err)
	}
	r := q.open(t, "q", 1)
	next := r.lease("a")
	for _, tc := range []struct {
		key, then string
		ack       *queuev1.Ack // its outcome
	}{
		{"a", "b", &queuev1.Ack{Outcome: &queuev1.Ack_Failure{Failure: &queuev1.AckFailure{Error: "boom"}}}},
		{"b", "c", &queuev1.Ack{Outcome: &queuev1.Ack_RequeueAfter{RequeueAfter: durationpb.New(time.Hour)}}},
	} {
		if next.GetKey() != tc.key {
			t.Fatalf("leased %s, want %s", next.GetKey(), tc.key)
		}
		q.fs.shut()
		tc.ack.Key, tc.ack.Token = tc.key, next.GetToken()
		r.ack(tc.ack)
		// The ack's record waits at the gate once the ack is applied.
		waitFor(t, "applied the ack of "+tc.key, q.fs.held)
		select {
		case m := <-r.ch:
			t.Fatalf("with the answer to the ack of %s waiting for the disk, the stream sent %v", tc.key, m)
		case <-time.After(quiet):
		}
		q.fs.lift()
		r.answer(tc.key)
		next = r.lease(tc.then)
		if s := q.state(t, "q", tc.key); s == workqueue.Leased {
			t.Fatalf("%s is still leased after the answer to its ack", tc.key)
		}
	}
}

// TestWorkHoldsAKeyTwice: an ack that waits for the disk keeps its slot,
// while another slot may take the same key again, leased anew once the ack
// is applied; the stream then holds both leases of the key, and the answer
// frees the old one's slot alone.
func TestWorkHoldsAKeyTwice(t *testing.T) {
	q := newGatedQueue(t)
	if _, _, err := q.b.Add(t.Context(), "q", []string{"a"}, broker.AddOptions{}); err != nil {
		t.Fatal(err)
	}
	r := q.open(t, "q", 2)
	first := r.lease("a")
	inFlight := func() int {
		l := q.streams.List()
		if len(l) != 1 {
			t.Fatalf("streams: %+v", l)
		}
		return l[0].InFlight
	}
	q.fs.shut()
	r.ack(&queuev1.Ack{Key: "a", Token: first.GetToken(), Outcome: &queuev1.Ack_RequeueAfter{RequeueAfter: durationpb.New(time.Millisecond)}})
	again := r.lease("a") // the free slot takes a, ready again after 1 ms
	if again.GetToken() == first.GetToken() {
		t.Fatalf("a leased again under its old token %x", first.GetToken())
	}
	if n := inFlight(); n != 2 {
		t.Fatalf("the stream holds %d leases, want 2: a's, acked and unanswered, and a's again", n)
	}
	q.fs.lift()
	r.answer("a")
	waitFor(t, "freed the answered lease's slot", func() bool { return inFlight() == 1 })
	r.ack(&queuev1.Ack{Key: "a", Token: again.GetToken(), Outcome: &queuev1.Ack_Success{Success: &queuev1.AckSuccess{}}})
	r.answer("a")
	waitFor(t, "freed the second lease's slot", func() bool { return inFlight() == 0 })
	if s := q.state(t, "q", "a"); s != workqueue.Absent {
		t.Fatalf("a is %v after its ack of success, want absent", s)
	}
}
