// Package server is the gRPC face of the queue, QueueService and
// ClusterService: each handler validates the whole request first (a refused
// request changes nothing), calls the broker, and translates the broker's
// errors to status codes once, here.
//
// # Leases and identities
//
// Under mutual TLS a Lease binds what it hands out to the caller's verified
// identity, the CN of its client certificate (holderOf), and an Ack or
// Extend of such a lease from another identity is answered LEASE_LOST for
// that key and changes nothing: from the caller's side it does not hold the
// lease. A caller without an identity (plaintext, TLS without a CA) binds
// nothing, and its leases answer to their tokens alone, as before; one
// server never mixes the two, since with a CA every caller has a verified
// certificate. Every certificate with one CN is one identity, so replicas
// sharing a certificate may finish each other's leases: they are one trust
// domain. The admin role gets no exception: an operator takes a key away
// from a worker with Forget, or waits for the lease to expire, rather than
// finishing work it did not do, and the check stays a string compare that
// needs no roles.
package server

import (
	"context"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"time"

	queueclient "github.com/batonrun/baton/client/queue"
	"github.com/batonrun/baton/client/queue/limits"
	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
	"github.com/batonrun/baton/services/queue/internal/broker"
	"github.com/batonrun/baton/services/queue/internal/replica"
	"github.com/batonrun/baton/services/queue/internal/store"
	"github.com/batonrun/baton/services/queue/internal/workqueue"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

type server struct {
	queuev1.UnimplementedQueueServiceServer
	b       *broker.Broker
	streams *Streams // nil: the work streams are not recorded
}

var _ queuev1.QueueServiceServer = (*server)(nil)

// New returns the QueueService implementation over b.
func New(b *broker.Broker) queuev1.QueueServiceServer { return &server{b: b} }

// noCN is the holder of a verified identity whose certificate has no CN:
// such certificates are one identity among themselves (the waiting-lease
// limits count them as one), not no identity, so their leases are still
// bound. batonctl certs writes no CN with a NUL byte, so it names no real
// certificate. A variable, since holders are pointers.
var noCN = "\x00no CN"

// holderOf returns the holder a call's leases are bound to: the CN of the
// caller's verified certificate, or nil without one (nothing bound, nothing
// checked). It reads the certificate tlsfiles.IdentityFromPeer reads, and
// TestHolderOfIsTheIdentitysName holds the two together, but only its CN:
// IdentityFromPeer also collects the roles, one allocation on every Lease,
// Ack and Extend for a slice nothing here needs. It points into the
// connection's parsed certificate, the same for every call on the
// connection: nothing is copied, and the workqueue compares the holders of
// one connection by pointer. A lease keeps that certificate in memory until
// it ends.
func holderOf(ctx context.Context) *string {
	if h, ok := forwardedHolder(ctx); ok {
		return h // a member handed the call on (forward.go)
	}
	p, ok := peer.FromContext(ctx)
	if !ok {
		return nil
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		return nil
	}
	var leaf *x509.Certificate
	switch cs := &ti.State; {
	case len(cs.VerifiedChains) > 0 && len(cs.VerifiedChains[0]) > 0:
		leaf = cs.VerifiedChains[0][0]
	case len(cs.PeerCertificates) > 0:
		leaf = cs.PeerCertificates[0]
	default:
		return nil
	}
	if leaf.Subject.CommonName == "" {
		return &noCN
	}
	return &leaf.Subject.CommonName
}

// invalid makes a failed check of package limits an INVALID_ARGUMENT.
func invalid(err error) error {
	if err == nil {
		return nil
	}
	return status.Error(codes.InvalidArgument, err.Error())
}

// checkKeys validates the keys of an Add or Forget: 1 to MaxBatch valid keys.
func checkKeys(keys []string) error {
	if err := limits.CheckCount("keys", len(keys), 1); err != nil {
		return invalid(err)
	}
	for i, k := range keys {
		if !limits.ValidKey(k) {
			return invalid(limits.CheckKey(fmt.Sprintf("keys[%d]", i), k))
		}
	}
	return nil
}

// duration validates an optional duration field: non-negative and at most
// max.
func duration(field string, d *durationpb.Duration, max time.Duration) (time.Duration, error) {
	if d == nil {
		return 0, nil
	}
	if err := d.CheckValid(); err != nil {
		return 0, status.Errorf(codes.InvalidArgument, "%s: %v", field, err)
	}
	v := d.AsDuration() // saturates, so a huge value is still over max
	if err := limits.CheckDuration(field, v, max); err != nil {
		return 0, invalid(err)
	}
	return v, nil
}

func priority(p queuev1.Priority) (workqueue.Priority, error) {
	switch p {
	case queuev1.Priority_PRIORITY_UNSPECIFIED, queuev1.Priority_PRIORITY_NORMAL:
		return workqueue.Normal, nil
	case queuev1.Priority_PRIORITY_LOW:
		return workqueue.Low, nil
	case queuev1.Priority_PRIORITY_HIGH:
		return workqueue.High, nil
	}
	return 0, status.Errorf(codes.InvalidArgument, "unknown priority %d", p)
}

// ToStatus translates the broker's and store's errors to gRPC codes, once
// for both of the queue's boundaries: the gRPC API, and the dashboard's
// JSON, which maps the code to HTTP.
func ToStatus(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, store.ErrNoSpace):
		return queueclient.Refusal(codes.ResourceExhausted, queueclient.ReasonNoSpace, "the queue's disk is full: nothing was stored; retry when space is back")
	case errors.Is(err, store.ErrStopped):
		return queueclient.Refusal(codes.Unavailable, queueclient.ReasonStopped,
			fmt.Sprintf("the queue's store has stopped (a change in flight may or may not be stored; the queue restarts and recovers): %v", err))
	case errors.Is(err, broker.ErrNotLeader):
		return queueclient.Refusal(codes.Unavailable, queueclient.ReasonNotLeader,
			fmt.Sprintf("this member does not lead the queue now: nothing changed; retry on any member: %v", err))
	case errors.Is(err, replica.ErrLeadershipLost):
		return queueclient.Refusal(codes.Unavailable, queueclient.ReasonLeadershipLost,
			"leadership moved with the change in flight: it may or may not be stored; an Add may be retried, a lease is gone")
	case errors.Is(err, replica.ErrStopped):
		return queueclient.Refusal(codes.Unavailable, queueclient.ReasonStopped,
			fmt.Sprintf("this member's raft log has stopped (a change in flight may or may not be stored; the member restarts and recovers): %v", err))
	case errors.Is(err, store.ErrClosed):
		return status.Errorf(codes.Unavailable, "the queue is shutting down: %v", err)
	case errors.Is(err, broker.ErrQueueNotFound):
		return status.Error(codes.NotFound, err.Error())
	case errors.Is(err, broker.ErrTooManyQueues):
		return queueclient.Refusal(codes.ResourceExhausted, queueclient.ReasonTooManyQueues,
			fmt.Sprintf("%v (--max-queues): nothing was stored; a queue is forgotten once it has been empty for --empty-queue-retention", err))
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, "deadline exceeded before the change was durable; it may or may not be stored")
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, err.Error())
	}
	return status.Error(codes.Internal, err.Error())
}

