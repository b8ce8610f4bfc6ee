package server

import (
	"context"

	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
)

// localReads answers the serializable reads of a replicated queue's member
// itself, and hands every other call to next (Forwarding's): a
// serializable read asks for this member's own state, which the leader
// cannot give.
type localReads struct {
	queuev1.QueueServiceServer // next
	own                        queuev1.QueueServiceServer
}

// LocalReads wraps next, a member's forwarding QueueService, so that the
// Inspect, List and Stats calls that ask to be serializable are answered
// by own, this member's QueueService.
func LocalReads(next, own queuev1.QueueServiceServer) queuev1.QueueServiceServer {
	return &localReads{QueueServiceServer: next, own: own}
}

func (l *localReads) Inspect(ctx context.Context, req *queuev1.InspectRequest) (*queuev1.InspectResponse, error) {
	if req.GetSerializable() {
		return l.own.Inspect(ctx, req)
	}
	return l.QueueServiceServer.Inspect(ctx, req)
}

func (l *localReads) List(ctx context.Context, req *queuev1.ListRequest) (*queuev1.ListResponse, error) {
	if req.GetSerializable() {
		return l.own.List(ctx, req)
	}
	return l.QueueServiceServer.List(ctx, req)
}

func (l *localReads) Stats(ctx context.Context, req *queuev1.StatsRequest) (*queuev1.StatsResponse, error) {
	if req.GetSerializable() {
		return l.own.Stats(ctx, req)
	}
	return l.QueueServiceServer.Stats(ctx, req)
}
