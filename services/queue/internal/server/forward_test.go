package server

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	queueclient "github.com/batonrun/baton/client/queue"
	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
)

// refusingLeader answers every Add as a deposed leader does.
type refusingLeader struct {
	queuev1.UnimplementedQueueServiceServer
}

func (refusingLeader) Add(context.Context, *queuev1.AddRequest) (*queuev1.AddResponse, error) {
	return nil, queueclient.Refusal(codes.Unavailable, queueclient.ReasonNotLeader, "from the leader")
}

func reasonOf(err error) string {
	for _, d := range status.Convert(err).Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.GetDomain() == queueclient.ErrorDomain {
			return info.GetReason()
		}
	}
	return ""
}

// TestForwardingLeaderUnreachable: a follower that cannot reach the
// leader it knows (stopped; an election under way) says so with a reason
// a client can act on, rather than passing on its dial's error bare; and
// a status the leader itself answered passes through as it came.
func TestForwardingLeaderUnreachable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	dial := func(addr string) queuev1.QueueServiceClient {
		cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cc.Close() })
		return queuev1.NewQueueServiceClient(cc)
	}

	// A leader that went away: nothing listens at its address.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gone := l.Addr().String()
	l.Close()
	f := Forwarding(refusingLeader{}, func() queuev1.QueueServiceClient { return dial(gone) })
	_, err = f.Add(ctx, &queuev1.AddRequest{Queue: "q", Keys: []string{"k"}})
	if status.Code(err) != codes.Unavailable || reasonOf(err) != queueclient.ReasonLeadershipLost || !strings.Contains(status.Convert(err).Message(), "could not reach the leader") {
		t.Errorf("Add through a follower whose leader is gone: %v (reason %q), want UNAVAILABLE %s saying the leader was not reached", err, reasonOf(err), queueclient.ReasonLeadershipLost)
	}

	// A leader that answers: its status, reason and all, is the caller's.
	l, err = net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	queuev1.RegisterQueueServiceServer(s, refusingLeader{})
	go s.Serve(l)
	defer s.Stop()
	f = Forwarding(refusingLeader{}, func() queuev1.QueueServiceClient { return dial(l.Addr().String()) })
	_, err = f.Add(ctx, &queuev1.AddRequest{Queue: "q", Keys: []string{"k"}})
	if reasonOf(err) != queueclient.ReasonNotLeader || status.Convert(err).Message() != "from the leader" {
		t.Errorf("Add through a follower whose leader refused it: %v (reason %q), want the leader's NOT_LEADER as it came", err, reasonOf(err))
	}
}
