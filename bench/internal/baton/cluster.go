package baton

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	queueclient "github.com/batonrun/baton/client/queue"
)

// Cluster is a replicated queue of real baton-queue processes on loopback:
// each member a Server of its own (data directory, ports, a client of that
// member alone), started with --name, --peer-addr and --initial-cluster and
// the default heartbeat and election timeout, as a deployment runs them.
type Cluster struct {
	Members []*Server
}

// StartCluster starts n members under dir at once and waits until every
// one serves and knows a leader. The members start together because a
// member with an empty log asks the others whether the queue is new
// before it serves.
func StartCluster(ctx context.Context, bin, dir string, n int) (*Cluster, error) {
	peers := make([]string, n)
	entries := make([]string, n)
	for i := range peers {
		var err error
		if peers[i], err = FreeAddr(); err != nil {
			return nil, err
		}
		entries[i] = fmt.Sprintf("%s=%s", memberName(i), peers[i])
	}
	c := &Cluster{}
	for i := range peers {
		s, err := prepare(bin, dir, Options{Args: []string{
			"--name", memberName(i), "--peer-addr", peers[i], "--initial-cluster", strings.Join(entries, ","),
		}})
		if err != nil {
			c.Close()
			return nil, err
		}
		c.Members = append(c.Members, s)
		if err := s.launch(); err != nil {
			c.Close()
			return nil, err
		}
	}
	for _, s := range c.Members {
		if _, err := s.WaitServing(ctx, time.Now()); err != nil {
			c.Close()
			return nil, err
		}
	}
	if _, err := c.Leader(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

func memberName(i int) string { return fmt.Sprintf("m%d", i+1) }

// Addrs is the members' client addresses, the one at first (if it is a
// member's index) before the others, comma-separated as client/queue's
// Dial takes them: its connection uses the first and moves on when that
// one fails.
func (c *Cluster) Addrs(first int) string {
	var out []string
	if first >= 0 && first < len(c.Members) {
		out = append(out, c.Members[first].GRPCAddr)
	}
	for i, s := range c.Members {
		if i != first {
			out = append(out, s.GRPCAddr)
		}
	}
	return strings.Join(out, ",")
}

// Running reports whether member i's process is running.
func (c *Cluster) Running(i int) bool {
	s := c.Members[i]
	if s.cmd == nil {
		return false
	}
	select {
	case <-s.exited:
		return false
	default:
		return true
	}
}

// Leader waits (up to a minute) until every running member names the same
// leader, that leader says it leads, and returns its index.
func (c *Cluster) Leader(ctx context.Context) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var last error
	for {
		i, err := c.agreedLeader(ctx)
		if err == nil {
			return i, nil
		}
		last = err
		select {
		case <-ctx.Done():
			return -1, fmt.Errorf("no leader the members agree on: %w", last)
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func (c *Cluster) agreedLeader(ctx context.Context) (int, error) {
	leader := ""
	for i, s := range c.Members {
		if !c.Running(i) {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		st, err := s.Client.Cluster().Status(cctx)
		cancel()
		switch {
		case err != nil:
			return -1, fmt.Errorf("%s: %w", memberName(i), err)
		case st.GetLeaderName() == "":
			return -1, fmt.Errorf("%s knows no leader", memberName(i))
		case leader != "" && st.GetLeaderName() != leader:
			return -1, fmt.Errorf("%s names %s, another %s", memberName(i), st.GetLeaderName(), leader)
		}
		leader = st.GetLeaderName()
	}
	for i := range c.Members {
		if memberName(i) == leader && c.Running(i) {
			return i, nil
		}
	}
	return -1, fmt.Errorf("the leader named, %q, is not running", leader)
}

// Restart starts member i again on its data and ports (after Kill) and
// waits until it serves.
func (c *Cluster) Restart(ctx context.Context, i int) error {
	s := c.Members[i]
	if c.Running(i) {
		return errors.New(memberName(i) + " is running")
	}
	if err := s.launch(); err != nil {
		return err
	}
	_, err := s.WaitServing(ctx, time.Now())
	return err
}

// Dial connects a client to every member, the one at first first, with
// opts (client/queue's retry of UNAVAILABLE moves its calls to the next
// member).
func (c *Cluster) Dial(first int, opts ...queueclient.Option) (*queueclient.Client, error) {
	return queueclient.Dial(c.Addrs(first), opts...)
}

// Close kills every member and removes its data.
func (c *Cluster) Close() {
	for _, s := range c.Members {
		s.Close()
	}
}