func (s *server) Add(ctx context.Context, req *queuev1.AddRequest) (*queuev1.AddResponse, error) {
	if err := limits.CheckQueueName(req.GetQueue()); err != nil {
		return nil, invalid(err)
	}
	if err := checkKeys(req.GetKeys()); err != nil {
		return nil, err
	}
	delay, err := duration("delay", req.GetDelay(), limits.MaxDelay)
	if err != nil {
		return nil, err
	}
	if err := limits.CheckName("source", req.GetSource()); err != nil {
		return nil, invalid(err)
	}
	p, err := priority(req.GetPriority())
	if err != nil {
		return nil, err
	}
	if req.GetRevision() < 0 {
		return nil, status.Errorf(codes.InvalidArgument, "revision %d is negative", req.GetRevision())
	}
	queued, collapsed, err := s.b.Add(ctx, req.GetQueue(), req.GetKeys(), broker.AddOptions{Delay: delay, Priority: p, Revision: req.GetRevision()})
	if err != nil {
		return nil, ToStatus(err)
	}
	return &queuev1.AddResponse{Queued: uint32(queued), Collapsed: uint32(collapsed)}, nil
}

// leaseParams checks what a Lease and a work stream's open share: the
// queue, the worker's name, how many keys (countField's count: 0 means 1,
// at most MaxBatch) and the lease's duration (0: the default).
func leaseParams(queue, worker, countField string, count uint32, leaseDuration *durationpb.Duration) (n int, d time.Duration, err error) {
	if err := limits.CheckQueueName(queue); err != nil {
		return 0, 0, invalid(err)
	}
	if err := limits.CheckName("worker", worker); err != nil {
		return 0, 0, invalid(err)
	}
	if err := limits.CheckCount(countField, count, 0); err != nil {
		return 0, 0, invalid(err)
	}
	if d, err = duration("lease_duration", leaseDuration, limits.MaxLease); err != nil {
		return 0, 0, err
	}
	return max(int(count), 1), d, nil
}

