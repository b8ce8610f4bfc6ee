package queue_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/batonrun/baton/client/certs"
	queueclient "github.com/batonrun/baton/client/queue"
	"github.com/batonrun/baton/client/tlsfiles"
	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// replicated is three baton-queue processes of one replicated queue, with
// 50 ms heartbeats and a 500 ms election timeout, and a client of each.
type replicated struct {
	t     *testing.T
	peers []string // the members' peer addresses
	procs []*proc
	qcs   []queuev1.QueueServiceClient
	ccs   []queuev1.ClusterServiceClient
}

func newReplicated(t *testing.T, extra ...string) *replicated {
	return newReplicatedWith(t, nil, extra...)
}

// newReplicatedWith is newReplicated with each member's proc passed to
// prepare, if set, before it starts.
func newReplicatedWith(t *testing.T, prepare func(i int, p *proc), extra ...string) *replicated {
	r := &replicated{t: t}
	peers := make([]string, 3)
	var cluster []string
	for i := range peers {
		peers[i] = freePort(t)
		cluster = append(cluster, fmt.Sprintf("m%d=%s", i+1, peers[i]))
	}
	r.peers = peers
	for i := range peers {
		args := []string{"--name", fmt.Sprintf("m%d", i+1), "--peer-addr", peers[i], "--initial-cluster", strings.Join(cluster, ","),
			"--heartbeat-interval", "50ms", "--election-timeout", "500ms"}
		p := newProc(t, append(args, extra...)...)
		if prepare != nil {
			prepare(i, p)
		}
		p.start()
		r.procs = append(r.procs, p)
		if slices.ContainsFunc(extra, func(a string) bool { return strings.HasPrefix(a, "--tls") }) {
			continue // TLS: the test dials
		}
		conn := dial(t, p.grpcAddr)
		r.qcs = append(r.qcs, queuev1.NewQueueServiceClient(conn))
		r.ccs = append(r.ccs, queuev1.NewClusterServiceClient(conn))
	}
	r.settle()
	return r
}

