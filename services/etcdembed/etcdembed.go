// Package etcdembed runs a real etcd server inside the current process, for
// the embedded dev stack and for tests that need etcd without a separate
// binary: a single member by default, or one member of a cluster whose other
// members run beside it (Config.InitialCluster), for tests of leader loss.
// It is etcd's own server (go.etcd.io/etcd/server/v3/embed), not a fake, so
// watches, compaction, revisions and elections behave as in production.
//
//	srv, err := etcdembed.Start(ctx, etcdembed.Config{Dir: "data/etcd"})
//	if err != nil { … }
//	defer srv.Close()
//	cli, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints()})
//
// A server can be stopped and started again on the same data directory and
// the same ports (Stop, then Restart), which is how tests simulate an etcd
// restart under a running client.
//
// It serves its clients TLS with Config.ClientTLS (an https:// ClientURL),
// requiring client certificates of a CA when one is given, and turns on
// etcd's authentication with Config.AuthUser and AuthPassword, as an
// operator would with etcdctl user add and auth enable.
package etcdembed

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// DefaultClientURL is where clients reach etcd unless Config says otherwise.
const DefaultClientURL = "http://127.0.0.1:2379"

// Config configures a server. The zero value (plus Dir) is a usable dev
// server on etcd's default client port.
type Config struct {
	// Dir is the data directory; it is created if missing. Required.
	Dir string
	// ClientURL is the URL clients connect to (default DefaultClientURL). A
	// port of 0 picks a free port.
	ClientURL string
	// PeerURL is the peer (raft) URL (default http://127.0.0.1:0, i.e. a free
	// port: a single member never receives peer traffic).
	PeerURL string
	// Name is the member name (default "baton").
	Name string
	// AdvertisePeerURL is the peer URL the other members dial (default
	// PeerURL), e.g. a proxy in front of it that a test can cut.
	AdvertisePeerURL string
	// InitialCluster lists every member of a new cluster as
	// "name=advertised-peer-url,…" (default: this member alone). Start
	// waits for the server to be ready, which a member of a cluster only is
	// once a quorum runs, so start the members concurrently. Once the data
	// directory holds a cluster, etcd takes the membership from it.
	InitialCluster string
	// ClusterToken tells clusters apart (default etcd's); members of one
	// cluster need the same one.
	ClusterToken string
	// HeartbeatInterval and ElectionTimeout are raft's (defaults etcd's, 100
	// ms and 1 s); tests shorten them to make leader loss quick.
	HeartbeatInterval, ElectionTimeout time.Duration
	// ProgressNotifyInterval is how often etcd sends progress notifications
	// to watches that asked for them (0 means etcd's default, 10 minutes).
	ProgressNotifyInterval time.Duration
	// UnsafeNoFsync skips fsync; for tests only (data survives a Stop and
	// Restart of the server, not a machine crash).
	UnsafeNoFsync bool
	// StartTimeout bounds the wait for the server to become ready (default
	// 30 s).
	StartTimeout time.Duration
	// Logger receives etcd's warnings and errors (etcd's own info logs are
	// dropped: they are many and rarely useful here); nil discards.
	Logger *slog.Logger
	// ClientTLS, if set, makes etcd serve clients TLS; ClientURL must be
	// https://.
	ClientTLS *TLS
	// AuthUser and AuthPassword, if set, turn on etcd's authentication
	// when it is off (the first start): the user root, and AuthUser if it
	// is another, get the root role, each with AuthPassword. Clients must
	// then authenticate (clientv3.Config's Username and Password).
	AuthUser, AuthPassword string
	// BcryptCost is the cost of the users' password hashes (0: etcd's
	// default, 10). Every login pays it, so tests lower it.
	BcryptCost int
}

// TLS is the certificate etcd serves clients with, as etcd's --cert-file,
// --key-file and --trusted-ca-file with --client-cert-auth.
type TLS struct {
	CertFile, KeyFile string
	// ClientCAFile, if set, is the CA bundle every client's certificate
	// must verify against; a client without one is refused.
	ClientCAFile string
}

// Server is a running (or stopped) embedded etcd.
type Server struct {
	cfg       Config // with concrete URLs: ports are fixed at the first Start
	clientURL url.URL
	peerURL   url.URL
	advPeer   url.URL

	mu sync.Mutex
	e  *embed.Etcd // nil while stopped
}