func (s *server) Lease(ctx context.Context, req *queuev1.LeaseRequest) (*queuev1.LeaseResponse, error) {
	n, d, err := leaseParams(req.GetQueue(), req.GetWorker(), "max_items", req.GetMaxItems(), req.GetLeaseDuration())
	if err != nil {
		return nil, err
	}
	wait, err := duration("wait", req.GetWait(), limits.MaxWait)
	if err != nil {
		return nil, err
	}
	grants, err := s.b.Lease(ctx, req.GetQueue(), broker.LeaseOptions{Worker: req.GetWorker(), Holder: holderOf(ctx), Max: n, Duration: d, Wait: wait})
	if err != nil {
		return nil, ToStatus(err)
	}
	// Read after the grants: at least the revision of every Add that made
	// one of them ready.
	rev := s.b.Revision(req.GetQueue())
	// Three allocations for the whole answer rather than three per lease:
	// a batch of a thousand leases was mostly malloc and garbage.
	resp := &queuev1.LeaseResponse{Leases: make([]*queuev1.Lease, len(grants))}
	leases := make([]queuev1.Lease, len(grants))
	stamps := make([]timestamppb.Timestamp, 2*len(grants))
	for i, g := range grants {
		l, exp, since := &leases[i], &stamps[2*i], &stamps[2*i+1]
		setTS(exp, g.ExpiresAt)
		setTS(since, g.PendingSince)
		l.Key, l.Token, l.Attempt, l.ExpiresAt, l.PendingSince, l.MinRevision = g.Key, g.Token, g.Attempt, exp, since, rev
		resp.Leases[i] = l
	}
	return resp, nil
}

func (s *server) Ack(ctx context.Context, req *queuev1.AckRequest) (*queuev1.AckResponse, error) {
	if err := limits.CheckQueueName(req.GetQueue()); err != nil {
		return nil, invalid(err)
	}
	if err := limits.CheckCount("acks", len(req.GetAcks()), 1); err != nil {
		return nil, invalid(err)
	}
	items := make([]broker.AckItem, len(req.GetAcks()))
	for i, a := range req.GetAcks() {
		it, err := ackItem(fmt.Sprintf("acks[%d]", i), a)
		if err != nil {
			return nil, err
		}
		items[i] = it
	}
	ok, err := s.b.Ack(ctx, req.GetQueue(), holderOf(ctx), items)
	if err != nil {
		return nil, ToStatus(err)
	}
	resp := &queuev1.AckResponse{Results: make([]*queuev1.AckResult, len(items))}
	results := make([]queuev1.AckResult, len(items)) // one allocation, not one per key
	for i, it := range items {
		r := &results[i]
		r.Key, r.Status = it.Key, ackStatus(ok[i])
		resp.Results[i] = r
	}
	return resp, nil
}

// ackItem checks one ack, named field in errors, as an Ack's and a work
// stream's acks are checked.
func ackItem(field string, a *queuev1.Ack) (broker.AckItem, error) {
	if !limits.ValidKey(a.GetKey()) {
		return broker.AckItem{}, invalid(limits.CheckKey(field+".key", a.GetKey()))
	}
	it := broker.AckItem{Key: a.GetKey(), Token: a.GetToken()}
	switch o := a.GetOutcome().(type) {
	case *queuev1.Ack_Success:
	case *queuev1.Ack_Failure:
		// Cut, not refused: the worker must be able to hand the key back.
		it.Outcome = workqueue.Outcome{Failed: true, Error: limits.ErrorText(o.Failure.GetError())}
	case *queuev1.Ack_Terminal:
		it.Outcome = workqueue.Outcome{Terminal: true, Error: limits.ErrorText(o.Terminal.GetError())}
	case *queuev1.Ack_RequeueAfter:
		d, err := duration(field+".requeue_after", o.RequeueAfter, limits.MaxDelay)
		if err != nil {
			return broker.AckItem{}, err
		}
		if d == 0 {
			d = time.Nanosecond // requeue now, still with attempts reset
		}
		it.Outcome = workqueue.Outcome{RequeueAfter: d}
	default:
		return broker.AckItem{}, status.Errorf(codes.InvalidArgument, "%s (key %q) has no outcome", field, a.GetKey())
	}
	return it, nil
}

