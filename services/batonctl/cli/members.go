package cli

// The members of a replicated queue, one by one. Most commands need only
// a client given every member (app.queue), whose calls go to whichever
// answers; status, queue members and snapshot save need to know which
// member said what, so they ask each address of --queue-addr on its own.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	queueclient "github.com/batonrun/baton/client/queue"
	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
	"github.com/batonrun/baton/services/runtime/flagenv"
)

// queueAddrs returns the addresses of --queue-addr, each host:port.
func (a *app) queueAddrs() ([]string, error) {
	var out []string
	for _, addr := range flagenv.SplitList(a.queueAddr) {
		if _, port, err := net.SplitHostPort(addr); err != nil || port == "" {
			return nil, usagef("--queue-addr: %q is not host:port (a member's address; several are comma-separated)", addr)
		}
		out = append(out, addr)
	}
	if len(out) == 0 {
		return nil, usagef("--queue-addr is empty")
	}
	return out, nil
}

// memberClient returns a client of the member at addr alone, dialed once
// per run and closed by close.
func (a *app) memberClient(addr string) (*queueclient.Client, error) {
	if c, ok := a.memberClients[addr]; ok {
		return c, nil
	}
	opts, err := a.queueOptions()
	if err != nil {
		return nil, err
	}
	c, err := queueclient.Dial(addr, opts...)
	if err != nil {
		return nil, err
	}
	if a.memberClients == nil {
		a.memberClients = map[string]*queueclient.Client{}
	}
	a.memberClients[addr] = c
	return c, nil
}

// memberAnswer is what the member at one address said of itself.
type memberAnswer struct {
	addr   string
	client *queueclient.Client
	// status is its ClusterService Status; nil when err says why not.
	status *queuev1.StatusResponse
	err    error
}

// name is the member's --name, or its address when it did not answer.
func (m *memberAnswer) name() string {
	if m.status != nil {
		return m.status.GetMember().GetName()
	}
	return m.addr
}

// askMembers asks the member at each of addrs, all at once, for its
// ClusterService Status, each within --timeout.
func (a *app) askMembers(ctx context.Context, addrs []string) ([]*memberAnswer, error) {
	out := make([]*memberAnswer, len(addrs))
	for i, addr := range addrs {
		c, err := a.memberClient(addr)
		if err != nil {
			return nil, err
		}
		out[i] = &memberAnswer{addr: addr, client: c}
	}
	var wg sync.WaitGroup
	for _, m := range out {
		wg.Go(func() {
			octx, cancel := a.opCtx(ctx)
			defer cancel()
			m.status, m.err = m.client.Cluster().Status(octx)
		})
	}
	wg.Wait()
	return out, nil
}

// noneAnswered is the error of a command none of whose members answered,
// worded by unreachable: each address's reason, or the one's.
func (a *app) noneAnswered(ms []*memberAnswer) error {
	if len(ms) == 1 {
		return a.unreachable("the queue", a.queueAddr, "--queue-addr", ms[0].err)
	}
	errs := make([]error, len(ms))
	allRefused := true
	for i, m := range ms {
		errs[i] = fmt.Errorf("%s: %w", m.addr, m.err)
		allRefused = allRefused && strings.Contains(m.err.Error(), "connection refused")
	}
	if allRefused {
		return refusedError("the queue", a.queueAddr, "--queue-addr", errors.Join(errs...))
	}
	return a.unreachable("the queue", a.queueAddr, "--queue-addr", errors.Join(errs...))
}

