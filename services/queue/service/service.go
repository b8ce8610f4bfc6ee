// Package service runs baton-queue: it recovers the queues from the data
// directory and serves baton.queue.v1.QueueService, ClusterService (a queue
// of one member: this process, named by --name and reached at
// --advertise-addr), grpc.health.v1 and reflection over gRPC, and the
// dashboard (/), /metrics, /healthz and /readyz over HTTP. The baton-queue
// binary and the embedded dev stack both call Run.
package service

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"github.com/batonrun/baton/client/queue/limits"
	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
	"github.com/batonrun/baton/services/queue/internal/broker"
	"github.com/batonrun/baton/services/queue/internal/dashboard"
	"github.com/batonrun/baton/services/queue/internal/replica"
	"github.com/batonrun/baton/services/queue/internal/server"
	"github.com/batonrun/baton/services/queue/internal/workqueue"
	"github.com/batonrun/baton/services/runtime/authz"
	serverlimits "github.com/batonrun/baton/services/runtime/limits"
	"github.com/batonrun/baton/services/runtime/serve"
	"github.com/batonrun/baton/services/runtime/trust"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"
)

// Config is baton-queue's configuration; the flags of docs/design.md map onto it.
type Config struct {
	GRPCAddr     string
	HTTPAddr     string
	DataDir      string
	BackoffBase  time.Duration
	BackoffMax   time.Duration
	MaxAttempts  int
	DefaultLease time.Duration
	// MaxRequestBytes bounds a request's encoded size (--max-request-bytes).
	MaxRequestBytes int
	// MaxQueues bounds the queues that exist at once (--max-queues).
	MaxQueues int
	// EmptyQueueRetention is how long an empty queue with no waiting worker
	// is kept before it is forgotten (--empty-queue-retention).
	EmptyQueueRetention time.Duration
	// CompactBytes is how far the log grows (and past twice the last
	// snapshot) before it is compacted by a snapshot (--compact-bytes):
	// the store's on a single member, the Raft log's on each member of a
	// replicated queue.
	CompactBytes int64
	// MaxWaitingLeases bounds the waiting Leases (long polls) of one client
	// identity, over all its connections, unless the --authz-policy's
	// limits give its roles another bound (--max-waiting-leases).
	MaxWaitingLeases int
	// MaxWaitingLeasesPerConn bounds the waiting Leases of one connection
	// (--max-waiting-leases-per-conn); without mutual TLS it is the only
	// bound, as there are no identities.
	MaxWaitingLeasesPerConn int
	// GracePeriod bounds the drain on SIGTERM.
	GracePeriod time.Duration
	// EnablePprof serves /debug/pprof/ on the HTTP address.
	EnablePprof bool
	// Name is this member's name in the queue (--name; default the host
	// name), as ClusterService reports it.
	Name string
	// AdvertiseAddr is the gRPC address clients reach this member at
	// (--advertise-addr); empty means --grpc-addr with a wildcard host
	// replaced by the host name, and the port the listener bound.
	AdvertiseAddr string
	// InitialCluster is "name=host:port,…", every member's peer address
	// (--initial-cluster); empty means a single member, exactly as before
	// replication existed.
	InitialCluster string
	// PeerAddr is the listen address for the members' raft traffic
	// (--peer-addr), used only with InitialCluster.
	PeerAddr string
	// InitialClusterState is "new" or "existing" (--initial-cluster-state,
	// etcd's): with an empty data directory, "new" may form the queue, if
	// every member of InitialCluster answers that its log is empty too;
	// "existing" never does, and only joins the queue in use through its
	// leader.
	InitialClusterState string
	// ForceNewCluster restarts this member as a queue of one, with
	// everything its log holds, under a new cluster id
	// (--force-new-cluster): the operator's recovery once more members lost
	// their disks than a majority survives.
	ForceNewCluster bool
	// HeartbeatInterval and ElectionTimeout are raft's timing
	// (--heartbeat-interval, --election-timeout).
	HeartbeatInterval, ElectionTimeout time.Duration
	// OnPeerListen, if set, learns the bound peer address.
	OnPeerListen func(net.Addr)
	// ObserverAddr is the observer's gRPC address, host:port or a
	// comma-separated list (--observer-addr): the dashboard shows its
	// health, its lag behind etcd, its outboxes and the controllers'
	// declarations it read, asking it with the queue's own certificate.
	// Empty: the dashboard says no observer is configured. The queue asks
	// it nothing else.
	ObserverAddr string
	// ObserverAddrFunc, if set, replaces ObserverAddr with an address
	// known only once the queue runs ("" until then): the embedded stack
	// starts the observer after the queue.
	ObserverAddrFunc func() string
	// TLS is the certificate the queue serves (and authorizes calls by,
	// with a CA), or --insecure (docs/security.md).
	TLS trust.Config
	// OnListen, if set, learns the bound addresses (tests listen on :0).
	OnListen func(grpcAddr, httpAddr net.Addr)
}

