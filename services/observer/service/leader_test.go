package service_test

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/batonrun/baton/services/etcdembed"
)

// partition cuts one member of an etcd cluster off from the others, in both
// directions, while its clients can still reach it: the member stays up and
// loses its leader, which is what WithRequireLeader exists for.
//
// Every member's advertised peer URL is a peerProxy in front of its real
// peer listener. etcd's raft transport dials a peer for each direction of
// traffic and names the sender in the X-Server-From header of every
// request, so a proxy that reads the first request head of a connection
// knows both ends: the sender from the header, the receiver from itself.
type partition struct {
	mu       sync.Mutex
	isolated string // member ID cut off, "" when healed
	proxies  []*peerProxy
}

type peerProxy struct {
	p      *partition
	l      net.Listener
	target string                 // the member's real peer listener, host:port
	member string                 // the ID of the member behind it, once known; under p.mu
	conns  map[*peerConn]struct{} // under p.mu
	wg     sync.WaitGroup
}

type peerConn struct {
	from    string
	in, out net.Conn
}

// close ends both sides (closing a closed one again is harmless).
func (c *peerConn) close() {
	c.in.Close()
	c.out.Close()
}

func (p *partition) newProxy(t testing.TB, target string) *peerProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	pp := &peerProxy{p: p, l: l, target: target, conns: map[*peerConn]struct{}{}}
	p.proxies = append(p.proxies, pp)
	pp.wg.Go(pp.serve)
	t.Cleanup(func() {
		l.Close()
		p.mu.Lock()
		for c := range pp.conns {
			c.close()
		}
		p.mu.Unlock()
		pp.wg.Wait()
	})
	return pp
}

// blocked reports whether traffic from member `from` to the proxy's member
// is cut; p.mu is held.
func (pp *peerProxy) blocked(from string) bool {
	iso := pp.p.isolated
	return iso != "" && (from == iso || pp.member == iso)
}

func (pp *peerProxy) serve() {
	for {
		c, err := pp.l.Accept()
		if err != nil {
			return
		}
		pp.wg.Go(func() { pp.handle(c) })
	}
}

// handle reads the first request head to learn the sender, then forwards
// the connection unless the partition cuts it.
func (pp *peerProxy) handle(c net.Conn) {
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	br := bufio.NewReader(c)
	var head bytes.Buffer
	from := ""
	for {
		line, err := br.ReadSlice('\n')
		if err != nil {
			c.Close()
			return
		}
		head.Write(line)
		if k, v, ok := strings.Cut(strings.TrimRight(string(line), "\r\n"), ":"); ok && strings.EqualFold(k, "X-Server-From") {
			from = strings.TrimSpace(v)
		}
		if len(bytes.TrimRight(line, "\r\n")) == 0 {
			break
		}
	}
	_ = c.SetReadDeadline(time.Time{})

	up, err := net.Dial("tcp", pp.target)
	if err != nil {
		c.Close()
		return
	}
	pc := &peerConn{from: from, in: c, out: up}
	pp.p.mu.Lock()
	if pp.blocked(from) {
		pp.p.mu.Unlock()
		pc.close()
		return
	}
	pp.conns[pc] = struct{}{}
	pp.p.mu.Unlock()

	done := make(chan struct{})
	go func() {
		defer close(done)
		_, _ = io.Copy(c, up)
	}()
	if _, err := up.Write(head.Bytes()); err == nil {
		_, _ = io.Copy(up, br)
	}
	pp.p.mu.Lock()
	pc.close()
	delete(pp.conns, pc)
	pp.p.mu.Unlock()
	<-done
}

// isolate cuts member off (close its connections, refuse new ones); ""
// heals.
func (p *partition) isolate(member string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.isolated = member
	if member == "" {
		return
	}
	for _, pp := range p.proxies {
		for c := range pp.conns {
			if pp.blocked(c.from) {
				c.close()
				delete(pp.conns, c)
			}
		}
	}
}