// settle waits until every member serves and knows a leader: a member
// with an empty log serves once it knows its Raft id (it first asks the
// others whether the queue is new), and forwards once it knows the
// leader.
func (r *replicated) settle() {
	r.t.Helper()
	for i, cc := range r.ccs {
		deadline := time.Now().Add(30 * time.Second)
		for {
			ctx, cancel := context.WithTimeout(r.t.Context(), time.Second)
			st, err := cc.Status(ctx, &queuev1.StatusRequest{})
			cancel()
			if err == nil && st.GetLeaderName() != "" {
				break
			}
			if time.Now().After(deadline) {
				r.t.Fatalf("member m%d knows no leader after 30 s: %v %v", i+1, st, err)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	// A member that found the queue in use rejoined as a learner, made a
	// voter once it has caught up: wait for every running member to vote.
	deadline := time.Now().Add(30 * time.Second)
	for {
		learners := r.runningLearners()
		if len(learners) == 0 {
			return
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("after 30 s, %v still learners", learners)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// runningLearners returns the names of the running members that some
// running member's MemberList shows as learners or leaves out, or every
// running member's when one does not answer (none when the test has no
// clients of its own). Every member's view counts: one that has not
// applied a promotion yet still takes the others alone for the voters.
func (r *replicated) runningLearners() []string {
	if len(r.ccs) == 0 {
		return nil // TLS: the test dials, and waits as it needs
	}
	var want []string
	for i, p := range r.procs {
		if p.running() {
			want = append(want, fmt.Sprintf("m%d", i+1))
		}
	}
	var learners []string
	for i, cc := range r.ccs {
		if !r.procs[i].running() {
			continue
		}
		ctx, cancel := context.WithTimeout(r.t.Context(), time.Second)
		ml, err := cc.MemberList(ctx, &queuev1.MemberListRequest{})
		cancel()
		if err != nil {
			return want
		}
		for _, name := range want {
			if !slices.Contains(learners, name) && !slices.ContainsFunc(ml.GetMembers(), func(m *queuev1.Member) bool { return m.GetName() == name && !m.GetLearner() }) {
				learners = append(learners, name)
			}
		}
	}
	return learners
}

// notLeader reports whether err is a member's refusal for not leading, or
// a member that is down: the caller tries another.
func notLeader(err error) bool { return status.Code(err) == codes.Unavailable }

// leader waits for a running member that says it leads (ClusterService
// Status, answered by the member itself) and answers an Add (to the queue
// "probe"), and returns its index. Any member answers the Add, forwarding
// it: Status tells the leader.
func (r *replicated) leader(ctx context.Context) int {
	r.t.Helper()
	for {
		for i, p := range r.procs {
			if !p.running() {
				continue
			}
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			st, err := r.ccs[i].Status(cctx, &queuev1.StatusRequest{})
			if err == nil && !st.GetMember().GetLeader() {
				cancel()
				continue
			}
			if err == nil {
				_, err = r.qcs[i].Add(cctx, &queuev1.AddRequest{Queue: "probe", Keys: []string{"p"}})
			}
			cancel()
			if err == nil {
				return i
			}
			if !notLeader(err) && status.Code(err) != codes.DeadlineExceeded {
				r.t.Fatalf("member %d: %v", i+1, err)
			}
		}
		if ctx.Err() != nil {
			r.t.Fatal("no member leads")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// add adds key through whichever member leads, trying each in turn; it
// returns whether a member acknowledged it.
func (r *replicated) add(ctx context.Context, key string) bool {
	for attempt := 0; attempt < 50 && ctx.Err() == nil; attempt++ {
		i := attempt % len(r.procs)
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := r.qcs[i].Add(cctx, &queuev1.AddRequest{Queue: "q", Keys: []string{key}})
		cancel()
		if err == nil {
			return true
		}
		time.Sleep(5 * time.Millisecond)
	}
	return false
}

// TestReplicatedQueueSurvivesLeaderKills: three real processes under two
// concurrent adders; the leader, holding leases, is SIGKILLed fifty times
// (and restarted from its disk before the next kill). After each kill a
// new leader is elected, and the tokens of the killed leader get
// LEASE_LOST there. At the end, every Add a member acknowledged is offered
// by the leader.
func TestReplicatedQueueSurvivesLeaderKills(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	r := newReplicated(t)
	var mu sync.Mutex
	acked := map[string]bool{}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range 2 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				k := fmt.Sprintf("w%d-%06d", w, i)
				if r.add(ctx, k) {
					mu.Lock()
					acked[k] = true
					mu.Unlock()
				}
			}
		})
	}
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(acked) }
	const kills = 50
	for kill := range kills {
		lead := r.leader(ctx)
		before := count()
		for count() < before+50 && ctx.Err() == nil {
			time.Sleep(5 * time.Millisecond)
		}
		lr, err := r.qcs[lead].Lease(ctx, &queuev1.LeaseRequest{Queue: "q", Worker: "w", MaxItems: 3, LeaseDuration: durationpb.New(time.Minute)})
		if err != nil {
			t.Fatalf("kill %d: Lease on the leader m%d: %v", kill, lead+1, err)
		}
		r.procs[lead].signal(syscall.SIGKILL, 10*time.Second)
		next := r.leader(ctx)
		var acks []*queuev1.Ack
		for _, l := range lr.GetLeases() {
			acks = append(acks, &queuev1.Ack{Key: l.GetKey(), Token: l.GetToken(), Outcome: &queuev1.Ack_Success{Success: &queuev1.AckSuccess{}}})
		}
		if len(acks) > 0 {
			ar, err := r.qcs[next].Ack(ctx, &queuev1.AckRequest{Queue: "q", Acks: acks})
			if err != nil {
				t.Fatalf("kill %d: Ack on the new leader m%d: %v", kill, next+1, err)
			}
			for _, res := range ar.GetResults() {
				if res.GetStatus() != queuev1.AckStatus_ACK_STATUS_LEASE_LOST {
					t.Errorf("kill %d: the killed leader's token for %s: %v on the new leader, want LEASE_LOST", kill, res.GetKey(), res.GetStatus())
				}
			}
		}
		r.procs[lead].start()
	}
	close(stop)
	wg.Wait()

	lead := r.leader(ctx)
	offered := map[string]bool{}
	for {
		lr, err := r.qcs[lead].Lease(ctx, &queuev1.LeaseRequest{Queue: "q", Worker: "check", MaxItems: 10000, LeaseDuration: durationpb.New(5 * time.Minute)})
		if err != nil {
			t.Fatal(err)
		}
		if len(lr.GetLeases()) == 0 {
			break
		}
		for _, l := range lr.GetLeases() {
			offered[l.GetKey()] = true
		}
	}
	lost := 0
	for k := range acked {
		if !offered[k] {
			lost++
			if lost <= 10 {
				t.Errorf("%s: acknowledged, never acked, not offered after the kills", k)
			}
		}
	}
	t.Logf("%d Adds acknowledged over %d leader kills, %d offered at the end, %d lost", len(acked), kills, len(offered), lost)
	if lost > 0 {
		t.Fatalf("%d acknowledged keys lost", lost)
	}
}

// followersOf returns the indexes of the members other than lead.
func followersOf(lead int) []int {
	var out []int
	for i := range 3 {
		if i != lead {
			out = append(out, i)
		}
	}
	return out
}

// TestReplicatedFollowersForward: every member answers every call. A key
// added through one follower is leased through the other and acked
// through the first; a Lease waiting on a follower is woken by an Add on
// another member; Inspect, List and Stats through a follower show the
// leader's state, leases included.
func TestReplicatedFollowersForward(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	r := newReplicated(t)
	lead := r.leader(ctx)
	f := followersOf(lead)
	a, b := r.qcs[f[0]], r.qcs[f[1]]
	if _, err := a.Add(ctx, &queuev1.AddRequest{Queue: "fwd", Keys: []string{"k1"}}); err != nil {
		t.Fatalf("Add through a follower: %v", err)
	}
	lr, err := b.Lease(ctx, &queuev1.LeaseRequest{Queue: "fwd", Worker: "w", MaxItems: 1})
	if err != nil || len(lr.GetLeases()) != 1 || lr.GetLeases()[0].GetKey() != "k1" {
		t.Fatalf("Lease through the other follower: %v %v", lr, err)
	}
	it, err := a.Inspect(ctx, &queuev1.InspectRequest{Queue: "fwd", Key: "k1"})
	if err != nil || it.GetItem().GetState() != queuev1.ItemState_ITEM_STATE_LEASED || it.GetItem().GetWorker() != "w" {
		t.Fatalf("Inspect through a follower: %v %v, want the leader's lease", it, err)
	}
	l := lr.GetLeases()[0]
	ar, err := a.Ack(ctx, &queuev1.AckRequest{Queue: "fwd", Acks: []*queuev1.Ack{{Key: l.GetKey(), Token: l.GetToken(), Outcome: &queuev1.Ack_Success{Success: &queuev1.AckSuccess{}}}}})
	if err != nil || ar.GetResults()[0].GetStatus() != queuev1.AckStatus_ACK_STATUS_OK {
		t.Fatalf("Ack through a follower: %v %v", ar, err)
	}

	woken := make(chan *queuev1.LeaseResponse, 1)
	go func() {
		lr, err := b.Lease(ctx, &queuev1.LeaseRequest{Queue: "fwd", Worker: "w", MaxItems: 1, Wait: durationpb.New(20 * time.Second)})
		if err != nil {
			t.Errorf("a waiting Lease through a follower: %v", err)
		}
		woken <- lr
	}()
	// The waiting Lease reaches the leader at some point; until then an
	// Add lands before it, and it gets the key at once.
	if _, err := r.qcs[lead].Add(ctx, &queuev1.AddRequest{Queue: "fwd", Keys: []string{"k2"}}); err != nil {
		t.Fatal(err)
	}
	select {
	case lr := <-woken:
		if len(lr.GetLeases()) != 1 || lr.GetLeases()[0].GetKey() != "k2" {
			t.Fatalf("the waiting Lease got %v, want k2", lr)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("the waiting Lease through a follower was not woken by the Add")
	}
	list, err := a.List(ctx, &queuev1.ListRequest{Queue: "fwd"})
	if err != nil || len(list.GetItems()) != 1 || list.GetItems()[0].GetKey() != "k2" {
		t.Fatalf("List through a follower: %v %v", list, err)
	}
	st, err := b.Stats(ctx, &queuev1.StatsRequest{Queue: "fwd"})
	if err != nil || len(st.GetQueues()) != 1 || st.GetQueues()[0].GetLeased() != 1 {
		t.Fatalf("Stats through a follower: %v %v", st, err)
	}
}

// TestReplicatedForwardingOverMTLS: with mutual TLS, the members tell each
// other their client addresses through the peer listeners; a lease taken
// through one follower is bound to the caller's identity on the leader, so
// the same worker acks it through the other follower while another worker
// gets LEASE_LOST; a worker that sets the forwarding metadata itself
// claims nothing by it, even with the queue-peer role beside its own on
// the client listener; and only members may call the peer listener.
func TestReplicatedForwardingOverMTLS(t *testing.T) {
	d := newTLSDir(t)
	for _, name := range []string{"worker-1", "worker-2"} {
		if _, err := certs.Issue(d.dir, certs.Leaf{Name: name, Roles: []string{tlsfiles.RoleWorker}, Hosts: []string{"127.0.0.1"}, Days: 1}, false, time.Now()); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := certs.Issue(d.dir, certs.Leaf{Name: "worker-peer", Roles: []string{tlsfiles.RoleWorker, tlsfiles.RoleQueuePeer}, Hosts: []string{"127.0.0.1"}, Days: 1}, false, time.Now()); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	r := newReplicated(t, d.serverArgs("queue")...)
	conn := func(addr, name string) *grpc.ClientConn {
		c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(d.source(t, d.dir, name).ClientCredentials("")))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	for _, p := range r.procs {
		c := conn(p.grpcAddr, "admin")
		r.qcs = append(r.qcs, queuev1.NewQueueServiceClient(c))
		r.ccs = append(r.ccs, queuev1.NewClusterServiceClient(c))
	}
	r.settle()
	lead := r.leader(ctx)
	f := followersOf(lead)
	// The followers' publications of their client addresses pass the
	// leader's peer listener, its mutual TLS and its policy.
	awaitClientAddrs(t, ctx, r.ccs[f[0]], r.wantClientAddrs())
	q := func(i int, name string) queuev1.QueueServiceClient {
		return queuev1.NewQueueServiceClient(conn(r.procs[i].grpcAddr, name))
	}
	c := leaseCalls{t, ctx}
	const queue = "bound"
	if _, err := q(f[0], "observer").Add(ctx, &queuev1.AddRequest{Queue: queue, Keys: []string{"k"}}); err != nil {
		t.Fatalf("Add through a follower: %v", err)
	}
	l := c.lease(q(f[0], "worker-1"), queue)
	if st := c.ack(q(f[1], "worker-2"), queue, l); st != queuev1.AckStatus_ACK_STATUS_LEASE_LOST {
		t.Errorf("worker-2's Ack of worker-1's lease, through the other follower: %v, want LEASE_LOST", st)
	}
	spoof := metadata.AppendToOutgoingContext(ctx, "baton-forwarded", "1", "baton-forwarded-holder", "worker-1")
	ar, err := q(lead, "worker-2").Ack(spoof, &queuev1.AckRequest{Queue: queue, Acks: []*queuev1.Ack{{Key: l.GetKey(), Token: l.GetToken(), Outcome: &queuev1.Ack_Success{Success: &queuev1.AckSuccess{}}}}})
	if err != nil || ar.GetResults()[0].GetStatus() != queuev1.AckStatus_ACK_STATUS_LEASE_LOST {
		t.Errorf("worker-2's Ack on the leader claiming to be forwarded for worker-1: %v %v, want LEASE_LOST", ar, err)
	}
	for _, i := range []int{lead, f[0]} {
		if st := (leaseCalls{t, spoof}).ack(q(i, "worker-peer"), queue, l); st != queuev1.AckStatus_ACK_STATUS_LEASE_LOST {
			t.Errorf("a worker and queue-peer certificate's Ack on m%d's client listener claiming to be forwarded for worker-1: %v, want LEASE_LOST", i+1, st)
		}
	}
	if st := c.ack(q(f[1], "worker-1"), queue, l); st != queuev1.AckStatus_ACK_STATUS_OK {
		t.Errorf("worker-1's Ack of its lease through the other follower: %v, want OK", st)
	}
	_, err = queuev1.NewQueueServiceClient(conn(r.peers[lead], "worker-1")).Add(ctx, &queuev1.AddRequest{Queue: queue, Keys: []string{"x"}})
	if status.Code(err) != codes.PermissionDenied {
		t.Errorf("a worker's Add on the leader's peer listener: %v, want PERMISSION_DENIED", err)
	}

	// A work stream through a follower binds its leases to its worker too.
	if _, err := q(f[0], "observer").Add(ctx, &queuev1.AddRequest{Queue: queue, Keys: []string{"s"}}); err != nil {
		t.Fatal(err)
	}
	ws, err := queueclient.New(conn(r.procs[f[0]].grpcAddr, "worker-1")).Work(ctx, queue, queueclient.WorkOptions{Worker: "w1"})
	if err != nil {
		t.Fatalf("worker-1's work stream through a follower: %v", err)
	}
	defer ws.Close()
	ev, err := ws.Recv()
	if err != nil || ev.Lease == nil || ev.Lease.Key != "s" {
		t.Fatalf("worker-1's stream: %+v %v, want the lease of s", ev, err)
	}
	pushed := &queuev1.Lease{Key: "s", Token: ev.Lease.Token}
	if st := c.ack(q(f[1], "worker-2"), queue, pushed); st != queuev1.AckStatus_ACK_STATUS_LEASE_LOST {
		t.Errorf("worker-2's Ack of worker-1's streamed lease: %v, want LEASE_LOST", st)
	}
	if err := ws.Ack(queueclient.Ack{Key: "s", Token: pushed.GetToken(), Outcome: queueclient.Success()}); err != nil {
		t.Fatal(err)
	}
	if ev, err := ws.Recv(); err != nil || ev.Ack == nil || ev.Ack.Status != queueclient.OK {
		t.Errorf("worker-1's ack on its stream: %+v %v, want OK", ev, err)
	}
	if _, err := queueclient.New(conn(r.procs[f[0]].grpcAddr, "viewer")).Work(ctx, queue, queueclient.WorkOptions{}); status.Code(err) != codes.PermissionDenied {
		t.Errorf("a viewer's work stream: %v, want PERMISSION_DENIED", err)
	}
}

// TestReplicatedClientFailsOver: the Go client given every member's
// address keeps adding while the member it is connected to and then the
// leader are SIGKILLed: each Add returns OK within a few seconds (the
// client retries UNAVAILABLE on the next address), and every key it was
// told was added is offered at the end.
func TestReplicatedClientFailsOver(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	r := newReplicated(t)
	c := r.client()
	lead := r.leader(ctx)
	var added []string
	add := func(n int) {
		for range n {
			k := fmt.Sprintf("k%05d", len(added))
			actx, acancel := context.WithTimeout(ctx, 10*time.Second)
			_, err := c.Add(actx, "q", []string{k}, queueclient.AddOptions{})
			acancel()
			if err != nil {
				t.Fatalf("Add %s through the client: %v", k, err)
			}
			added = append(added, k)
		}
	}
	add(50)
	// The client's connection is to the first address it could reach:
	// the first listed (pick_first).
	r.procs[0].signal(syscall.SIGKILL, 10*time.Second)
	add(50)
	r.procs[0].start()
	if lead != 0 {
		r.procs[lead].signal(syscall.SIGKILL, 10*time.Second)
		add(50)
		r.procs[lead].start()
	}
	add(50)
	offered := offeredBy(t, ctx, c)
	for _, k := range added {
		if !offered[k] {
			t.Errorf("%s: added through the client, not offered", k)
		}
	}
}

// TestReplicatedTwoOfThreeKilled: two of three members, the leader among
// them, are SIGKILLed between Adds and restarted from their disks (the
// restart after which a JetStream R3 stream can wedge, nats-server#8519):
// the first Add after the restarts is acknowledged within 5 s, and no
// acknowledged Add is lost. Done three times. (The Adds run one at a
// time; TestReplicatedQueueSurvivesLeaderKills kills under concurrent
// ones.)
func TestReplicatedTwoOfThreeKilled(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	r := newReplicated(t)
	c := r.client()
	a := &adds{t: t, ctx: ctx, c: c}
	add := a.add
	for round := range 3 {
		lead := r.leader(ctx)
		other := (lead + 1 + round%2) % 3
		for range 30 {
			add(10 * time.Second)
		}
		r.procs[lead].signal(syscall.SIGKILL, 10*time.Second)
		r.procs[other].signal(syscall.SIGKILL, 10*time.Second)
		r.procs[lead].start()
		r.procs[other].start()
		start := time.Now()
		add(5 * time.Second) // the first write after the restarts
		t.Logf("round %d: killed m%d (leader) and m%d; the first Add after their restart took %v", round, lead+1, other+1, time.Since(start).Round(time.Millisecond))
		for range 30 {
			add(10 * time.Second)
		}
	}
	a.offered("after the kills")
}

// adds adds one key at a time through c, each within a bound, and keeps
// those acknowledged.
type adds struct {
	t     *testing.T
	ctx   context.Context
	c     *queueclient.Client
	added []string
}

// add adds the next key; a failure within the bound fails the test.
func (a *adds) add(within time.Duration) {
	a.t.Helper()
	k := fmt.Sprintf("k%05d", len(a.added))
	actx, cancel := context.WithTimeout(a.ctx, within)
	defer cancel()
	if _, err := a.c.Add(actx, "q", []string{k}, queueclient.AddOptions{}); err != nil {
		a.t.Fatalf("Add %s within %v: %v", k, within, err)
	}
	a.added = append(a.added, k)
}

// offered checks that every acknowledged key is offered by the queue.
func (a *adds) offered(when string) {
	a.t.Helper()
	offered := offeredBy(a.t, a.ctx, a.c)
	for _, k := range a.added {
		if !offered[k] {
			a.t.Errorf("%s: acknowledged, not offered %s", k, when)
		}
	}
}

// client is the Go client given every member's address, retrying
// UNAVAILABLE quickly.
func (r *replicated) client() *queueclient.Client {
	addrs := make([]string, len(r.procs))
	for i, p := range r.procs {
		addrs[i] = p.grpcAddr
	}
	c, err := queueclient.Dial(strings.Join(addrs, ","), queueclient.WithBackoff(queueclient.Backoff{Initial: 10 * time.Millisecond, Max: 200 * time.Millisecond}))
	if err != nil {
		r.t.Fatal(err)
	}
	r.t.Cleanup(func() { c.Close() })
	return c
}

// offeredBy leases every key of the queue "q" through c, and returns them.
func offeredBy(t *testing.T, ctx context.Context, c *queueclient.Client) map[string]bool {
	t.Helper()
	offered := map[string]bool{}
	for {
		leases, err := c.Lease(ctx, "q", queueclient.LeaseOptions{Worker: "check", MaxItems: 1000, Duration: 5 * time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		if len(leases) == 0 {
			return offered
		}
		for _, l := range leases {
			offered[l.Key] = true
		}
	}
}

// TestReplicatedMemberLosesItsDisk: a follower is SIGKILLed and its data
// directory deleted while the others go on, past a compaction of their
// logs (--compact-bytes at its floor). Started again on the empty
// directory, it finds that the queue is in use and rejoins under a new
// Raft id, catches up by the leader's snapshot and counts again: with the
// other follower killed, writes still commit. Every acknowledged Add is
// offered at the end, and ClusterService lists three members with their
// client addresses.
func TestReplicatedMemberLosesItsDisk(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	r := newReplicated(t, "--compact-bytes", "65536")
	c := r.client()
	var added []string
	add := func(n int, within time.Duration) {
		t.Helper()
		for range n {
			k := fmt.Sprintf("k%05d-%s", len(added), strings.Repeat("x", 200))
			actx, acancel := context.WithTimeout(ctx, within)
			_, err := c.Add(actx, "q", []string{k}, queueclient.AddOptions{})
			acancel()
			if err != nil {
				t.Fatalf("Add %d within %v: %v", len(added), within, err)
			}
			added = append(added, k)
		}
	}
	add(100, 10*time.Second)
	lead := r.leader(ctx)
	f := followersOf(lead)
	lost, other := f[0], f[1]
	r.procs[lost].signal(syscall.SIGKILL, 10*time.Second)
	if err := os.RemoveAll(r.procs[lost].dir); err != nil {
		t.Fatal(err)
	}
	// Past --compact-bytes, so the leader's log no longer starts at 1.
	add(600, 10*time.Second)
	r.procs[lost].start()
	// Caught up: it has applied as far as the leader had committed.
	st, err := r.ccs[lead].Status(ctx, &queuev1.StatusRequest{})
	if err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		ls, err := r.ccs[lost].Status(ctx, &queuev1.StatusRequest{})
		if err == nil && ls.GetMember().GetAppliedIndex() >= st.GetCommitIndex() {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 30 s the member that lost its disk has not caught up: %v %v", ls, err)
		}
	}
	// The leader's dashboard shows the three members, the rejoined one
	// under its name, and their logs caught up (0 entries behind); a
	// follower's shows the leader and leaves the queues to it.
	type member struct {
		Name   string `json:"name"`
		Leader bool   `json:"leader"`
		Known  bool   `json:"lag_known"`
		Lag    uint64 `json:"lag"`
	}
	dash := func(i int, path string) (int, []byte) {
		resp, err := http.Get("http://" + r.procs[i].httpAddr + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, b
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		var ms struct{ Members []member }
		_, body := dash(lead, "/api/members")
		if err := json.Unmarshal(body, &ms); err != nil {
			t.Fatalf("/api/members: %v: %s", err, body)
		}
		behind := 0
		names := map[string]bool{}
		for _, m := range ms.Members {
			names[m.Name] = true
			if !m.Known || m.Lag > 0 || m.Leader != (m.Name == fmt.Sprintf("m%d", lead+1)) {
				behind++
			}
		}
		if len(ms.Members) == 3 && behind == 0 && names[fmt.Sprintf("m%d", lost+1)] {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the leader's /api/members after 20 s: %s", body)
		}
	}
	// A follower's page shows the queues too, through the leader, with
	// the leader's counts.
	if code, body := dash(other, "/api/queues"); code != http.StatusOK || !strings.Contains(string(body), `"name":"q"`) || !strings.Contains(string(body), `"counting_since_ms":`) {
		t.Errorf("a follower's /api/queues: %d %s, want the queues through the leader", code, body)
	}
	if _, body := dash(other, "/api/members"); !strings.Contains(string(body), fmt.Sprintf(`"name":"m%d","peer_addr":%q,"client_addr":%q,"leader":true`, lead+1, r.peers[lead], r.procs[lead].grpcAddr)) {
		t.Errorf("a follower's /api/members does not show the leader m%d: %s", lead+1, body)
	}

	// By the leader's snapshot: its log was compacted past the start.
	resp, err := http.Get("http://" + r.procs[lost].httpAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(metrics), `baton_queue_raft_snapshots_total{op="restored"} 1`) {
		t.Errorf("the rejoined member did not restore one snapshot:\n%s", grepLines(string(metrics), "baton_queue_raft_snapshots_total"))
	}
	// Its Raft log's saves are timed like a single store's group commits.
	if !strings.Contains(string(metrics), "baton_queue_store_fsync_duration_seconds_count ") || strings.Contains(string(metrics), "baton_queue_store_fsync_duration_seconds_count 0\n") {
		t.Errorf("the rejoined member observed no fsyncs:\n%s", grepLines(string(metrics), "baton_queue_store_fsync"))
	}
	r.procs[other].signal(syscall.SIGKILL, 10*time.Second)
	add(20, 10*time.Second) // needs the rejoined member's vote and disk
	offered := offeredBy(t, ctx, c)
	for _, k := range added {
		if !offered[k] {
			t.Errorf("%s: acknowledged, not offered", k[:6])
		}
	}
	ml, err := r.ccs[lost].MemberList(ctx, &queuev1.MemberListRequest{})
	if err != nil || len(ml.GetMembers()) != 3 {
		t.Fatalf("MemberList on the rejoined member: %v, %v; want three members", ml, err)
	}
	// The others' client addresses came to it in the leader's snapshot.
	if got, want := clientAddrs(ml.GetMembers()), r.wantClientAddrs(); !maps.Equal(got, want) {
		t.Errorf("MemberList on the rejoined member lists the client addresses %v, want %v", got, want)
	}
	p := r.procs[lost]
	logs, err := os.ReadFile(filepath.Join(p.logDir, fmt.Sprintf("run-%03d.log", p.n)))
	if err != nil || !strings.Contains(string(logs), "rejoined under a new Raft id") {
		t.Errorf("the rejoined member's log does not say it rejoined (%v):\n%s", err, logs)
	}
}

// clientAddrs is each member's client address as ms list them, by name.
func clientAddrs(ms []*queuev1.Member) map[string]string {
	out := map[string]string{}
	for _, m := range ms {
		out[m.GetName()] = m.GetClientAddr()
	}
	return out
}

// wantClientAddrs is the client address of each of the three members, by
// name: the address each listens on, which is what it advertises.
func (r *replicated) wantClientAddrs() map[string]string {
	out := map[string]string{}
	for i, p := range r.procs {
		out[fmt.Sprintf("m%d", i+1)] = p.grpcAddr
	}
	return out
}

// awaitClientAddrs waits until MemberList on cc lists want.
func awaitClientAddrs(t *testing.T, ctx context.Context, cc queuev1.ClusterServiceClient, want map[string]string) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		lctx, cancel := context.WithTimeout(ctx, time.Second)
		ml, err := cc.MemberList(lctx, &queuev1.MemberListRequest{})
		cancel()
		if err == nil && maps.Equal(clientAddrs(ml.GetMembers()), want) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 20 s, MemberList lists the client addresses %v (%v), want %v", clientAddrs(ml.GetMembers()), err, want)
		}
	}
}

// grepLines returns the lines of s that contain sub.
func grepLines(s, sub string) string {
	var out []string
	for line := range strings.SplitSeq(s, "\n") {
		if strings.Contains(line, sub) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

// TestReplicatedMemberAddAndRemove: a follower's MemberList lists every
// member's client address (each member publishes its own). MemberAdd,
// asked of a follower, adds a fourth member as a learner, with the client
// address it was given; started with an --initial-cluster that names it
// (so another cluster id than the queue's) and --initial-cluster-state
// existing, it joins as a voter, lists
// the four client addresses, and
// the four commit with one of the first three killed. MemberRemove then
// takes the killed member out, and with one more of the first three
// killed the leader and the new member alone commit: a majority of the
// three only if the new member votes (with it a learner, the test fails).
// Refusals: a name or address taken, a wildcard address, no such member,
// the leader itself.
func TestReplicatedMemberAddAndRemove(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	r := newReplicated(t)
	c := r.client()
	a := &adds{t: t, ctx: ctx, c: c}
	add := a.add
	for range 20 {
		add(10 * time.Second)
	}
	lead := r.leader(ctx)
	follower := (lead + 1) % 3
	want := r.wantClientAddrs()
	awaitClientAddrs(t, ctx, r.ccs[follower], want)

	peer4 := freePort(t)
	var cluster []string
	for i, p := range r.peers {
		cluster = append(cluster, fmt.Sprintf("m%d=%s", i+1, p))
	}
	cluster = append(cluster, "m4="+peer4)
	p4 := newProc(t, "--name", "m4", "--peer-addr", peer4, "--initial-cluster", strings.Join(cluster, ","),
		"--initial-cluster-state", "existing", "--heartbeat-interval", "50ms", "--election-timeout", "500ms")
	resp, err := r.ccs[follower].MemberAdd(ctx, &queuev1.MemberAddRequest{Name: "m4", PeerAddr: peer4, ClientAddr: p4.grpcAddr})
	if err != nil {
		t.Fatalf("MemberAdd through a follower: %v", err)
	}
	want["m4"] = p4.grpcAddr
	if got := clientAddrs(resp.GetMembers()); !maps.Equal(got, want) {
		t.Errorf("MemberAdd's answer lists the client addresses %v, want %v", got, want)
	}
	names := func(ms []*queuev1.Member) string {
		var out []string
		for _, m := range ms {
			s := m.GetName()
			if m.GetLearner() {
				s += "(learner)"
			}
			out = append(out, s)
		}
		return strings.Join(out, ",")
	}
	if got := names(resp.GetMembers()); got != "m1,m2,m3,m4(learner)" {
		t.Fatalf("members after MemberAdd: %s", got)
	}
	for _, bad := range []struct {
		req  *queuev1.MemberAddRequest
		code codes.Code
	}{
		{&queuev1.MemberAddRequest{Name: "m4", PeerAddr: freePort(t)}, codes.AlreadyExists},
		{&queuev1.MemberAddRequest{Name: "m5", PeerAddr: peer4}, codes.AlreadyExists},
		{&queuev1.MemberAddRequest{Name: "m5", PeerAddr: "0.0.0.0:1"}, codes.InvalidArgument},
	} {
		if _, err := r.ccs[lead].MemberAdd(ctx, bad.req); status.Code(err) != bad.code {
			t.Errorf("MemberAdd %v: %v, want %v", bad.req, err, bad.code)
		}
	}
	if _, err := r.ccs[follower].MemberRemove(ctx, &queuev1.MemberRemoveRequest{Name: "m9"}); status.Code(err) != codes.NotFound {
		t.Errorf("MemberRemove of no member: %v, want NotFound", err)
	}
	if _, err := r.ccs[follower].MemberRemove(ctx, &queuev1.MemberRemoveRequest{Name: fmt.Sprintf("m%d", lead+1)}); status.Code(err) != codes.FailedPrecondition {
		t.Errorf("MemberRemove of the leader: %v, want FailedPrecondition", err)
	}

	p4.start()
	cc4 := queuev1.NewClusterServiceClient(dial(t, p4.grpcAddr))
	deadline := time.Now().Add(30 * time.Second)
	for {
		lctx, lcancel := context.WithTimeout(ctx, time.Second)
		ml, err := cc4.MemberList(lctx, &queuev1.MemberListRequest{})
		st, serr := cc4.Status(lctx, &queuev1.StatusRequest{})
		lcancel()
		if err == nil && serr == nil && names(ml.GetMembers()) == "m1,m2,m3,m4" && st.GetLeaderName() != "" && st.GetMember().GetAppliedIndex() > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("m4 did not join as a voter within 30 s: %v %v, %v %v", ml, err, st, serr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	awaitClientAddrs(t, ctx, cc4, want)

	// Four voters: a majority is three, so with one of the first three
	// down every commit needs m4.
	lead = r.leader(ctx)
	down := (lead + 1) % 3
	r.procs[down].signal(syscall.SIGKILL, 10*time.Second)
	for range 20 {
		add(10 * time.Second)
	}
	rm, err := cc4.MemberRemove(ctx, &queuev1.MemberRemoveRequest{Name: fmt.Sprintf("m%d", down+1)})
	if err != nil {
		t.Fatalf("MemberRemove m%d through m4: %v", down+1, err)
	}
	if got := len(rm.GetMembers()); got != 3 {
		t.Fatalf("members after MemberRemove: %s", names(rm.GetMembers()))
	}
	// Three voters, two of them needed: the leader and one more, down one.
	lead = r.leader(ctx)
	var stop int
	for i := range 3 {
		if i != lead && i != down {
			stop = i
		}
	}
	r.procs[stop].signal(syscall.SIGKILL, 10*time.Second)
	for range 20 {
		add(10 * time.Second)
	}
	a.offered("")
}

// TestReplicatedWorkStreamThroughAFollower: a work stream opened on a
// follower is handed to the leader: leases are pushed through it and acks
// answered. When the leader is SIGKILLed the stream ends UNAVAILABLE; one
// reopened on the same member is pushed the key it held again, under a new
// leader's token, and the old token is LEASE_LOST.
func TestReplicatedWorkStreamThroughAFollower(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	r := newReplicated(t)
	lead := r.leader(ctx)
	f := followersOf(lead)[0]
	c := queueclient.New(dial(t, r.procs[f].grpcAddr), queueclient.WithBackoff(queueclient.Backoff{Initial: 20 * time.Millisecond, Max: 200 * time.Millisecond}))
	s, err := c.Work(ctx, "ws", queueclient.WorkOptions{Worker: "streamer", MaxInFlight: 2, LeaseDuration: 10 * time.Minute})
	if err != nil {
		t.Fatalf("open a work stream on a follower: %v", err)
	}
	defer s.Close()
	next := func(s *queueclient.Stream) queueclient.Event {
		t.Helper()
		ev, err := s.Recv()
		if err != nil {
			t.Fatalf("recv through a follower: %v", err)
		}
		return ev
	}
	if _, err := r.qcs[lead].Add(ctx, &queuev1.AddRequest{Queue: "ws", Keys: []string{"k1"}}); err != nil {
		t.Fatal(err)
	}
	ev := next(s)
	if ev.Lease == nil || ev.Lease.Key != "k1" {
		t.Fatalf("pushed %+v, want k1", ev)
	}
	it, err := r.qcs[lead].Inspect(ctx, &queuev1.InspectRequest{Queue: "ws", Key: "k1"})
	if err != nil || it.GetItem().GetWorker() != "streamer" {
		t.Fatalf("the leader shows %v %v, want k1 leased to streamer", it, err)
	}
	if err := s.Ack(queueclient.Ack{Key: "k1", Token: ev.Lease.Token, Outcome: queueclient.Success()}); err != nil {
		t.Fatal(err)
	}
	if ev := next(s); ev.Ack == nil || ev.Ack.Status != queueclient.OK {
		t.Fatalf("the ack through a follower answered %+v", ev)
	}
	if _, err := r.qcs[lead].Add(ctx, &queuev1.AddRequest{Queue: "ws", Keys: []string{"k2"}}); err != nil {
		t.Fatal(err)
	}
	held := next(s).Lease
	if held == nil || held.Key != "k2" {
		t.Fatalf("pushed %+v, want k2", held)
	}

	// The dashboards: the leader's lists the stream, which ends there; a
	// follower's leaves the streams to it and shows the leases and the
	// parked keys through it.
	if _, err := r.qcs[lead].Add(ctx, &queuev1.AddRequest{Queue: "wp", Keys: []string{"bad"}}); err != nil {
		t.Fatal(err)
	}
	lr, err := r.qcs[lead].Lease(ctx, &queuev1.LeaseRequest{Queue: "wp", Worker: "w", MaxItems: 1})
	if err != nil || len(lr.GetLeases()) != 1 {
		t.Fatalf("lease wp: %v %v", lr, err)
	}
	if _, err := r.qcs[lead].Ack(ctx, &queuev1.AckRequest{Queue: "wp", Acks: []*queuev1.Ack{{Key: "bad", Token: lr.GetLeases()[0].GetToken(),
		Outcome: &queuev1.Ack_Terminal{Terminal: &queuev1.AckTerminal{Error: "no such image"}}}}}); err != nil {
		t.Fatal(err)
	}
	dash := func(i int, path string) string {
		t.Helper()
		resp, err := http.Get("http://" + r.procs[i].httpAddr + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("%s on m%d: %d %s", path, i+1, resp.StatusCode, b)
		}
		return string(b)
	}
	if w := dash(lead, "/api/workers"); !strings.Contains(w, `"streams_known":true`) ||
		!regexp.MustCompile(`"worker":"streamer","queue":"ws","leased":1,"last_lease_ms":\d+,"streams":1,"in_flight":1,"max_in_flight":2`).MatchString(w) ||
		!regexp.MustCompile(`"queue":"ws","key":"k2","worker":"streamer","leased_since_ms":[1-9]`).MatchString(w) {
		t.Errorf("the leader's /api/workers: %s, want the stream through the follower and k2 held by it, since when", w)
	}
	if w := dash(f, "/api/workers"); !strings.Contains(w, `"streams_known":false`) ||
		!strings.Contains(w, `"worker":"streamer","queue":"ws","leased":1`) ||
		!strings.Contains(w, `"queue":"ws","key":"k2","worker":"streamer","leased_since_ms":0`) {
		t.Errorf("a follower's /api/workers: %s, want the streams left to the leader, and k2 held by streamer through it", w)
	}
	if p := dash(f, "/api/parked"); !strings.Contains(p, `"parked":[{"queue":"wp","key":"bad","attempts":1,"last_error":"no such image"}],"total":1,"more":0`) {
		t.Errorf("a follower's /api/parked: %s, want bad with its error", p)
	}

	r.procs[lead].signal(syscall.SIGKILL, 10*time.Second)
	ended := make(chan error, 1)
	go func() {
		for {
			if _, err := s.Recv(); err != nil {
				ended <- err
				return
			}
		}
	}()
	select {
	case err := <-ended:
		if status.Code(err) != codes.Unavailable {
			t.Fatalf("the stream ended with %v, want UNAVAILABLE", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the stream through a follower did not end within 10 s of the leader's SIGKILL")
	}
	again, err := c.Work(ctx, "ws", queueclient.WorkOptions{Worker: "streamer", MaxInFlight: 2})
	if err != nil {
		t.Fatalf("reopen on the same member: %v", err)
	}
	defer again.Close()
	ev = next(again)
	if ev.Lease == nil || ev.Lease.Key != "k2" || ev.Lease.Token == held.Token {
		t.Fatalf("the new leader pushed %+v, want k2 under a new token", ev)
	}
	res, err := c.Ack(ctx, "ws", []queueclient.Ack{{Key: "k2", Token: held.Token, Outcome: queueclient.Success()}})
	if err != nil || res[0].Status != queueclient.LeaseLost {
		t.Fatalf("an ack with the old leader's token: %v %v, want LEASE_LOST", res, err)
	}
}

// TestReplicatedAddedMemberStartedNewIsRefused: a member MemberAdd added,
// started with the default --initial-cluster-state new, refuses to start
// (exit non-zero, saying to start it with existing) and changes nothing:
// the queue keeps three voters and the learner it was told of. Before, it
// joined as a fourth voter, as if new meant nothing for a member added to
// a queue in use. Started again with existing on the same directory, it
// joins and votes.
func TestReplicatedAddedMemberStartedNewIsRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	r := newReplicated(t)
	for i := range 20 {
		if !r.add(ctx, fmt.Sprintf("k%d", i)) {
			t.Fatalf("Add k%d was not acknowledged", i)
		}
	}
	lead := r.leader(ctx)
	peer4 := freePort(t)
	cluster := []string{"m4=" + peer4}
	for i, p := range r.peers {
		cluster = append(cluster, fmt.Sprintf("m%d=%s", i+1, p))
	}
	p4 := newProc(t, "--name", "m4", "--peer-addr", peer4, "--initial-cluster", strings.Join(cluster, ","),
		"--heartbeat-interval", "50ms", "--election-timeout", "500ms")
	if _, err := r.ccs[lead].MemberAdd(ctx, &queuev1.MemberAddRequest{Name: "m4", PeerAddr: peer4}); err != nil {
		t.Fatalf("MemberAdd: %v", err)
	}
	members := func() string {
		t.Helper()
		ml, err := r.ccs[lead].MemberList(ctx, &queuev1.MemberListRequest{})
		if err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, m := range ml.GetMembers() {
			s := m.GetName()
			if m.GetLearner() {
				s += "(learner)"
			}
			out = append(out, s)
		}
		return strings.Join(out, ",")
	}
	const added = "m1,m2,m3,m4(learner)"
	if got := members(); got != added {
		t.Fatalf("members after MemberAdd: %s, want %s", got, added)
	}
	p4.start()
	select {
	case <-p4.exited:
	case <-time.After(30 * time.Second):
		t.Fatalf("m4, added and started with --initial-cluster-state new, still runs; members %s", members())
	}
	if p4.waitErr == nil {
		t.Errorf("m4, added and started with --initial-cluster-state new, exited 0")
	}
	if line := grepLines(p4.log(), "--initial-cluster-state existing"); line == "" {
		t.Errorf("m4's refusal does not say to start it with --initial-cluster-state existing:\n%s", p4.log())
	}
	if got := members(); got != added {
		t.Errorf("members after m4 was refused: %s, want %s unchanged", got, added)
	}
	if !r.add(ctx, "after-refusal") {
		t.Fatal("no Add acknowledged after m4 was refused")
	}

	p4.args = append(p4.args, "--initial-cluster-state", "existing")
	p4.start()
	cc4 := queuev1.NewClusterServiceClient(dial(t, p4.grpcAddr))
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		lctx, lcancel := context.WithTimeout(ctx, time.Second)
		st, err := cc4.Status(lctx, &queuev1.StatusRequest{})
		lcancel()
		if err == nil && st.GetLeaderName() != "" && members() == "m1,m2,m3,m4" {
			break
		}
		if time.Now().After(deadline) || !p4.running() {
			t.Fatalf("m4 started with existing did not join as a voter: %v %v, members %s", st, err, members())
		}
	}
}
