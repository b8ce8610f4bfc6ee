package service_test

import (
	"errors"
	"net"
	"os"
	"strings"
	"testing"

	queueclient "github.com/batonrun/baton/client/queue"
	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
	"github.com/batonrun/baton/services/queue/service"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
)

// TestClusterServiceOneMember: a queue without --initial-cluster lists one
// member, itself: its --name, its advertised address (by default the bound
// gRPC address), no peer address, the leader of the store's epoch as term.
// Status says the same. The applied index rises with a change that writes
// and not with one that collapses; a restart starts a higher term at 0.
func TestClusterServiceOneMember(t *testing.T) {
	dir := t.TempDir()
	h := startWith(t, dir, func(c *service.Config) { c.Name = "queue-a" })
	ctx := ctxT(t)
	cl := h.c.Cluster()

	members, err := cl.MemberList(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(members) != 1 {
		t.Fatalf("MemberList = %v, want one member", members)
	}
	m := members[0]
	if m.GetName() != "queue-a" || m.GetClientAddr() != h.grpcAddr || m.GetPeerAddr() != "" || !m.GetLeader() || m.GetTerm() == 0 {
		t.Fatalf("the member is %v, want queue-a at %s, no peer address, the leader of a term > 0", m, h.grpcAddr)
	}
	st, err := cl.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(st.GetMember(), m) || st.GetLeaderName() != "queue-a" || st.GetCommitIndex() != m.GetAppliedIndex() || st.GetMemberCount() != 1 {
		t.Fatalf("Status = %v, want the member %v, leader queue-a, commit index = applied index, 1 member", st, m)
	}

	// A lease token carries the epoch the term reports.
	if _, err := h.c.Add(ctx, "jobs", []string{"a"}, queueclient.AddOptions{}); err != nil {
		t.Fatal(err)
	}
	leases, err := h.c.Lease(ctx, "jobs", queueclient.LeaseOptions{Worker: "w"})
	if err != nil || len(leases) != 1 {
		t.Fatalf("Lease = %v, %v", leases, err)
	}
	if got := leases[0].Token >> 44; got != m.GetTerm() {
		t.Errorf("the token's epoch is %d, the term %d: they are the same number", got, m.GetTerm())
	}

	applied := func() uint64 {
		t.Helper()
		st, err := cl.Status(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return st.GetMember().GetAppliedIndex()
	}
	before := applied()
	if before <= m.GetAppliedIndex() {
		t.Errorf("applied index %d after an Add that wrote, was %d: it must rise", before, m.GetAppliedIndex())
	}
	if _, err := h.c.Add(ctx, "jobs", []string{"b", "c"}, queueclient.AddOptions{}); err != nil {
		t.Fatal(err)
	}
	after := applied()
	if after != before+1 {
		t.Errorf("applied index %d after one more Add, was %d: want one more", after, before)
	}
	if res, err := h.c.Add(ctx, "jobs", []string{"b"}, queueclient.AddOptions{}); err != nil || res.Collapsed != 1 {
		t.Fatalf("collapsing Add = %v, %v", res, err)
	}
	if got := applied(); got != after {
		t.Errorf("applied index %d after an Add that collapsed (writes nothing), was %d", got, after)
	}

	// A restart is a new term, which starts counting again.
	if _, err := h.stop(); err != nil {
		t.Fatal(err)
	}
	h2 := startWith(t, dir, func(c *service.Config) { c.Name = "queue-a" })
	st2, err := h2.c.Cluster().Status(ctxT(t))
	if err != nil {
		t.Fatal(err)
	}
	if got := st2.GetMember(); got.GetTerm() <= m.GetTerm() || got.GetAppliedIndex() != 0 {
		t.Errorf("after a restart: term %d, applied index %d; want a term above %d and 0", got.GetTerm(), got.GetAppliedIndex(), m.GetTerm())
	}
}

// TestClusterServiceAdvertiseAddr: --advertise-addr is the client address
// as given; without it, a wildcard --grpc-addr is the host name with the
// bound port.
func TestClusterServiceAdvertiseAddr(t *testing.T) {
	h := startWith(t, t.TempDir(), func(c *service.Config) { c.AdvertiseAddr = "queue-0.queue.baton.svc:7070" })
	members, err := h.c.Cluster().MemberList(ctxT(t))
	if err != nil || len(members) != 1 || members[0].GetClientAddr() != "queue-0.queue.baton.svc:7070" {
		t.Fatalf("MemberList = %v, %v; want the client address queue-0.queue.baton.svc:7070", members, err)
	}

	host, err := os.Hostname()
	if err != nil {
		t.Skipf("no host name to derive from: %v", err)
	}
	w := startWith(t, t.TempDir(), func(c *service.Config) {
		c.GRPCAddr = ":0"
		c.TLS.Insecure = true // a wildcard is beyond loopback
	})
	_, port, err := net.SplitHostPort(w.grpcAddr)
	if err != nil {
		t.Fatal(err)
	}
	members, err = w.c.Cluster().MemberList(ctxT(t))
	if want := net.JoinHostPort(host, port); err != nil || len(members) != 1 || members[0].GetClientAddr() != want {
		t.Fatalf("with --grpc-addr :0, MemberList = %v, %v; want the client address %s", members, err, want)
	}
}

// TestClusterServiceRefusesMembershipChanges: with one member, a valid
// MemberAdd or MemberRemove is FAILED_PRECONDITION with the reason
// NOT_REPLICATED, saying why, and changes nothing: not the members, not
// the log.
func TestClusterServiceRefusesMembershipChanges(t *testing.T) {
	h := startWith(t, t.TempDir(), func(c *service.Config) { c.Name = "queue-a" })
	ctx := ctxT(t)
	cl := h.c.Cluster()
	before, err := cl.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		call func() error
		want string
	}{
		{"add", func() error { _, err := cl.MemberAdd(ctx, "queue-b", "queue-b:7072", "queue-b:7070"); return err },
			`member "queue-b" was not added: this queue is one member, "queue-a", started without --initial-cluster, and membership changes need a replicated queue; nothing changed`},
		{"add without a client address", func() error { _, err := cl.MemberAdd(ctx, "queue-b", "10.0.0.2:7072", ""); return err },
			`member "queue-b" was not added`},
		{"remove another", func() error { _, err := cl.MemberRemove(ctx, "queue-b"); return err },
			`member "queue-b" was not removed: this queue is one member, "queue-a", started without --initial-cluster`},
		{"remove itself", func() error { _, err := cl.MemberRemove(ctx, "queue-a"); return err },
			`member "queue-a" was not removed`},
	} {
		err := tc.call()
		if status.Code(err) != codes.FailedPrecondition || !errors.Is(err, queueclient.ErrNotReplicated) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v; want FAILED_PRECONDITION, ErrNotReplicated, containing %q", tc.name, err, tc.want)
		}
	}
	after, err := cl.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(before, after) {
		t.Errorf("Status changed across refused membership changes: %v, then %v", before, after)
	}
}