// DefaultConfig returns the defaults of docs/design.md.
func DefaultConfig() Config {
	return Config{
		GRPCAddr: ":7070", HTTPAddr: ":9090", DataDir: "./data/queue",
		BackoffBase: 5 * time.Millisecond, BackoffMax: 1000 * time.Second,
		DefaultLease: limits.DefaultLease, MaxRequestBytes: limits.DefaultMaxRequestBytes,
		MaxQueues: broker.DefaultMaxQueues, EmptyQueueRetention: broker.DefaultEmptyRetention,
		CompactBytes:            broker.DefaultCompactBytes,
		MaxWaitingLeases:        serverlimits.DefaultWaitingLeasesPerIdentity,
		MaxWaitingLeasesPerConn: serverlimits.DefaultWaitingLeasesPerConnection,
		GracePeriod:             10 * time.Second,
		Name:                    hostnameOrEmpty(),
		PeerAddr:                ":7072",
		InitialClusterState:     ClusterStateNew,
		HeartbeatInterval:       DefaultHeartbeatInterval,
		ElectionTimeout:         DefaultElectionTimeout,
	}
}

// hostname is os.Hostname, a variable so that tests can choose the answer.
var hostname = osHostname

var osHostname = os.Hostname

// hostnameOrEmpty is the host name, or "" when it is unknown: Validate then
// asks for --name.
func hostnameOrEmpty() string {
	h, err := hostname()
	if err != nil {
		return ""
	}
	return h
}

// defaultAdvertiseAddr is --advertise-addr's default: --grpc-addr with a
// wildcard host (":7070", "0.0.0.0:7070", "[::]:7070"), which is where the
// queue listens and not where anyone can reach it, replaced by the host
// name, and with the port bound (it differs from --grpc-addr's only for
// port 0). Before the listener is open, bound is nil and the port is
// --grpc-addr's.
func defaultAdvertiseAddr(grpcAddr string, bound net.Addr) (string, error) {
	host, port, err := net.SplitHostPort(grpcAddr)
	if err != nil {
		return "", fmt.Errorf("--grpc-addr %q is not host:port", grpcAddr)
	}
	if tcp, ok := bound.(*net.TCPAddr); ok {
		port = strconv.Itoa(tcp.Port)
	}
	if ip, err := netip.ParseAddr(host); host == "" || err == nil && ip.IsUnspecified() {
		h, err := hostname()
		if err != nil {
			return "", fmt.Errorf("--advertise-addr: --grpc-addr %q has a wildcard host and the host name is unknown (%w): give --advertise-addr", grpcAddr, err)
		}
		host = h
	}
	return net.JoinHostPort(host, port), nil
}

// flagError makes a failed check of package limits an error about a flag:
// the check names the flag, and "invalid argument", the API's word, goes.
func flagError(err error) error {
	return errors.New(strings.TrimPrefix(err.Error(), limits.ErrInvalid.Error()+": "))
}

