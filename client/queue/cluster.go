package queue

// The Go client of baton.queue.v1.ClusterService: who the queue's members
// are (docs/design.md). It shares the Client's connection and its retry of
// UNAVAILABLE, so batonctl and tests dial once for both services.

import (
	"context"
	"errors"
	"fmt"
	"io"

	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
)

// Cluster calls the ClusterService of the queue a Client is connected to.
// It is safe for concurrent use.
type Cluster struct {
	c   *Client
	rpc queuev1.ClusterServiceClient
}

// Cluster returns the client of the queue's ClusterService, on c's
// connection.
func (c *Client) Cluster() *Cluster {
	return &Cluster{c: c, rpc: queuev1.NewClusterServiceClient(c.cc)}
}

// MemberList returns every member of the queue, in name order. A queue of
// one member (baton-queue without --initial-cluster) lists that member, the
// leader, with no peer address.
func (k *Cluster) MemberList(ctx context.Context) ([]*queuev1.Member, error) {
	resp, err := call(ctx, k.c, func(ctx context.Context) (*queuev1.MemberListResponse, error) {
		return k.rpc.MemberList(ctx, &queuev1.MemberListRequest{})
	})
	if err != nil {
		return nil, fmt.Errorf("member list: %w", err)
	}
	return resp.GetMembers(), nil
}

// MemberAdd adds the member name, reached by its peers at peerAddr and by
// clients at clientAddr (empty: learned when it starts), and returns the
// members after the change. A queue of one member refuses it with
// ErrNotReplicated and changes nothing. The server checks the arguments
// (limits.CheckMemberName, limits.CheckAddr) and refuses bad ones with INVALID_ARGUMENT.
func (k *Cluster) MemberAdd(ctx context.Context, name, peerAddr, clientAddr string) ([]*queuev1.Member, error) {
	req := &queuev1.MemberAddRequest{Name: name, PeerAddr: peerAddr, ClientAddr: clientAddr}
	resp, err := call(ctx, k.c, func(ctx context.Context) (*queuev1.MemberAddResponse, error) { return k.rpc.MemberAdd(ctx, req) })
	if err != nil {
		return nil, fmt.Errorf("member add %s: %w", name, err)
	}
	return resp.GetMembers(), nil
}

// MemberRemove removes the member name and returns the members that
// remain. A queue of one member refuses it with ErrNotReplicated and
// changes nothing.
func (k *Cluster) MemberRemove(ctx context.Context, name string) ([]*queuev1.Member, error) {
	req := &queuev1.MemberRemoveRequest{Name: name}
	resp, err := call(ctx, k.c, func(ctx context.Context) (*queuev1.MemberRemoveResponse, error) { return k.rpc.MemberRemove(ctx, req) })
	if err != nil {
		return nil, fmt.Errorf("member remove %s: %w", name, err)
	}
	return resp.GetMembers(), nil
}

// MoveLeader hands leadership to the member named to (empty: the one
// whose log is furthest along) and returns the answer: the name of the
// member that leads after it, and whether that member led already
// (Unchanged: to was the leader, and nothing was done). A queue of one
// member refuses it with ErrNotReplicated.
func (k *Cluster) MoveLeader(ctx context.Context, to string) (*queuev1.MoveLeaderResponse, error) {
	req := &queuev1.MoveLeaderRequest{To: to}
	resp, err := call(ctx, k.c, func(ctx context.Context) (*queuev1.MoveLeaderResponse, error) { return k.rpc.MoveLeader(ctx, req) })
	if err != nil {
		return nil, fmt.Errorf("move leader: %w", err)
	}
	return resp, nil
}

// Snapshot streams a backup of every queue from the leader to w (the
// backup file's bytes, which `baton-queue restore` reads) and returns how
// many bytes it wrote. Refused UNAVAILABLE before its first byte (the
// member is down, or knows no leader), it is retried like every call, on
// the next member of a list; once bytes are written it is not. A call
// cut short leaves w holding part of a file, which restore refuses: write
// to a temporary file and rename it once Snapshot returns nil.
func (k *Cluster) Snapshot(ctx context.Context, w io.Writer) (int64, error) {
	var n int64
	var late error // after the first byte: not retried
	_, err := call(ctx, k.c, func(ctx context.Context) (struct{}, error) {
		stream, err := k.rpc.Snapshot(ctx, &queuev1.SnapshotRequest{})
		if err != nil {
			return struct{}{}, err
		}
		for {
			m, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				return struct{}{}, nil
			}
			if err != nil && n == 0 {
				return struct{}{}, err
			}
			if err != nil {
				late = typed(err)
				return struct{}{}, nil
			}
			wrote, err := w.Write(m.GetData())
			n += int64(wrote)
			if err != nil {
				late = err
				return struct{}{}, nil
			}
		}
	})
	if err == nil {
		err = late
	}
	if err != nil {
		return n, fmt.Errorf("snapshot: %w", err)
	}
	return n, nil
}

// Status returns the answering member's view of the queue: itself, the
// leader it knows, the commit index and the number of members.
func (k *Cluster) Status(ctx context.Context) (*queuev1.StatusResponse, error) {
	resp, err := call(ctx, k.c, func(ctx context.Context) (*queuev1.StatusResponse, error) {
		return k.rpc.Status(ctx, &queuev1.StatusRequest{})
	})
	if err != nil {
		return nil, fmt.Errorf("cluster status: %w", err)
	}
	return resp, nil
}