// TestClusterServiceRefusesBadArguments: MemberAdd and MemberRemove check
// every argument before anything else: INVALID_ARGUMENT naming the field.
func TestClusterServiceRefusesBadArguments(t *testing.T) {
	h := start(t)
	ctx := ctxT(t)
	raw := queuev1.NewClusterServiceClient(h.conn)
	add := func(name, peer, client string) func() error {
		return func() error {
			_, err := raw.MemberAdd(ctx, &queuev1.MemberAddRequest{Name: name, PeerAddr: peer, ClientAddr: client})
			return err
		}
	}
	remove := func(name string) func() error {
		return func() error {
			_, err := raw.MemberRemove(ctx, &queuev1.MemberRemoveRequest{Name: name})
			return err
		}
	}
	for _, tc := range []struct {
		name string
		call func() error
		want string
	}{
		{"add without a name", add("", "q:7072", ""), "name is empty"},
		{"add a name with '='", add("q=1", "q:7072", ""), `name "q=1" has "=" at byte 1`},
		{"add a name not UTF-8", add("q\xff", "q:7072", ""), `name "q\xff" has "\xff" at byte 1`},
		{"add a name too long", add(strings.Repeat("q", 254), "q:7072", ""), "name is 254 bytes, over 253"},
		{"add without a peer address", add("q", "", ""), "peer_addr is empty: give host:port"},
		{"add a peer address without a port", add("q", "q", ""), `peer_addr "q" is not host:port`},
		{"add a wildcard peer address", add("q", ":7072", ""), `peer_addr ":7072" has no host`},
		{"add a peer address on port 0", add("q", "q:0", ""), `peer_addr "q:0": port "0" is not a number from 1 to 65535`},
		{"add a wildcard client address", add("q", "q:7072", "[::]:7070"), `client_addr "[::]:7070" has the wildcard host ::`},
		{"add a bad client host", add("q", "q:7072", "q/1:7070"), `client_addr "q/1:7070": host "q/1" is neither an IP address nor a host name`},
		{"remove without a name", remove(""), "name is empty"},
		{"remove a name with ','", remove("a,b"), `name "a,b" has "," at byte 1`},
	} {
		err := tc.call()
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(status.Convert(err).Message(), tc.want) {
			t.Errorf("%s: %v; want INVALID_ARGUMENT containing %q", tc.name, err, tc.want)
		}
	}
}
