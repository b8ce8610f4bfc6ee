package framework

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	queueclient "github.com/batonrun/baton/client/queue"
)

// QueueClusterOptions configures StartQueueCluster. The zero value is
// three members with 100 ms heartbeats and a 1 s election timeout, each
// on a new data directory.
type QueueClusterOptions struct {
	// Members is how many members the queue has; 0 means 3.
	Members int
	// HeartbeatInterval and ElectionTimeout are raft's timing
	// (--heartbeat-interval, --election-timeout); 0 means 100 ms and 1 s,
	// short enough that a test waits a second or two for a new leader,
	// long enough that -race binaries on a loaded machine do not campaign
	// for want of a heartbeat.
	HeartbeatInterval, ElectionTimeout time.Duration
	// Args are further flags of every member.
	Args []string
}

// QueueCluster is a replicated queue: baton-queue processes started with
// one --initial-cluster, named queue-1, queue-2, … in Members' order.
type QueueCluster struct {
	// Members are the member processes. Each keeps its addresses, data
	// directory and name across Stop, Kill and Start.
	Members []*Queue
	// Client is a client given every member's address (Addrs), as the
	// observer and the workers dial a replicated queue, closed when the
	// test ends.
	Client *queueclient.Client
}

// Addrs returns every member's gRPC address, comma-separated in Members'
// order: what --queue-addr takes for a replicated queue.
func (c *QueueCluster) Addrs() string {
	addrs := make([]string, len(c.Members))
	for i, m := range c.Members {
		addrs[i] = m.Addr
	}
	return strings.Join(addrs, ",")
}

// StartQueueCluster builds baton-queue and starts the members of a new
// replicated queue together (a member is ready only once it knows a
// leader, which needs a majority of them running), and waits until every
// one is ready. It fails the test if it cannot.
func StartQueueCluster(t testing.TB, o QueueClusterOptions) *QueueCluster {
	t.Helper()
	if o.Members == 0 {
		o.Members = 3
	}
	if o.HeartbeatInterval == 0 {
		o.HeartbeatInterval = 100 * time.Millisecond
	}
	if o.ElectionTimeout == 0 {
		o.ElectionTimeout = time.Second
	}
	c := &QueueCluster{}
	peers := make([]string, o.Members)
	initial := make([]string, o.Members)
	for i := range peers {
		peers[i] = peerAddr(t)
		initial[i] = fmt.Sprintf("%s=%s", memberName(i), peers[i])
	}
	services := make([]*service, o.Members)
	for i := range services {
		dir := t.TempDir()
		args := []string{"--data-dir", dir, "--name", memberName(i), "--peer-addr", peers[i],
			"--initial-cluster", strings.Join(initial, ",")}
		args = durationFlag(args, "grace-period", testGracePeriod)
		args = durationFlag(args, "heartbeat-interval", o.HeartbeatInterval)
		args = durationFlag(args, "election-timeout", o.ElectionTimeout)
		services[i] = newService(t, serviceSpec{
			name:  "baton-queue",
			flags: func(g, h string) []string { return []string{"--grpc-addr", g, "--http-addr", h} },
			args:  append(args, o.Args...),
		})
		c.Members = append(c.Members, &Queue{Process: services[i].Process, DataDir: dir, Name: memberName(i), PeerAddr: peers[i]})
	}
	// Together: each start waits for its member's readiness, which waits
	// for the others.
	errs := make([]error, len(services))
	var wg sync.WaitGroup
	for i, s := range services {
		wg.Go(func() { errs[i] = s.start() })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	for i, s := range services {
		m := c.Members[i]
		m.Addr, m.HTTPAddr = s.addrs()
		cl, err := queueclient.Dial(m.Addr)
		if err != nil {
			t.Fatalf("framework: dial %s: %v", m.Name, err)
		}
		t.Cleanup(func() { cl.Close() })
		m.Client = cl
	}
	cl, err := queueclient.Dial(c.Addrs())
	if err != nil {
		t.Fatalf("framework: dial the queue's members: %v", err)
	}
	t.Cleanup(func() { cl.Close() })
	c.Client = cl
	// A member that found the queue in use as it started (the others
	// elected a leader before it asked) rejoined as a learner, a voter
	// once it has caught up: the queue survives the loss of a member only
	// then, and only once every member has applied the promotion (a
	// member that has not still counts the others alone as voters).
	WaitFor(t, 30*time.Second, "every member of the queue a voter, as every member sees it", func() bool {
		for _, m := range c.Members {
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			ms, err := m.Client.Cluster().MemberList(ctx)
			cancel()
			if err != nil || len(ms) != len(c.Members) {
				return false
			}
			for _, m := range ms {
				if m.GetLearner() {
					return false
				}
			}
		}
		return true
	})
	return c
}

// Leader waits up to timeout for a running member that says it leads
// (ClusterService Status, answered by the member itself) and returns its
// index in Members. It fails the test if none does in time.
func (c *QueueCluster) Leader(t testing.TB, timeout time.Duration) int {
	t.Helper()
	lead := -1
	WaitFor(t, timeout, "a member of the queue that leads", func() bool {
		for i, m := range c.Members {
			if !m.Running() {
				continue
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Second)
			st, err := m.Client.Cluster().Status(ctx)
			cancel()
			if err == nil && st.GetMember().GetLeader() {
				lead = i
				return true
			}
		}
		return false
	})
	return lead
}

// memberName is the --name of the i-th member of a QueueCluster.
func memberName(i int) string { return fmt.Sprintf("queue-%d", i+1) }

// peerAddrs are the peer addresses handed out in this process: the
// kernel hands a just-closed port out again within a few hundred binds,
// and two members given one address would not form a queue.
var peerAddrs = struct {
	sync.Mutex
	seen map[string]bool
}{seen: map[string]bool{}}

// peerAddr returns a loopback address for a member's --peer-addr, which
// --initial-cluster names before any member starts: nothing listened on
// it a moment ago, and this process has not handed it out before.
func peerAddr(t testing.TB) string {
	t.Helper()
	for {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		addr := l.Addr().String()
		l.Close()
		peerAddrs.Lock()
		taken := peerAddrs.seen[addr]
		peerAddrs.seen[addr] = true
		peerAddrs.Unlock()
		if !taken {
			return addr
		}
	}
}