// RegisterFlags binds the configuration to fs, with c's values as defaults.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.GRPCAddr, "grpc-addr", c.GRPCAddr, "gRPC listen address")
	fs.StringVar(&c.HTTPAddr, "http-addr", c.HTTPAddr, "HTTP listen address for /metrics, /healthz, /readyz")
	fs.StringVar(&c.DataDir, "data-dir", c.DataDir, "directory of the write-ahead log and snapshots")
	fs.DurationVar(&c.BackoffBase, "backoff-base", c.BackoffBase, "wait after a key's first failure; doubles per failure")
	fs.DurationVar(&c.BackoffMax, "backoff-max", c.BackoffMax, "longest wait between retries")
	fs.IntVar(&c.MaxAttempts, "max-attempts", c.MaxAttempts, "park a key after this many failures (0 = never park)")
	fs.DurationVar(&c.DefaultLease, "default-lease", c.DefaultLease, "lease length when a worker asks for none")
	fs.IntVar(&c.MaxRequestBytes, "max-request-bytes", c.MaxRequestBytes, "largest request accepted, in bytes (larger ones get RESOURCE_EXHAUSTED)")
	fs.IntVar(&c.MaxQueues, "max-queues", c.MaxQueues, "most queues that may exist at once (an Add that would make one more gets RESOURCE_EXHAUSTED)")
	fs.Int64Var(&c.CompactBytes, "compact-bytes", c.CompactBytes, "compact the log with a snapshot once it has grown past this many bytes and twice the last snapshot")
	fs.DurationVar(&c.EmptyQueueRetention, "empty-queue-retention", c.EmptyQueueRetention, "how long an empty queue no worker waits on keeps its counters before it is forgotten")
	fs.IntVar(&c.MaxWaitingLeases, "max-waiting-leases", c.MaxWaitingLeases, "most Leases waiting for work one client identity (certificate CN) may have in flight over all its connections; the --authz-policy's limits may set it per role (more get RESOURCE_EXHAUSTED)")
	fs.IntVar(&c.MaxWaitingLeasesPerConn, "max-waiting-leases-per-conn", c.MaxWaitingLeasesPerConn, "most Leases waiting for work one connection may have in flight (more get RESOURCE_EXHAUSTED)")
	fs.DurationVar(&c.GracePeriod, "grace-period", c.GracePeriod, "how long SIGTERM waits for calls in flight")
	fs.BoolVar(&c.EnablePprof, "enable-pprof", c.EnablePprof, "serve /debug/pprof/ on the HTTP address")
	fs.StringVar(&c.Name, "name", c.Name, "this member's name in the queue, as ClusterService and batonctl queue members show it (default: the host name)")
	fs.StringVar(&c.AdvertiseAddr, "advertise-addr", c.AdvertiseAddr, "the gRPC address clients reach this member at (default: --grpc-addr, a wildcard host such as :7070 replaced by the host name)")
	fs.StringVar(&c.InitialCluster, "initial-cluster", c.InitialCluster, "name=host:port,… of every member's peer address: a replicated queue (empty: a single member)")
	fs.StringVar(&c.PeerAddr, "peer-addr", c.PeerAddr, "listen address for raft traffic between members (with --initial-cluster)")
	fs.StringVar(&c.InitialClusterState, "initial-cluster-state", c.InitialClusterState, "new: a member with an empty data directory may form the queue, once every member of --initial-cluster answers that it is empty too; existing: it only ever joins the queue in use")
	fs.BoolVar(&c.ForceNewCluster, "force-new-cluster", c.ForceNewCluster, "restart this member as a queue of one with everything it holds, under a new cluster id, after more members lost their disks than a majority survives; the others then rejoin on empty data directories (remove the flag once they have)")
	fs.DurationVar(&c.HeartbeatInterval, "heartbeat-interval", c.HeartbeatInterval, "how often the leader tells the members it leads (raft's tick)")
	fs.DurationVar(&c.ElectionTimeout, "election-timeout", c.ElectionTimeout, "how long a member hears no leader before it campaigns (at least 5 heartbeats)")
	fs.StringVar(&c.ObserverAddr, "observer-addr", c.ObserverAddr, "the observer's gRPC address (host:port, or a comma-separated list), whose health, lag and the controllers' declarations the dashboard shows (empty: not shown)")
	c.TLS.RegisterFlags(fs)
}

// The range of --max-request-bytes: room for one Ack of a long error at the
// low end; at the high end, a request of MaxBatch keys of MaxKeyBytes each.
const (
	minRequestBytes = 64 << 10
	maxRequestBytes = 16 << 20
)