// Start starts etcd and waits until it serves clients or ctx ends.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	if cfg.Dir == "" {
		return nil, errors.New("etcdembed: Config.Dir is required")
	}
	if cfg.ClientURL == "" {
		cfg.ClientURL = DefaultClientURL
	}
	if cfg.PeerURL == "" {
		cfg.PeerURL = "http://127.0.0.1:0"
	}
	if cfg.Name == "" {
		cfg.Name = "baton"
	}
	if cfg.StartTimeout <= 0 {
		cfg.StartTimeout = 30 * time.Second
	}
	if (cfg.AuthUser == "") != (cfg.AuthPassword == "") {
		return nil, errors.New("etcdembed: AuthUser and AuthPassword go together")
	}
	cu, err := concreteURL(cfg.ClientURL)
	if err != nil {
		return nil, fmt.Errorf("etcdembed: ClientURL: %w", err)
	}
	if (cfg.ClientTLS != nil) != (cu.Scheme == "https") {
		return nil, fmt.Errorf("etcdembed: ClientURL %s: https:// goes with ClientTLS, and only with it", cfg.ClientURL)
	}
	pu, err := concreteURL(cfg.PeerURL)
	if err != nil {
		return nil, fmt.Errorf("etcdembed: PeerURL: %w", err)
	}
	apu := pu
	if cfg.AdvertisePeerURL != "" {
		u, err := url.Parse(cfg.AdvertisePeerURL)
		if err != nil {
			return nil, fmt.Errorf("etcdembed: AdvertisePeerURL: %w", err)
		}
		apu = *u
	}
	s := &Server{cfg: cfg, clientURL: cu, peerURL: pu, advPeer: apu}
	if err := s.Restart(ctx); err != nil {
		return nil, err
	}
	return s, nil
}

// concreteURL parses u and replaces a port of 0 with a free port. etcd
// advertises its URLs and records the peer URL in its data, so it must know
// the real port before it listens; a port picked here can in principle be
// taken by someone else before etcd binds it, which Start then reports.
func concreteURL(raw string) (url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return url.URL{}, err
	}
	host, port, err := net.SplitHostPort(u.Host)
	if err != nil {
		return url.URL{}, err
	}
	if port == "0" {
		l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
		if err != nil {
			return url.URL{}, fmt.Errorf("pick a free port: %w", err)
		}
		port = fmt.Sprint(l.Addr().(*net.TCPAddr).Port)
		l.Close()
		u.Host = net.JoinHostPort(host, port)
	}
	return *u, nil
}

// Endpoints returns the client URLs, for clientv3.Config.Endpoints.
func (s *Server) Endpoints() []string { return []string{s.clientURL.String()} }

// MemberID returns the member's ID as etcd prints it (hex), or "" while
// stopped.
func (s *Server) MemberID() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.e == nil {
		return ""
	}
	return s.e.Server.MemberID().String()
}

// Dir returns the data directory.
func (s *Server) Dir() string { return s.cfg.Dir }

// Restart starts a stopped server again on the same data directory and
// ports; it does nothing if the server is running.
func (s *Server) Restart(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.e != nil {
		return nil
	}
	if err := os.MkdirAll(s.cfg.Dir, 0o700); err != nil {
		return fmt.Errorf("etcdembed: create data dir: %w", err)
	}
	ec := embed.NewConfig()
	ec.Name = s.cfg.Name
	ec.Dir = s.cfg.Dir
	ec.ListenClientUrls = []url.URL{s.clientURL}
	ec.AdvertiseClientUrls = []url.URL{s.clientURL}
	ec.ListenPeerUrls = []url.URL{s.peerURL}
	ec.AdvertisePeerUrls = []url.URL{s.advPeer}
	ec.InitialCluster = ec.InitialClusterFromName(ec.Name)
	if s.cfg.InitialCluster != "" {
		ec.InitialCluster = s.cfg.InitialCluster
	}
	if s.cfg.ClusterToken != "" {
		ec.InitialClusterToken = s.cfg.ClusterToken
	}
	if s.cfg.HeartbeatInterval > 0 {
		ec.TickMs = uint(s.cfg.HeartbeatInterval / time.Millisecond)
	}
	if s.cfg.ElectionTimeout > 0 {
		ec.ElectionMs = uint(s.cfg.ElectionTimeout / time.Millisecond)
	}
	ec.UnsafeNoFsync = s.cfg.UnsafeNoFsync
	if s.cfg.BcryptCost > 0 {
		ec.BcryptCost = uint(s.cfg.BcryptCost)
	}
	if s.cfg.ProgressNotifyInterval > 0 {
		ec.WatchProgressNotifyInterval = s.cfg.ProgressNotifyInterval
	}
	if t := s.cfg.ClientTLS; t != nil {
		ec.ClientTLSInfo = transport.TLSInfo{CertFile: t.CertFile, KeyFile: t.KeyFile, TrustedCAFile: t.ClientCAFile, ClientCertAuth: t.ClientCAFile != ""}
	}
	ec.LogLevel = "warn"
	ec.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zapToSlog(s.cfg.Logger))
	// etcd's metrics go to the default Prometheus registry only if asked;
	// "basic" is its default and costs nothing to us.

	e, err := embed.StartEtcd(ec)
	if err != nil {
		return fmt.Errorf("etcdembed: start: %w", err)
	}
	timer := time.NewTimer(s.cfg.StartTimeout)
	defer timer.Stop()
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return fmt.Errorf("etcdembed: start: %w", err)
	case <-timer.C:
		e.Close()
		return fmt.Errorf("etcdembed: not ready after %s", s.cfg.StartTimeout)
	case <-ctx.Done():
		e.Close()
		return fmt.Errorf("etcdembed: start: %w", ctx.Err())
	}
	if err := s.enableAuth(ctx, e); err != nil {
		e.Close()
		return err
	}
	s.e = e
	return nil
}

