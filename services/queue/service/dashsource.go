package service

import (
	"context"
	"fmt"

	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
	"github.com/batonrun/baton/services/queue/internal/broker"
	"github.com/batonrun/baton/services/queue/internal/server"
	"github.com/batonrun/baton/services/queue/internal/workqueue"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// memberSource is the dashboard's Source on a member of a replicated
// queue: the broker while this member leads, else the leader's
// QueueService on its peer listener (where it answers as it answers a call
// a member hands on), so that every member's dashboard shows the queues,
// and a person who opens the one of a member that no longer leads still
// sees them.
type memberSource struct {
	b      *broker.Broker
	leader func() queuev1.QueueServiceClient // nil while this member leads or knows no leader
}

func (s memberSource) Stats(ctx context.Context, queue string, opts broker.ReadOptions) ([]broker.QueueStats, error) {
	if s.b.Leading() {
		return s.b.Stats(ctx, queue, opts)
	}
	c := s.leader()
	if c == nil {
		return nil, broker.ErrNotLeader
	}
	resp, err := c.Stats(ctx, &queuev1.StatsRequest{Queue: queue})
	if err != nil {
		return nil, fromLeader(err)
	}
	out := make([]broker.QueueStats, 0, len(resp.GetQueues()))
	for _, q := range resp.GetQueues() {
		st := broker.QueueStats{Name: q.GetQueue(), Since: q.GetCountingSince().AsTime().UnixNano()}
		st.Pending, st.Delayed, st.Leased = int(q.GetPending()), int(q.GetDelayed()), int(q.GetLeased())
		st.Dirty, st.Parked = int(q.GetDirty()), int(q.GetParked())
		st.Adds, st.Collapsed, st.Leases, st.Acks = q.GetAddsTotal(), q.GetCollapsedTotal(), q.GetLeasesTotal(), q.GetAcksTotal()
		st.Failures, st.Expirations, st.Releases = q.GetFailuresTotal(), q.GetLeaseExpirationsTotal(), q.GetReleasesTotal()
		st.OldestPending, st.LongestLease = int64(q.GetOldestPendingAge().AsDuration()), int64(q.GetLongestLeaseAge().AsDuration())
		for _, w := range q.GetWorkers() {
			ws := broker.WorkerStats{Name: w.GetWorker(), Leased: int(w.GetLeased())}
			if w.GetLastLease() != nil {
				ws.LastLease = w.GetLastLease().AsTime().UnixNano()
			}
			st.Workers = append(st.Workers, ws)
		}
		out = append(out, st)
	}
	return out, nil
}

func (s memberSource) Inspect(ctx context.Context, queue, key string, opts broker.ReadOptions) (workqueue.View, error) {
	if s.b.Leading() {
		return s.b.Inspect(ctx, queue, key, opts)
	}
	c := s.leader()
	if c == nil {
		return workqueue.View{}, broker.ErrNotLeader
	}
	resp, err := c.Inspect(ctx, &queuev1.InspectRequest{Queue: queue, Key: key})
	if err != nil {
		return workqueue.View{}, fromLeader(err)
	}
	return fromItem(resp.GetItem()), nil
}

// List is the leader's first page of limit items of queue in state after
// `after`: more reports that there are others. The leader's items carry no
// lease start (View.LeasedAt stays 0).
func (s memberSource) List(ctx context.Context, queue string, state workqueue.State, after string, limit int, opts broker.ReadOptions) ([]workqueue.View, bool, error) {
	if s.b.Leading() {
		return s.b.List(ctx, queue, state, after, limit, opts)
	}
	c := s.leader()
	if c == nil {
		return nil, false, broker.ErrNotLeader
	}
	req := &queuev1.ListRequest{Queue: queue, State: queuev1.ItemState(state), PageSize: uint32(limit)}
	if after != "" {
		req.PageToken = server.PageToken(after)
	}
	resp, err := c.List(ctx, req)
	if err != nil {
		return nil, false, fromLeader(err)
	}
	out := make([]workqueue.View, 0, len(resp.GetItems()))
	for _, it := range resp.GetItems() {
		out = append(out, fromItem(it))
	}
	return out, resp.GetNextPageToken() != "", nil
}

// fromItem is the View of a leader's Item.
func fromItem(it *queuev1.Item) workqueue.View {
	v := workqueue.View{Key: it.GetKey(), State: workqueue.State(it.GetState()), Dirty: it.GetDirty(), Attempts: it.GetAttempts(),
		LastError: it.GetLastError(), Worker: it.GetWorker(), Announcements: uint32(it.GetAnnouncements()), Priority: workqueue.Priority(it.GetPriority())}
	if it.GetPendingSince() != nil {
		v.PendingSince = it.GetPendingSince().AsTime().UnixNano()
	}
	if it.GetNotBefore() != nil {
		v.NotBefore = it.GetNotBefore().AsTime().UnixNano()
	}
	if it.GetLeaseExpiresAt() != nil {
		v.LeaseExpiresAt = it.GetLeaseExpiresAt().AsTime().UnixNano()
	}
	if v.State == workqueue.Absent || it.GetState() == queuev1.ItemState_ITEM_STATE_UNSPECIFIED {
		v.State = workqueue.Absent
	}
	return v
}

// fromLeader is the broker's error for the leader's refusal, so the
// dashboard answers it as the leader's own dashboard would.
func fromLeader(err error) error {
	switch status.Code(err) {
	case codes.Unavailable:
		return fmt.Errorf("%w: the leader: %v", broker.ErrNotLeader, status.Convert(err).Message())
	case codes.NotFound:
		return fmt.Errorf("%w: %s", broker.ErrQueueNotFound, status.Convert(err).Message())
	}
	return err
}