// leaderList returns the queue's members as its leader lists them: only
// the leader knows which members it no longer hears from, and their
// format levels. The leader is the member of --queue-addr that says it
// leads, else the one the members that answer name, at the client
// address they list for it. When the leader cannot be asked, it is the
// view of the first member that answers, and note says so.
func (a *app) leaderList(ctx context.Context) (members []*queuev1.Member, note string, err error) {
	addrs, err := a.queueAddrs()
	if err != nil {
		return nil, "", err
	}
	ms, err := a.askMembers(ctx, addrs)
	if err != nil {
		return nil, "", err
	}
	var answered *memberAnswer
	for _, m := range ms {
		if m.status == nil {
			continue
		}
		if m.status.GetMember().GetLeader() {
			return a.memberList(ctx, m.client)
		}
		if answered == nil {
			answered = m
		}
	}
	if answered == nil {
		// A server that refuses Status (an old build, a policy) may
		// still answer MemberList: the client given every member asks.
		if !allUnavailable(ms) {
			if q, err := a.queue(); err == nil {
				return a.memberList(ctx, q)
			}
		}
		return nil, "", a.noneAnswered(ms)
	}
	members, _, err = a.memberList(ctx, answered.client)
	if err != nil {
		return nil, "", err
	}
	leader := answered.status.GetLeaderName()
	if leader == "" {
		return members, fmt.Sprintf("note: %s knows no leader (an election is under way, or it is cut off from the others): this is its view, which does not know the other members' term, applied index and level, nor which are unreachable", answered.name()), nil
	}
	var leaderAddr string
	for _, m := range members {
		if m.GetName() == leader {
			leaderAddr = m.GetClientAddr()
		}
	}
	why := "it lists no client address for it"
	if leaderAddr != "" {
		why = "at " + leaderAddr + ", which " + answered.name() + " lists as its client address"
		c, err := a.memberClient(leaderAddr)
		if err == nil {
			octx, cancel := a.opCtx(ctx)
			var st *queuev1.StatusResponse
			st, err = c.Cluster().Status(octx)
			cancel()
			if err == nil && st.GetMember().GetLeader() {
				return a.memberList(ctx, c)
			}
		}
		if err != nil {
			why += ", it does not answer here: " + oneLine(err.Error())
		} else {
			why += ", it no longer leads"
		}
	}
	return members, fmt.Sprintf("note: the leader, %s, is not in --queue-addr, and %s: this is %s's view, which does not know the other members' term, applied index and level, nor which are unreachable (give every member's address in --queue-addr)", leader, why, answered.name()), nil
}

// memberList is c's MemberList, its error worded for the command line.
func (a *app) memberList(ctx context.Context, c *queueclient.Client) ([]*queuev1.Member, string, error) {
	octx, cancel := a.opCtx(ctx)
	defer cancel()
	members, err := c.Cluster().MemberList(octx)
	if err != nil {
		return nil, "", serverError(a.unreachable("the queue", a.queueAddr, "--queue-addr", err))
	}
	return members, "", nil
}

// allUnavailable reports whether every member's Status failed as a member
// that is down or cannot serve fails.
func allUnavailable(ms []*memberAnswer) bool {
	for _, m := range ms {
		if m.err == nil || (status.Code(m.err) != codes.Unavailable && status.Code(m.err) != codes.DeadlineExceeded) {
			return false
		}
	}
	return true
}

// memberState is a member's row in queue members, as the leader sees it:
// unreachable (the leader has not heard from it for an election
// timeout), leader, learner (added, not yet joined) or follower.
func memberState(m *queuev1.Member) string {
	switch {
	case m.GetUnreachable():
		return "unreachable"
	case m.GetLeader():
		return "leader"
	case m.GetLearner():
		return "learner"
	}
	return "follower"
}

// role is what a member says of itself in status.
func role(st *queuev1.StatusResponse) string {
	m := st.GetMember()
	switch {
	case m.GetLeader():
		return "leader"
	case m.GetLearner():
		return "learner"
	case st.GetLeaderName() == "":
		return "follower, knows no leader"
	}
	return "follower of " + st.GetLeaderName()
}

// sameHost reports how many of addrs have host's host.
func sameHost(addrs []string, host string) int {
	n := 0
	for _, a := range addrs {
		if h, _, err := net.SplitHostPort(a); err == nil && strings.EqualFold(h, host) {
			n++
		}
	}
	return n
}
