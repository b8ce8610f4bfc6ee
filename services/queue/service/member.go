package service

// What a baton-queue process is: a single member, or one member of a
// replicated queue. Run builds one value of the two (newMember) and asks
// it for everything that differs between them, so that Run itself never
// asks which it is: how the broker opens, what the dashboard shows of the
// others, how calls reach the leader, what the peer listener serves, when
// the member is ready, and what it does when it is told to stop.

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/batonrun/baton/client/tlsfiles"
	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
	"github.com/batonrun/baton/services/queue/internal/broker"
	"github.com/batonrun/baton/services/queue/internal/dashboard"
	"github.com/batonrun/baton/services/queue/internal/server"
	"github.com/batonrun/baton/services/queue/internal/store"
	"github.com/batonrun/baton/services/runtime/authz"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
)

// member is a single member or a member of a replicated queue.
type member interface {
	// open opens the broker on the data directory.
	open(ctx context.Context) (*broker.Broker, error)
	// dashboard returns where the dashboard reads the queues, and sets
	// the options only a member of a replicated queue has.
	dashboard(b *broker.Broker, o *dashboard.Options, streams *server.Streams) dashboard.Source
	// serving says how calls are served: what the client listener's
	// QueueService is (own, or own behind forwarding to the leader), the
	// member's readiness, and the peer listener, if there is one.
	serving(b *broker.Broker, own queuev1.QueueServiceServer, self *server.Self) (calls queuev1.QueueServiceServer, ready func(context.Context) error, peer peerListener, err error)
	// listening is told the client address once the listeners are bound.
	listening(advertise string)
	// leaving runs when the process is told to stop, before its servers
	// stop serving.
	leaving()
	// close releases what open made besides the broker, which the
	// caller closes.
	close()
}

// peerListener is what a member of a replicated queue serves on
// --peer-addr; the zero value, none.
type peerListener struct {
	addr     string
	register func(*grpc.Server)
	policy   *authz.Policy
}

// memberOptions are what either kind of member opens with.
type memberOptions struct {
	cfg         Config
	broker      broker.Config
	tls         *tlsfiles.Source
	metrics     *broker.Metrics
	registry    *prometheus.Registry
	observeSync func(time.Duration)
	log         *slog.Logger
}

// newMember is the member cfg describes: a replicated one when it names
// an --initial-cluster.
func newMember(o memberOptions) member {
	if o.cfg.InitialCluster == "" {
		return &single{o: o}
	}
	peers, _ := parseInitialCluster(o.cfg.InitialCluster) // Validate parsed it
	return &replicated{o: o, peers: peers}
}

// single is a queue of one member, on its own store.
type single struct{ o memberOptions }

func (s *single) open(context.Context) (*broker.Broker, error) {
	if err := refuseReplicatedLog(s.o.cfg.DataDir, "a single member would ignore it and serve an empty queue"); err != nil {
		return nil, err
	}
	return broker.Open(s.o.broker, store.Options{Dir: s.o.cfg.DataDir, ObserveSync: s.o.observeSync}, s.o.metrics, s.o.log)
}

func (*single) dashboard(b *broker.Broker, o *dashboard.Options, streams *server.Streams) dashboard.Source {
	return b
}

func (*single) serving(b *broker.Broker, own queuev1.QueueServiceServer, _ *server.Self) (queuev1.QueueServiceServer, func(context.Context) error, peerListener, error) {
	return own, func(context.Context) error { return b.Ready() }, peerListener{}, nil
}

func (*single) listening(string) {}
func (*single) leaving()         {}
func (*single) close()           {}

// errNoLeaderKnown is a replicated member's readiness while it knows no
// leader of the queue.
var errNoLeaderKnown = errors.New("this member knows no leader of the queue")