// startCluster starts an n-member etcd cluster behind peer proxies, with
// short raft timeouts so that a cut-off member notices within a second.
func startCluster(t testing.TB, n int) ([]*etcdembed.Server, *partition) {
	t.Helper()
	p := &partition{}
	type member struct{ name, peer, adv string }
	ms := make([]member, n)
	var initial []string
	for i := range ms {
		peer := freeAddr(t)
		pp := p.newProxy(t, peer)
		ms[i] = member{name: fmt.Sprintf("m%d", i), peer: "http://" + peer, adv: "http://" + pp.l.Addr().String()}
		initial = append(initial, ms[i].name+"="+ms[i].adv)
	}
	dir := t.TempDir()
	srvs := make([]*etcdembed.Server, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, m := range ms {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			srvs[i], errs[i] = etcdembed.Start(ctx, etcdembed.Config{
				Dir: fmt.Sprintf("%s/%s", dir, m.name), Name: m.name,
				ClientURL: "http://127.0.0.1:0", PeerURL: m.peer, AdvertisePeerURL: m.adv,
				InitialCluster: strings.Join(initial, ","), ClusterToken: "leader-loss",
				HeartbeatInterval: 25 * time.Millisecond, ElectionTimeout: 250 * time.Millisecond,
				ProgressNotifyInterval: 100 * time.Millisecond, UnsafeNoFsync: true,
			})
		})
	}
	wg.Wait()
	for i, err := range errs {
		if srvs[i] != nil {
			t.Cleanup(srvs[i].Close)
		}
		if err != nil {
			t.Fatalf("start member %d: %v", i, err)
		}
	}
	p.mu.Lock()
	for i, s := range srvs {
		p.proxies[i].member = s.MemberID()
	}
	p.mu.Unlock()
	return srvs, p
}

// The member the observer's watch is on is cut off from its cluster while
// the rest of the cluster goes on taking writes. The member stays up, so
// nothing breaks the watch's connection: only WithRequireLeader makes the
// member end the watch once it has had no leader for a while, and the
// informer resumes it on a member that has one. Every change written during
// the partition must reach the queue before it heals; with a watch that
// stayed on the cut-off member, none would.
func TestNoChangeMissedWhenTheWatchedMemberLosesItsLeader(t *testing.T) {
	if os.Getenv("BATON_TEST_ETCD_BIN") != "" {
		t.Skip("the cluster is always the embedded etcd; BATON_TEST_ETCD_BIN would not change what this tests")
	}
	srvs, part := startCluster(t, 3)
	// The observer reaches all three members, but at first only m0 lets it
	// in, so its watches start there.
	var endpoints []string
	var late []*tcpProxy
	for i, s := range srvs {
		p := startProxy(t, strings.TrimPrefix(s.Endpoints()[0], "http://"))
		if i > 0 {
			p.cut(true)
			late = append(late, p)
		}
		endpoints = append(endpoints, "http://"+p.addr())
	}
	// The test writes through the two members that keep their quorum.
	cli := newEtcdClient(t, append(srvs[1].Endpoints(), srvs[2].Endpoints()...))
	q := startQueue(t)
	o := startObserver(t, endpoints, q.addr, nil)
	w := setup(t, o, cli, q, "leader-loss")
	for _, p := range late {
		p.cut(false)
	}
	before := prefixStatus(t, o, "/registry/pods/").GetWatchRestartsTotal()

	ops := w.churn(60)
	w.applyAll(t, cli, ops[:20])
	settle(t, o, cli)
	part.isolate(srvs[0].MemberID())
	w.applyAll(t, cli, ops[20:40])
	w.checkQueue(t, q) // while m0 is still cut off
	settle(t, o, cli)
	if after := prefixStatus(t, o, "/registry/pods/").GetWatchRestartsTotal(); after <= before {
		t.Errorf("watch_restarts_total %d → %d: the watch on the cut-off member never ended", before, after)
	}

	part.isolate("")
	w.applyAll(t, cli, ops[40:])
	settle(t, o, cli)
	w.checkQueue(t, q)
	checkCache(t, o, cli)
}
