package peers

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/batonrun/baton/bench/internal/baton"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// clusterNATS makes opts a member of a JetStream cluster: name is its
// server name (JetStream's peers are named), peer its route listener and
// routes every member's route address.
func clusterNATS(opts *server.Options, name, peer, routes string) error {
	if name == "" || peer == "" {
		return errors.New("a clustered NATS server needs -name and -peer-addr")
	}
	host, p, err := net.SplitHostPort(peer)
	if err != nil {
		return err
	}
	port, err := strconv.Atoi(p)
	if err != nil {
		return fmt.Errorf("route port %q: %w", p, err)
	}
	var urls []string
	for r := range strings.SplitSeq(routes, ",") {
		urls = append(urls, "nats://"+r)
	}
	opts.ServerName = name
	opts.Cluster = server.ClusterOpts{Name: "bench", Host: host, Port: port}
	opts.Routes = server.RoutesFromStr(strings.Join(urls, ","))
	return nil
}

// NATSCluster is a JetStream cluster of servers in child processes, each
// on its own data, and a client of all of them holding one stream of three
// replicas (R3) with its durable consumer, as the replicated work queue a
// user would build on JetStream.
type NATSCluster struct {
	Procs []*Proc
	Queue *NATS
}

// StartNATSCluster starts n clustered servers (kind KindNATS or
// KindNATSSync) under dir and creates the R3 stream once JetStream's
// cluster has formed; leases last leaseFor.
func StartNATSCluster(ctx context.Context, command []string, kind, dir string, n int, leaseFor time.Duration) (*NATSCluster, error) {
	c := &NATSCluster{}
	var routes []string
	for i := range n {
		p := &Proc{Kind: kind, Dir: fmt.Sprintf("%s/n%d", dir, i+1), command: command, logPath: fmt.Sprintf("%s/n%d.log", dir, i+1)}
		var err error
		if p.Addr, err = baton.FreeAddr(); err != nil {
			return nil, err
		}
		if p.peerAddr, err = baton.FreeAddr(); err != nil {
			return nil, err
		}
		routes = append(routes, p.peerAddr)
		c.Procs = append(c.Procs, p)
	}
	var urls []string
	for i, p := range c.Procs {
		p.extra = []string{"-name", fmt.Sprintf("n%d", i+1), "-routes", strings.Join(routes, ",")}
		if _, err := p.launch(ctx); err != nil {
			c.Close()
			return nil, err
		}
		urls = append(urls, "nats://"+p.Addr)
	}
	q := &NATS{url: strings.Join(urls, ","), leaseFor: leaseFor, reconnect: true, replicas: n}
	if err := q.connect(); err != nil {
		c.Close()
		return nil, err
	}
	c.Queue = q
	// The stream can be created once the servers have elected JetStream's
	// meta leader; until then the request fails.
	deadline := time.Now().Add(time.Minute)
	for {
		err := q.setup(ctx)
		if err == nil {
			break
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			c.Close()
			return nil, fmt.Errorf("create the R%d stream: %w", n, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := c.Settled(ctx); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// streamInfo is the stream's state as the cluster reports it.
func (c *NATSCluster) streamInfo(ctx context.Context) (*jetstream.StreamInfo, error) {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	st, err := c.Queue.js.Stream(ctx, "Q")
	if err != nil {
		return nil, err
	}
	return st.CachedInfo(), nil
}

// Settled waits (up to a minute) until the stream and its consumer each
// have a leader and every other replica is online and current.
func (c *NATSCluster) Settled(ctx context.Context) error {
	deadline := time.Now().Add(time.Minute)
	var last error
	for {
		last = c.settled(ctx)
		if last == nil {
			return nil
		}
		if ctx.Err() != nil || time.Now().After(deadline) {
			return fmt.Errorf("the NATS cluster did not settle: %w", last)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (c *NATSCluster) settled(ctx context.Context) error {
	si, err := c.streamInfo(ctx)
	if err != nil {
		return err
	}
	if err := whole("stream", si.Cluster, len(c.Procs)); err != nil {
		return err
	}
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	ci, err := c.Queue.cons.Info(cctx)
	if err != nil {
		return err
	}
	return whole("consumer", ci.Cluster, len(c.Procs))
}

// whole checks that a replicated asset has a leader and n-1 current,
// online followers.
func whole(what string, ci *jetstream.ClusterInfo, n int) error {
	if ci == nil || ci.Leader == "" {
		return fmt.Errorf("the %s has no leader", what)
	}
	if len(ci.Replicas) != n-1 {
		return fmt.Errorf("the %s has %d followers, want %d", what, len(ci.Replicas), n-1)
	}
	for _, r := range ci.Replicas {
		if !r.Current || r.Offline {
			return fmt.Errorf("the %s's follower %s is not current", what, r.Name)
		}
	}
	return nil
}

// KillLeader SIGKILLs the server that leads the stream and returns how to
// start it again on its data.
func (c *NATSCluster) KillLeader(ctx context.Context) (func(context.Context) error, error) {
	si, err := c.streamInfo(ctx)
	if err != nil {
		return nil, err
	}
	if si.Cluster == nil || si.Cluster.Leader == "" {
		return nil, errors.New("the stream has no leader")
	}
	for i, p := range c.Procs {
		if fmt.Sprintf("n%d", i+1) != si.Cluster.Leader {
			continue
		}
		if err := p.Kill(); err != nil {
			return nil, err
		}
		return func(ctx context.Context) error {
			_, err := p.launch(ctx)
			return err
		}, nil
	}
	return nil, fmt.Errorf("the stream's leader %q is none of the servers", si.Cluster.Leader)
}

// Close disconnects and kills every server; the caller owns dir.
func (c *NATSCluster) Close() {
	if c.Queue != nil {
		c.Queue.Close()
	}
	for _, p := range c.Procs {
		p.Close()
	}
}

// reconnectOptions are a clustered client's: it moves to another server
// when its own goes away, trying every 20 ms, without end.
func reconnectOptions() []nats.Option {
	return []nats.Option{nats.MaxReconnects(-1), nats.ReconnectWait(20 * time.Millisecond), nats.ReconnectJitter(0, 0)}
}
