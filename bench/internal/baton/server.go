// Package baton runs a real baton-queue binary as a child process on
// loopback ports with its own data directory, for the benchmarks: start,
// SIGKILL and restart it, wait until it serves, and read its /metrics. It
// serves plaintext, or mutual TLS with certificates WriteCerts makes.
package baton

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	queueclient "github.com/batonrun/baton/client/queue"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// Server is one baton-queue process and a client connected to it.
type Server struct {
	Bin, DataDir       string
	GRPCAddr, HTTPAddr string
	// Conn is the plaintext client's connection; nil over TLS, where the
	// client dials its own through client/queue (see Options.TLS).
	Conn   *grpc.ClientConn
	Client *queueclient.Client

	opts Options

	cmd     *exec.Cmd
	exited  chan struct{}
	waitErr error
	logPath string
	runs    int
}

// Options are how Start runs the queue besides its defaults.
type Options struct {
	// TLS, if set, makes the queue serve mutual TLS with its files (and so
	// authorize every call with the default role table) and the client
	// dial with client/queue's Dial and WithTLS, as a deployment's
	// clients do. Nil serves and dials plaintext.
	TLS *TLS
	// Args are flags passed besides the defaults, e.g. a replicated
	// member's --name, --peer-addr and --initial-cluster.
	Args []string
}

// Start launches bin with a fresh data directory under dir and waits until
// it serves plaintext.
func Start(ctx context.Context, bin, dir string) (*Server, error) {
	return StartWith(ctx, bin, dir, Options{})
}

// StartWith is Start with Options.
func StartWith(ctx context.Context, bin, dir string, o Options) (*Server, error) {
	s, err := prepare(bin, dir, o)
	if err != nil {
		return nil, err
	}
	if err := s.launch(); err != nil {
		s.closeClient()
		return nil, err
	}
	if _, err := s.WaitServing(ctx, time.Now()); err != nil {
		s.Close()
		return nil, err
	}
	return s, nil
}

// prepare makes a Server's data directory, picks its ports and makes its
// client, without starting the process.
func prepare(bin, dir string, o Options) (*Server, error) {
	data, err := os.MkdirTemp(dir, "queue-")
	if err != nil {
		return nil, err
	}
	s := &Server{Bin: bin, DataDir: data, opts: o}
	if s.GRPCAddr, err = FreeAddr(); err != nil {
		return nil, err
	}
	if s.HTTPAddr, err = FreeAddr(); err != nil {
		return nil, err
	}
	// One refusal is an error: a benchmark must not hide retries. The
	// calls carry at most 10,000 keys, within either client's limits.
	once := queueclient.WithBackoff(queueclient.Backoff{Attempts: 1})
	if o.TLS != nil {
		// The path a deployment's clients take (client/internal/dial), so
		// the mTLS figures are those of the client users run. Its
		// connection keeps grpc's default reconnect backoff, which only
		// Restart would notice.
		if s.Client, err = queueclient.Dial(s.GRPCAddr, queueclient.WithTLS(o.TLS.Client), once); err != nil {
			return nil, err
		}
	} else {
		// A short reconnect backoff: grpc's default grows to two minutes,
		// and the restart benchmark times how soon the queue serves again.
		s.Conn, err = grpc.NewClient(s.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithDefaultCallOptions(grpc.MaxCallSendMsgSize(64<<20), grpc.MaxCallRecvMsgSize(64<<20)),
			grpc.WithConnectParams(grpc.ConnectParams{
				Backoff:           backoff.Config{BaseDelay: 5 * time.Millisecond, Multiplier: 1.5, Jitter: 0.1, MaxDelay: 50 * time.Millisecond},
				MinConnectTimeout: time.Second,
			}))
		if err != nil {
			return nil, err
		}
		s.Client = queueclient.New(s.Conn, once)
	}
	return s, nil
}

// FreeAddr returns a loopback address whose port is free now, for a child
// process to listen on.
func FreeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

func (s *Server) launch() error {
	s.runs++
	s.logPath = s.logFile(s.runs) // beside the data directory, not in it
	logf, err := os.Create(s.logPath)
	if err != nil {
		return err
	}
	args := []string{"--grpc-addr", s.GRPCAddr, "--http-addr", s.HTTPAddr, "--data-dir", s.DataDir, "--log-level", "warn"}
	if t := s.opts.TLS; t != nil {
		args = append(args, "--tls-cert-file", t.CertFile, "--tls-key-file", t.KeyFile, "--tls-ca-file", t.CAFile)
	}
	args = append(args, s.opts.Args...)
	cmd := exec.Command(s.Bin, args...)
	// The heap figures assume the default GC target.
	cmd.Env = append(os.Environ(), "GOGC=100")
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("start %s: %w", s.Bin, err)
	}
	s.cmd, s.exited = cmd, make(chan struct{})
	go func() {
		s.waitErr = cmd.Wait()
		logf.Close()
		close(s.exited)
	}()
	return nil
}