func ackStatus(ok bool) queuev1.AckStatus {
	if ok {
		return queuev1.AckStatus_ACK_STATUS_OK
	}
	return queuev1.AckStatus_ACK_STATUS_LEASE_LOST
}

func (s *server) Extend(ctx context.Context, req *queuev1.ExtendRequest) (*queuev1.ExtendResponse, error) {
	if err := limits.CheckQueueName(req.GetQueue()); err != nil {
		return nil, invalid(err)
	}
	if err := limits.CheckCount("leases", len(req.GetLeases()), 1); err != nil {
		return nil, invalid(err)
	}
	d, err := duration("lease_duration", req.GetLeaseDuration(), limits.MaxLease)
	if err != nil {
		return nil, err
	}
	refs := make([]broker.AckItem, len(req.GetLeases()))
	for i, l := range req.GetLeases() {
		if !limits.ValidKey(l.GetKey()) {
			return nil, invalid(limits.CheckKey(fmt.Sprintf("leases[%d].key", i), l.GetKey()))
		}
		refs[i] = broker.AckItem{Key: l.GetKey(), Token: l.GetToken()}
	}
	if err := s.b.Err(); err != nil {
		return nil, ToStatus(err)
	}
	exp, err := s.b.Extend(ctx, req.GetQueue(), holderOf(ctx), refs, d)
	if err != nil {
		return nil, ToStatus(err)
	}
	resp := &queuev1.ExtendResponse{Results: make([]*queuev1.ExtendResult, len(refs))}
	for i, r := range refs {
		res := &queuev1.ExtendResult{Key: r.Key, Status: ackStatus(exp[i] != 0)}
		if exp[i] != 0 {
			res.ExpiresAt = ts(exp[i])
		}
		resp.Results[i] = res
	}
	return resp, nil
}

func (s *server) Forget(ctx context.Context, req *queuev1.ForgetRequest) (*queuev1.ForgetResponse, error) {
	if err := limits.CheckQueueName(req.GetQueue()); err != nil {
		return nil, invalid(err)
	}
	if err := checkKeys(req.GetKeys()); err != nil {
		return nil, err
	}
	n, err := s.b.Forget(ctx, req.GetQueue(), req.GetKeys())
	if err != nil {
		return nil, ToStatus(err)
	}
	return &queuev1.ForgetResponse{Forgotten: uint32(n)}, nil
}

func (s *server) Inspect(ctx context.Context, req *queuev1.InspectRequest) (*queuev1.InspectResponse, error) {
	if err := limits.CheckQueueName(req.GetQueue()); err != nil {
		return nil, invalid(err)
	}
	if err := limits.CheckKey("key", req.GetKey()); err != nil {
		return nil, invalid(err)
	}
	v, err := s.b.Inspect(ctx, req.GetQueue(), req.GetKey(), broker.ReadOptions{Serializable: req.GetSerializable()})
	if err != nil {
		return nil, ToStatus(err)
	}
	return &queuev1.InspectResponse{Item: toItem(v)}, nil
}

// PageToken is List's next_page_token after key: a member that reads a
// leader's List continues from a key with it.
func PageToken(key string) string { return base64.RawURLEncoding.EncodeToString([]byte(key)) }