// Validate names the first bad field.
func (c Config) Validate() error {
	switch {
	case c.GRPCAddr == "":
		return errors.New("--grpc-addr is empty")
	case c.HTTPAddr == "":
		return errors.New("--http-addr is empty")
	case c.DataDir == "":
		return errors.New("--data-dir is empty")
	case c.BackoffBase <= 0:
		return fmt.Errorf("--backoff-base must be positive, not %v", c.BackoffBase)
	case c.BackoffMax < c.BackoffBase:
		return fmt.Errorf("--backoff-max (%v) is below --backoff-base (%v)", c.BackoffMax, c.BackoffBase)
	case c.BackoffMax > limits.MaxDelay:
		return fmt.Errorf("--backoff-max (%v) is over the longest delay, %v", c.BackoffMax, limits.MaxDelay)
	case c.MaxAttempts < 0:
		return fmt.Errorf("--max-attempts must be 0 or more, not %d", c.MaxAttempts)
	case c.DefaultLease <= 0 || c.DefaultLease > limits.MaxLease:
		return fmt.Errorf("--default-lease must be in (0, %v], not %v", limits.MaxLease, c.DefaultLease)
	case c.MaxRequestBytes < minRequestBytes || c.MaxRequestBytes > maxRequestBytes:
		return fmt.Errorf("--max-request-bytes must be in [%d, %d], not %d", minRequestBytes, maxRequestBytes, c.MaxRequestBytes)
	case c.MaxQueues < 1:
		return fmt.Errorf("--max-queues must be at least 1, not %d", c.MaxQueues)
	case c.CompactBytes < minCompactBytes:
		return fmt.Errorf("--compact-bytes must be at least %d, not %d", minCompactBytes, c.CompactBytes)
	case c.EmptyQueueRetention < time.Second:
		return fmt.Errorf("--empty-queue-retention must be at least 1s, not %v", c.EmptyQueueRetention)
	case c.MaxWaitingLeases < 1 || c.MaxWaitingLeases > authz.MaxWaitingLeases:
		return fmt.Errorf("--max-waiting-leases must be in [1, %d], not %d", authz.MaxWaitingLeases, c.MaxWaitingLeases)
	case c.MaxWaitingLeasesPerConn < 1 || c.MaxWaitingLeasesPerConn >= serve.MaxConcurrentStreams:
		// At the bound of streams, a connection's waiting Leases would hold
		// every stream, and its Acks and Extends would queue behind them.
		return fmt.Errorf("--max-waiting-leases-per-conn must be in [1, %d], below the %d calls a connection may have open, not %d",
			serve.MaxConcurrentStreams-1, serve.MaxConcurrentStreams, c.MaxWaitingLeasesPerConn)
	}
	if err := limits.CheckMemberName("--name", c.Name); err != nil {
		return flagError(err)
	}
	if c.AdvertiseAddr != "" {
		if err := limits.CheckAddr("--advertise-addr", c.AdvertiseAddr); err != nil {
			return flagError(err)
		}
	} else if _, err := defaultAdvertiseAddr(c.GRPCAddr, nil); err != nil {
		return err
	}
	if c.ObserverAddr != "" {
		addrs := strings.Split(c.ObserverAddr, ",")
		for i, a := range addrs {
			field := "--observer-addr"
			if len(addrs) > 1 {
				field = fmt.Sprintf("--observer-addr's address %d", i+1)
			}
			if err := limits.CheckAddr(field, strings.TrimSpace(a)); err != nil {
				return flagError(err)
			}
		}
	}
	if err := c.validateReplication(); err != nil {
		return err
	}
	return c.TLS.ValidateServe()
}

// minCompactBytes keeps --compact-bytes from asking for a snapshot at
// nearly every write.
const minCompactBytes = 64 << 10