// WaitServing polls grpc.health.v1 until the queue answers SERVING and
// returns the time since from.
func (s *Server) WaitServing(ctx context.Context, from time.Time) (time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		cctx, ccancel := context.WithTimeout(ctx, 200*time.Millisecond)
		err := s.checkServing(cctx)
		ccancel()
		if err == nil {
			return time.Since(from), nil
		}
		select {
		case <-s.exited:
			return 0, fmt.Errorf("baton-queue exited while starting (%v); see %s", s.waitErr, s.logPath)
		default:
		}
		if ctx.Err() != nil {
			return 0, fmt.Errorf("baton-queue not serving: %v (log %s)", err, s.logPath)
		}
	}
}

// checkServing returns nil when grpc.health.v1 answers SERVING for the
// queue's service.
func (s *Server) checkServing(ctx context.Context) error {
	if s.Conn == nil {
		// Client.Healthy cannot wait for the connection to be ready: while
		// the process is still starting it fails at once, so pause a
		// little rather than spin on the two cores the queue needs.
		err := s.Client.Healthy(ctx)
		if err != nil {
			select {
			case <-ctx.Done():
			case <-time.After(10 * time.Millisecond):
			}
		}
		return err
	}
	r, err := healthpb.NewHealthClient(s.Conn).Check(ctx, &healthpb.HealthCheckRequest{Service: "baton.queue.v1.QueueService"}, grpc.WaitForReady(true))
	if err != nil {
		return err
	}
	if st := r.GetStatus(); st != healthpb.HealthCheckResponse_SERVING {
		return fmt.Errorf("health: %s", st)
	}
	return nil
}

// Restart SIGKILLs the process, starts it again on the same data and ports,
// and returns how long the new process took from exec to serving.
func (s *Server) Restart(ctx context.Context) (time.Duration, error) {
	if err := s.Kill(); err != nil {
		return 0, err
	}
	start := time.Now()
	if err := s.launch(); err != nil {
		return 0, err
	}
	return s.WaitServing(ctx, start)
}

// Kill SIGKILLs the process (no shutdown of any kind) and waits until it is
// gone; it does nothing if the process is not running.
func (s *Server) Kill() error {
	if s.cmd == nil {
		return nil
	}
	select {
	case <-s.exited:
		return nil
	default:
	}
	if err := s.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return err
	}
	<-s.exited
	return nil
}

// Close kills the process and removes its data.
func (s *Server) Close() {
	_ = s.Kill()
	s.closeClient()
	os.RemoveAll(s.DataDir)
	for i := 1; i <= s.runs; i++ {
		os.Remove(s.logFile(i))
	}
}

func (s *Server) closeClient() {
	if s.Conn != nil {
		s.Conn.Close()
		return
	}
	if s.Client != nil {
		s.Client.Close() // the connection Dial made
	}
}

func (s *Server) logFile(run int) string { return fmt.Sprintf("%s-run%d.log", s.DataDir, run) }

// Metrics scrapes /metrics into a map from series (name with labels, as
// printed) to value, over plaintext HTTP: a Server started with TLS serves
// HTTPS and answers no plaintext scrape.
func (s *Server) Metrics(ctx context.Context) (map[string]float64, error) {
	return ScrapeMetrics(ctx, s.HTTPAddr)
}

// ScrapeMetrics reads the /metrics of any Baton process at httpAddr
// (host:port), as Server.Metrics does.
func ScrapeMetrics(ctx context.Context, httpAddr string) (map[string]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+httpAddr+"/metrics", nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET /metrics: %s", resp.Status)
	}
	return ParseMetrics(bufio.NewScanner(resp.Body))
}

// ParseMetrics reads the Prometheus text format's samples.
func ParseMetrics(sc *bufio.Scanner) (map[string]float64, error) {
	out := map[string]float64{}
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		out[line[:i]] = v
	}
	return out, sc.Err()
}

// Heap is the server's memory after a settled garbage collection.
type Heap struct {
	Live float64 // bytes the last completed GC found reachable
	RSS  float64 // resident set size
}

// LiveHeap estimates the live heap without a profiler: it makes the server
// collect twice after the caller's state is in place (churn makes garbage
// in the server, e.g. collapsed Adds), then derives the live heap from the
// GC's next goal, which is live × (1 + GOGC/100) plus a small term for
// stacks and globals; differences of two readings cancel that term.
func (s *Server) LiveHeap(ctx context.Context, churn func(context.Context) error) (Heap, error) {
	m, err := s.Metrics(ctx)
	if err != nil {
		return Heap{}, err
	}
	const gcCount = "go_gc_duration_seconds_count"
	first, ok := m[gcCount]
	if !ok {
		return Heap{}, errors.New("/metrics has no " + gcCount)
	}
	deadline := time.Now().Add(time.Minute)
	for m[gcCount] < first+2 {
		if time.Now().After(deadline) {
			return Heap{}, errors.New("the server did not collect garbage within a minute of churn")
		}
		if err := churn(ctx); err != nil {
			return Heap{}, err
		}
		if m, err = s.Metrics(ctx); err != nil {
			return Heap{}, err
		}
	}
	gogc := 100.0
	if v, ok := m["go_gc_gogc_percent"]; ok && v > 0 {
		gogc = v
	}
	return Heap{Live: m["go_memstats_next_gc_bytes"] / (1 + gogc/100), RSS: m["process_resident_memory_bytes"]}, nil
}