func (s *server) List(ctx context.Context, req *queuev1.ListRequest) (*queuev1.ListResponse, error) {
	if err := limits.CheckQueueName(req.GetQueue()); err != nil {
		return nil, invalid(err)
	}
	if err := limits.CheckCount("page_size", req.GetPageSize(), 0); err != nil {
		return nil, invalid(err)
	}
	var state workqueue.State
	switch st := req.GetState(); st {
	case queuev1.ItemState_ITEM_STATE_UNSPECIFIED:
	case queuev1.ItemState_ITEM_STATE_PENDING, queuev1.ItemState_ITEM_STATE_DELAYED, queuev1.ItemState_ITEM_STATE_LEASED, queuev1.ItemState_ITEM_STATE_PARKED, queuev1.ItemState_ITEM_STATE_ABSENT:
		state = workqueue.State(st)
	default:
		return nil, status.Errorf(codes.InvalidArgument, "unknown state %d", st)
	}
	after := ""
	if t := req.GetPageToken(); t != "" {
		var b []byte
		var err error
		if len(t) <= limits.MaxPageTokenBytes {
			b, err = base64.RawURLEncoding.DecodeString(t)
		}
		if err != nil || len(b) == 0 {
			return nil, status.Error(codes.InvalidArgument, "page_token was not issued by List")
		}
		after = string(b)
	}
	size := int(req.GetPageSize())
	if size == 0 {
		size = limits.DefaultPageSize
	}
	resp := &queuev1.ListResponse{}
	if state == workqueue.Absent {
		return resp, nil // the queue lists what it holds
	}
	views, more, err := s.b.List(ctx, req.GetQueue(), state, after, size, broker.ReadOptions{Serializable: req.GetSerializable()})
	if err != nil {
		return nil, ToStatus(err)
	}
	// A page also ends before it would pass what a client can receive:
	// items carry error texts of up to 4 KiB.
	bytes := 0
	for i, v := range views {
		if bytes += len(v.Key) + len(v.LastError) + len(v.Worker) + itemOverhead; i > 0 && bytes > limits.MaxResponseBytes {
			views, more = views[:i], true
			break
		}
		resp.Items = append(resp.Items, toItem(v))
	}
	if more {
		resp.NextPageToken = PageToken(views[len(views)-1].Key)
	}
	return resp, nil
}

func (s *server) Stats(ctx context.Context, req *queuev1.StatsRequest) (*queuev1.StatsResponse, error) {
	if q := req.GetQueue(); q != "" {
		if err := limits.CheckQueueName(q); err != nil {
			return nil, invalid(err)
		}
	}
	stats, err := s.b.Stats(ctx, req.GetQueue(), broker.ReadOptions{Serializable: req.GetSerializable()})
	if err != nil {
		return nil, ToStatus(err)
	}
	resp := &queuev1.StatsResponse{}
	for _, st := range stats {
		resp.Queues = append(resp.Queues, &queuev1.QueueStats{
			Queue: st.Name, Pending: uint64(st.Pending), Delayed: uint64(st.Delayed), Leased: uint64(st.Leased),
			Dirty: uint64(st.Dirty), Parked: uint64(st.Parked), AddsTotal: st.Adds, CollapsedTotal: st.Collapsed,
			LeasesTotal: st.Leases, AcksTotal: st.Acks, FailuresTotal: st.Failures, LeaseExpirationsTotal: st.Expirations,
			OldestPendingAge: durationpb.New(time.Duration(st.OldestPending)),
			LongestLeaseAge:  durationpb.New(time.Duration(st.LongestLease)),
			Workers:          workerStats(st.Workers),
			ReleasesTotal:    st.Releases,
			CountingSince:    ts(st.Since),
		})
	}
	return resp, nil
}

// itemOverhead is what an Item costs in a List page beside its strings: its
// numbers, timestamps and framing, rounded up.
const itemOverhead = 96

func workerStats(ws []broker.WorkerStats) []*queuev1.WorkerStats {
	out := make([]*queuev1.WorkerStats, len(ws))
	for i, w := range ws {
		out[i] = &queuev1.WorkerStats{Worker: w.Name, Leased: uint64(w.Leased)}
		if w.LastLease != 0 {
			out[i].LastLease = ts(w.LastLease)
		}
	}
	return out
}

func toItem(v workqueue.View) *queuev1.Item {
	it := &queuev1.Item{Key: v.Key, State: queuev1.ItemState(v.State), Dirty: v.Dirty, Attempts: v.Attempts,
		LastError: v.LastError, Worker: v.Worker, Announcements: uint64(v.Announcements)}
	if v.State != workqueue.Absent {
		it.Priority = queuev1.Priority(v.Priority)
	}
	if v.PendingSince != 0 {
		it.PendingSince = ts(v.PendingSince)
	}
	if v.NotBefore != 0 {
		it.NotBefore = ts(v.NotBefore)
	}
	if v.LeaseExpiresAt != 0 {
		it.LeaseExpiresAt = ts(v.LeaseExpiresAt)
	}
	return it
}

func ts(nanos int64) *timestamppb.Timestamp { return timestamppb.New(time.Unix(0, nanos)) }

// setTS sets t to Unix nanoseconds, as ts does for a new Timestamp.
func setTS(t *timestamppb.Timestamp, nanos int64) {
	t.Seconds, t.Nanos = nanos/1e9, int32(nanos%1e9)
	if t.Nanos < 0 { // before 1970: nanos stay in [0, 1e9)
		t.Seconds--
		t.Nanos += 1e9
	}
}