// Run recovers the store and serves until ctx is cancelled. It returns an
// error if the store cannot be recovered (corruption names file and offset)
// or stops after a write failure.
func Run(ctx context.Context, cfg Config, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := cfg.Validate(); err != nil {
		return err
	}
	tlsSrc, err := cfg.TLS.Load(log)
	if err != nil {
		return err
	}
	policy, err := cfg.TLS.Policy()
	if err != nil {
		return err
	}
	wq := workqueue.DefaultConfig()
	wq.BackoffBase, wq.BackoffMax, wq.MaxAttempts = cfg.BackoffBase, cfg.BackoffMax, uint32(cfg.MaxAttempts)
	metrics := broker.NewMetrics()
	reg := prometheus.NewRegistry()
	bcfg := broker.Config{Queue: wq, DefaultLease: cfg.DefaultLease, MaxQueues: cfg.MaxQueues, EmptyRetention: cfg.EmptyQueueRetention, CompactBytes: cfg.CompactBytes}
	if err := os.MkdirAll(cfg.DataDir, 0o750); err != nil {
		return fmt.Errorf("data directory: %w", err)
	}
	unlockDir, err := lockDataDir(cfg.DataDir)
	if err != nil {
		return err
	}
	defer unlockDir()
	if err := checkNotRestoring(cfg.DataDir); err != nil {
		return err
	}
	observeSync, err := registerDiskMetrics(reg, cfg.DataDir)
	if err != nil {
		return err
	}
	m := newMember(memberOptions{cfg: cfg, broker: bcfg, tls: tlsSrc, metrics: metrics, registry: reg, observeSync: observeSync, log: log})
	b, err := m.open(ctx)
	if err != nil {
		return err
	}
	defer b.Close()
	if err := metrics.Register(reg, b); err != nil {
		return fmt.Errorf("register metrics: %w", err)
	}

	streams := server.NewStreams()
	dopts := dashboard.Options{Streams: func() ([]server.StreamInfo, bool) { return streams.List(), true }}
	src := m.dashboard(b, &dopts, streams)
	if addr := cfg.observerAddr(); addr != nil {
		dopts.Observer = dashboard.NewObserverWatch(dashboard.ObserverConfig{Addr: addr, TLS: tlsSrc, Logger: log})
	}
	dash := dashboard.New(src, dopts)
	go dash.Run(ctx)

	// A store that stopped after a write failure cannot be trusted: end the
	// process so its supervisor restarts it and recovery reads the disk.
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				err := b.Err()
				if errors.Is(err, replica.ErrCannotFollow) {
					// Nothing is wrong with this member's disk: a restart
					// would meet the same leader. It stays up, not ready
					// (b.Ready says why), for the operator to act.
					return
				}
				if err != nil {
					cancel(err)
					return
				}
			}
		}
	}()

	// On shutdown, answer long-polling Leases at once instead of holding
	// the graceful stop for its whole grace period.
	go func() {
		<-ctx.Done()
		b.Drain()
	}()

	// The default advertised address needs the bound port: OnListen sets
	// it, and serve.Run calls OnListen before it starts serving, so every
	// call sees it set (the goroutines that serve calls start after).
	advertise := cfg.AdvertiseAddr
	onListen := func(g, h net.Addr) {
		if cfg.AdvertiseAddr == "" {
			advertise, _ = defaultAdvertiseAddr(cfg.GRPCAddr, g) // Validate has derived it once already
		}
		m.listening(advertise)
		if cfg.OnListen != nil {
			cfg.OnListen(g, h)
		}
	}
	self := server.Self{Name: cfg.Name, ClientAddr: func() string { return advertise }}
	qs, ready, peer, err := m.serving(b, server.NewWithStreams(b, streams), &self)
	if err != nil {
		return err
	}
	defer m.close()

	// A member told to stop (SIGTERM) first does what its kind does before
	// its servers stop (a replicated one leaves leadership to the others,
	// while its listeners still serve raft traffic); a store that failed
	// stops at once.
	runCtx, stopRun := context.WithCancel(context.WithoutCancel(ctx))
	defer stopRun()
	go func() {
		<-ctx.Done()
		if errors.Is(context.Cause(ctx), context.Canceled) {
			m.leaving()
		}
		stopRun()
	}()

	err = serve.Run(runCtx, serve.Options{
		Name: "baton-queue", GRPCAddr: cfg.GRPCAddr, HTTPAddr: cfg.HTTPAddr,
		Register: func(s *grpc.Server) []string {
			queuev1.RegisterQueueServiceServer(s, qs)
			queuev1.RegisterClusterServiceServer(s, server.NewCluster(b, self))
			return []string{queuev1.QueueService_ServiceDesc.ServiceName, queuev1.ClusterService_ServiceDesc.ServiceName}
		},
		Ready:           ready,
		PeerAddr:        peer.addr,
		RegisterPeer:    peer.register,
		OnPeerListen:    cfg.OnPeerListen,
		PeerAuthzPolicy: peer.policy,
		// Handed-on Leases were bounded on the member they reached; here
		// each counts against the client that member names (serve trusts
		// the forwarded caller on the peer listener), not against the
		// member's one connection.
		PeerLimits: serverlimits.Config{
			WaitingLeasesPerConnection: serve.MaxConcurrentStreams - 1,
			WaitingLeasesPerIdentity:   authz.MaxWaitingLeases,
		},
		Registry:     reg,
		GracePeriod:  cfg.GracePeriod,
		MaxRecvBytes: cfg.MaxRequestBytes,
		Logger:       log,
		OnListen:     onListen,
		Handle:       dash.Handle,
		Pprof:        cfg.EnablePprof,
		TLS:          tlsSrc,
		AuthzPolicy:  policy,
		Insecure:     cfg.TLS.Insecure,
		Limits: serverlimits.Config{
			WaitingLeasesPerConnection: cfg.MaxWaitingLeasesPerConn,
			WaitingLeasesPerIdentity:   cfg.MaxWaitingLeases,
		},
	})
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return cause
	}
	return err
}

// observerAddr is where the dashboard finds the observer, nil when no
// observer is configured.
func (c Config) observerAddr() func() string {
	switch {
	case c.ObserverAddrFunc != nil:
		return c.ObserverAddrFunc
	case c.ObserverAddr != "":
		return func() string { return c.ObserverAddr }
	}
	return nil
}
