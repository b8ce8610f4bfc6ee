package cli

import (
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	queueclient "github.com/batonrun/baton/client/queue"
	"github.com/batonrun/baton/test/framework"
)

// membersJSON is what `queue members -o json` prints.
type membersJSON struct {
	Members []member `json:"members"`
}

type member struct {
	Name        string `json:"name"`
	ClientAddr  string `json:"clientAddr"`
	Leader      bool   `json:"leader"`
	Term        string `json:"term"` // uint64 is a string in protojson
	Unreachable bool   `json:"unreachable"`
}

// TestReplicatedQueue is what an operator of a replicated queue meets
// with batonctl given every member (--queue-addr a,b,c), as after `make
// up-ha` and a kill of the leader: status reports each member and its
// role, and the queue healthy while a majority answers and one leads;
// queue members is the leader's view whichever member answers, a member
// the leader no longer hears from is unreachable, and what is not known
// is "-", not 0; the queue commands and snapshot save get past a dead
// first member.
func TestReplicatedQueue(t *testing.T) {
	c := framework.StartQueueCluster(t, framework.QueueClusterOptions{})
	e := env{etcd: startEtcd(t), queue: c.Addrs()}
	ctx := t.Context()
	if _, err := c.Client.Add(ctx, "jobs", []string{"default/a"}, queueclient.AddOptions{}); err != nil {
		t.Fatal(err)
	}
	httpAddrs := func(ms ...*framework.Queue) string {
		var out []string
		for _, m := range ms {
			out = append(out, m.HTTPAddr)
		}
		return strings.Join(out, ",")
	}
	status := func(e env, args ...string) result {
		return e.run(t, "", append([]string{"status", "--observer-http-addr", deadAddr, "--worker-http-addr", ""}, args...)...)
	}
	lead := c.Leader(t, 30*time.Second)
	leader := c.Members[lead]
	var followers []*framework.Queue
	for i, m := range c.Members {
		if i != lead {
			followers = append(followers, m)
		}
	}

	// status: a row for the queue, one per address (a dead one
	// included), each member's role from its own ClusterService Status.
	withDead := env{etcd: e.etcd, queue: c.Addrs() + "," + deadAddr}
	r := awaitRun(t, "status reports the queue healthy", func() result {
		return status(withDead, "--queue-http-addr", httpAddrs(c.Members...)+","+deadAddr)
	}, func(r result) bool {
		// grpc.health.v1 follows readiness a moment behind /readyz.
		return hasRow(r.stdout, "queue", withDead.queue, "OK") && strings.Count(r.stdout, "SERVING, /readyz ok") == 3
	})
	if r.code != 1 || r.stderr != "error: not healthy: observer\n" {
		t.Errorf("status with the queue healthy and the observer down: exit %d, stderr %q, want only the observer named", r.code, r.stderr)
	}
	if !hasRow(r.stdout, "queue", withDead.queue, "OK", leader.Name, "leads,") {
		t.Errorf("status does not say %s leads:\n%s", leader.Name, r.stdout)
	}
	for _, m := range c.Members {
		role := "follower"
		if m == leader {
			role = "leader,"
		}
		if !hasRow(r.stdout, "member", m.Addr+",", "http://"+m.HTTPAddr, "OK", m.Name+":", role) {
			t.Errorf("status lacks %s as %s:\n%s", m.Name, role, r.stdout)
		}
	}
	if !hasRow(r.stdout, "member", deadAddr+",", "http://"+deadAddr, "DOWN", "unreachable:") {
		t.Errorf("status lacks the dead address as unreachable:\n%s", r.stdout)
	}
	// The HTTP addresses as a global flag (the alias make up-ha prints
	// carries them); without them, members sharing a host are probed over
	// gRPC only, never all at one derived address.
	if r := e.run(t, "", "--queue-http-addr", httpAddrs(c.Members...), "status", "--observer-http-addr", deadAddr, "--worker-http-addr", ""); !hasRow(r.stdout, "member", leader.Addr+",", "http://"+leader.HTTPAddr, "OK") {
		t.Errorf("status with a global --queue-http-addr: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = status(e)
	if !hasRow(r.stdout, "queue", c.Addrs(), "OK") || !hasRow(r.stdout, "member", leader.Addr, "OK", leader.Name+":", "leader,") || !strings.Contains(r.stdout, "/readyz not probed") {
		t.Errorf("status without --queue-http-addr: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if r := status(e, "--queue-http-addr", leader.HTTPAddr); r.code != 2 || !strings.Contains(r.stderr, "--queue-http-addr") {
		t.Errorf("status with one HTTP address for three members: exit %d, stderr %q, want a usage error", r.code, r.stderr)
	}

	// queue members: the leader's view even when a follower is the first
	// address: the leader's term is known, and what is not is "-".
	followerFirst := env{queue: followers[0].Addr + "," + followers[1].Addr + "," + leader.Addr}
	// Polled: a leader reads raft's record of whom it heard from once a
	// tick, and a read just after raft's quorum check finds it cleared.
	awaitRun(t, "queue members lists the leader's view", func() result {
		return followerFirst.run(t, "", "queue", "members")
	}, func(r result) bool {
		lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
		if r.code != 0 || len(lines) != 4 || !hasRow(lines[0], "NAME", "CLIENT-ADDR", "PEER-ADDR", "LEADER", "TERM", "APPLIED", "VOTER", "LEVEL", "STATE") {
			return false
		}
		for _, line := range lines[1:] {
			f := strings.Fields(line)
			switch {
			case len(f) != 9:
				return false
			case f[0] == leader.Name && (f[3] != "true" || f[4] == "-" || f[4] == "0" || f[8] != "leader"):
				return false // the leader's own term is known
			case f[0] != leader.Name && (f[3] != "false" || f[4] == "0" || f[5] == "0" || f[8] != "follower"):
				return false // a follower's term is not known to the leader: "-", never 0
			}
		}
		return true
	})
	var mj membersJSON
	if err := json.Unmarshal([]byte(followerFirst.run(t, "", "queue", "members", "-o", "json").mustSucceed(t).stdout), &mj); err != nil || len(mj.Members) != 3 {
		t.Fatalf("queue members -o json: %+v %v", mj, err)
	}
	for _, m := range mj.Members {
		if m.Leader && (m.Name != leader.Name || m.Term == "0") {
			t.Errorf("-o json: the leader %+v, want %s with its term (the leader's own view)", m, leader.Name)
		}
	}

	// version: each member's format level as the leader lists them, and
	// the queue's from the leader's Status, whichever member is first.
	var vj versionReport
	if r := followerFirst.run(t, "", "version", "-o", "json"); json.Unmarshal([]byte(r.stdout), &vj) != nil || vj.Queue == nil ||
		vj.Queue.Leader != leader.Name || vj.Queue.FormatLevel == 0 || len(vj.Queue.Members) != 3 ||
		slices.ContainsFunc(vj.Queue.Members, func(m memberVersion) bool { return m.FormatLevel == 0 }) {
		t.Errorf("version -o json: want %s leading and every format level known; exit %d\n%s%s", leader.Name, r.code, r.stdout, r.stderr)
	}

	// A follower killed: the leader no longer hears from it.
	gone := followers[0]
	gone.Kill()
	awaitRun(t, gone.Name+" shown unreachable", func() result {
		return followerFirst.run(t, "", "queue", "members")
	}, func(r result) bool { return strings.HasSuffix(rowOf(r.stdout, gone.Name), " unreachable") })
	mj = membersJSON{}
	if out := followerFirst.run(t, "", "queue", "members", "-o", "json").mustSucceed(t).stdout; json.Unmarshal([]byte(out), &mj) != nil ||
		!slices.ContainsFunc(mj.Members, func(m member) bool { return m.Name == gone.Name && m.Unreachable }) {
		t.Errorf("-o json does not mark %s unreachable:\n%s", gone.Name, out)
	}
	gone.Start()
	awaitRun(t, gone.Name+" no longer unreachable", func() result {
		return followerFirst.run(t, "", "queue", "members")
	}, func(r result) bool { return strings.HasSuffix(rowOf(r.stdout, gone.Name), " follower") })

	// The leader killed, its address first: the others answer every
	// command, and status reports the queue healthy under a new leader.
	leader.Kill()
	leaderFirst := env{etcd: e.etcd, queue: leader.Addr + "," + followers[0].Addr + "," + followers[1].Addr}
	httpList := httpAddrs(leader, followers[0], followers[1])
	r = awaitRun(t, "status reports a new leader", func() result {
		return status(leaderFirst, "--queue-http-addr", httpList)
	}, func(r result) bool { return hasRow(r.stdout, "queue", leaderFirst.queue, "OK") })
	if r.stderr != "error: not healthy: observer\n" || !hasRow(r.stdout, "member", leader.Addr+",", "http://"+leader.HTTPAddr, "DOWN", "unreachable:") {
		t.Errorf("status with the leader killed: stderr %q\n%s", r.stderr, r.stdout)
	}
	if s := leaderFirst.run(t, "", "queue", "stats").mustSucceed(t).stdout; !hasRow(s, "jobs", "1") {
		t.Errorf("queue stats with the first member dead:\n%s", s)
	}
	path := filepath.Join(t.TempDir(), "queue.bak")
	if out := leaderFirst.run(t, "", "queue", "snapshot", "save", path).mustSucceed(t).stdout; !strings.Contains(out, "saved ") {
		t.Errorf("snapshot save with the first member dead: %q", out)
	}
	awaitRun(t, "queue members shows the killed leader unreachable", func() result {
		return leaderFirst.run(t, "", "queue", "members")
	}, func(r result) bool { return strings.HasSuffix(rowOf(r.stdout, leader.Name), " unreachable") })

	// Two of three down: no majority, the queue is not healthy.
	followers[0].Kill()
	r = awaitRun(t, "status reports the queue down", func() result {
		return status(leaderFirst, "--queue-http-addr", httpList)
	}, func(r result) bool { return hasRow(r.stdout, "queue", leaderFirst.queue, "DOWN") })
	if r.code != 1 || r.stderr != "error: not healthy: queue, observer\n" {
		t.Errorf("status with two members of three down: exit %d, stderr %q", r.code, r.stderr)
	}
}

// awaitRun runs batonctl until ok holds of what it printed, for at most
// 30 s, and returns that run; the failure shows the last one.
func awaitRun(t *testing.T, what string, run func() result, ok func(result) bool) result {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		r := run()
		if ok(r) {
			return r
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 30s: %s; the last run: exit %d\nstdout:\n%s\nstderr:\n%s", what, r.code, r.stdout, r.stderr)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// rowOf returns the line of table whose first cell is name, its trailing
// spaces cut.
func rowOf(table, name string) string {
	for _, line := range strings.Split(table, "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == name {
			return strings.TrimRight(line, " ")
		}
	}
	return ""
}

// TestQueueMoveLeaderToTheLeader: `queue move-leader --to` the member that
// leads is a no-op, as kubectl's apply of an unchanged object is: it exits
// 0 and says that member leads already, and the term shows nothing moved
// (a transfer starts a new term). A follower named takes over; a name no
// member has is refused, exit 1, naming it.
func TestQueueMoveLeaderToTheLeader(t *testing.T) {
	c := framework.StartQueueCluster(t, framework.QueueClusterOptions{})
	e := env{queue: c.Addrs()}
	leader := c.Members[c.Leader(t, 30*time.Second)]
	term := func() uint64 {
		st, err := c.Client.Cluster().Status(t.Context())
		if err != nil {
			t.Fatal(err)
		}
		return st.GetMember().GetTerm()
	}
	before := term()
	r := e.run(t, "", "queue", "move-leader", "--to", leader.Name)
	if want := leader.Name + " already leads the queue; nothing changed\n"; r.code != 0 || r.stdout != want || r.stderr != "" {
		t.Errorf("move-leader --to the leader: exit %d, stdout %q, stderr %q; want exit 0 and %q", r.code, r.stdout, r.stderr, want)
	}
	if after := term(); after != before {
		t.Errorf("move-leader --to the leader moved the term from %d to %d", before, after)
	}
	var follower string
	for _, m := range c.Members {
		if m != leader {
			follower = m.Name
		}
	}
	if r := e.run(t, "", "queue", "move-leader", "--to", follower); r.code != 0 || r.stdout != follower+" leads the queue\n" {
		t.Errorf("move-leader --to a follower: exit %d, stdout %q, stderr %q", r.code, r.stdout, r.stderr)
	}
	if r := e.run(t, "", "queue", "move-leader", "--to", "nosuch"); r.code != 1 || !strings.Contains(r.stderr, "no member is named nosuch") {
		t.Errorf("move-leader --to a name no member has: exit %d, stderr %q", r.code, r.stderr)
	}
}

// TestQueueMembersAddSaysHowToStartIt: `queue members add` on a replicated
// queue lists the new member as a learner (VOTER false) and says on
// stderr how to start it: with --initial-cluster-state existing, without
// which it refuses to start.
func TestQueueMembersAddSaysHowToStartIt(t *testing.T) {
	c := framework.StartQueueCluster(t, framework.QueueClusterOptions{})
	e := env{queue: c.Addrs()}
	c.Leader(t, 30*time.Second)
	r := e.run(t, "", "queue", "members", "add", "queue-4", "--peer-addr", "127.0.0.1:1")
	if row := strings.Fields(rowOf(r.stdout, "queue-4")); r.code != 0 || len(row) != 9 || row[6] != "false" || row[8] != "learner" {
		t.Errorf("members add: exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	if want := "now start queue-4 on an empty --data-dir with --name queue-4, --peer-addr 127.0.0.1:1, --initial-cluster-state existing"; !strings.HasPrefix(r.stderr, want) {
		t.Errorf("members add says on stderr %q, want it to start with %q", r.stderr, want)
	}
}