// enableAuth turns on authentication as Config asks, if it is off.
func (s *Server) enableAuth(ctx context.Context, e *embed.Etcd) error {
	if s.cfg.AuthUser == "" || e.Server.AuthStore().IsAuthEnabled() {
		return nil
	}
	users := []string{"root"}
	if s.cfg.AuthUser != "root" {
		users = append(users, s.cfg.AuthUser)
	}
	for _, u := range users {
		if _, err := e.Server.UserAdd(ctx, &pb.AuthUserAddRequest{Name: u, Password: s.cfg.AuthPassword}); err != nil {
			return fmt.Errorf("etcdembed: add user %s: %w", u, err)
		}
		if _, err := e.Server.UserGrantRole(ctx, &pb.AuthUserGrantRoleRequest{User: u, Role: "root"}); err != nil {
			return fmt.Errorf("etcdembed: grant %s the root role: %w", u, err)
		}
	}
	if _, err := e.Server.AuthEnable(ctx, &pb.AuthEnableRequest{}); err != nil {
		return fmt.Errorf("etcdembed: enable authentication: %w", err)
	}
	return nil
}

// Stop stops the server and keeps its data; Restart starts it again. Stop
// on a stopped server does nothing.
func (s *Server) Stop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.e == nil {
		return
	}
	s.e.Close()
	s.e = nil
}

// Close stops the server for good (the data directory is left in place).
func (s *Server) Close() { s.Stop() }

// Running reports whether the server is started.
func (s *Server) Running() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.e != nil
}

// zapToSlog returns a zap logger that forwards warnings and errors to log
// (nil: a no-op logger). etcd insists on zap; the rest of Baton uses slog.
func zapToSlog(log *slog.Logger) *zap.Logger {
	if log == nil {
		return zap.NewNop()
	}
	return zap.New(&slogCore{log: log.With("component", "etcd"), level: zapcore.WarnLevel})
}

// slogCore is a zapcore.Core writing to a slog.Logger.
type slogCore struct {
	log    *slog.Logger
	level  zapcore.Level
	fields []zapcore.Field
}

func (c *slogCore) Enabled(l zapcore.Level) bool { return l >= c.level }

func (c *slogCore) With(fs []zapcore.Field) zapcore.Core {
	return &slogCore{log: c.log, level: c.level, fields: append(append([]zapcore.Field(nil), c.fields...), fs...)}
}

func (c *slogCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c *slogCore) Write(e zapcore.Entry, fs []zapcore.Field) error {
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range c.fields {
		f.AddTo(enc)
	}
	for _, f := range fs {
		f.AddTo(enc)
	}
	attrs := make([]any, 0, 2*len(enc.Fields))
	for k, v := range enc.Fields {
		attrs = append(attrs, k, v)
	}
	lvl := slog.LevelWarn
	if e.Level >= zapcore.ErrorLevel {
		lvl = slog.LevelError
	}
	c.log.Log(context.Background(), lvl, e.Message, attrs...)
	return nil
}

func (c *slogCore) Sync() error { return nil }
