package framework

import (
	"strconv"
	"testing"
	"time"

	queueclient "github.com/batonrun/baton/client/queue"
)

// QueueOptions configures StartQueue. The zero value is a queue with the
// binary's defaults, a new data directory and a 1 s grace period.
type QueueOptions struct {
	// DataDir is --data-dir; empty means a new t.TempDir().
	DataDir string
	// GracePeriod is --grace-period; 0 means 1 s.
	GracePeriod time.Duration
	// BackoffBase and BackoffMax are --backoff-base and --backoff-max; 0
	// keeps the binary's (5 ms and 1000 s).
	BackoffBase, BackoffMax time.Duration
	// MaxAttempts is --max-attempts; 0 keeps the binary's (never park).
	MaxAttempts int
	// TLS, if set, serves mutual TLS with its queue certificate, and
	// Client dials as admin.
	TLS *Certs
	// Args are further flags, e.g. "--max-queues", "3".
	Args []string
}

// Queue is a baton-queue process. Addr, HTTPAddr and DataDir stay the same
// across Stop, Kill, Start and Restart, and Client reconnects to it.
type Queue struct {
	*Process
	// Addr is the gRPC address, HTTPAddr the HTTP one (/readyz, /metrics,
	// the dashboard), both on 127.0.0.1.
	Addr, HTTPAddr string
	// DataDir holds the write-ahead log and snapshots.
	DataDir string
	// Name and PeerAddr are a replicated queue's member's --name and
	// --peer-addr (StartQueueCluster); empty for a queue of one member.
	Name, PeerAddr string
	// Client is a client of this queue, closed when the test ends.
	Client *queueclient.Client
}

// StartQueue builds and starts baton-queue and waits until its /readyz
// answers 200 (its store is open). It fails the test if it cannot.
func StartQueue(t testing.TB, o QueueOptions) *Queue {
	t.Helper()
	dir := o.DataDir
	if dir == "" {
		dir = t.TempDir()
	}
	if o.GracePeriod == 0 {
		o.GracePeriod = testGracePeriod
	}
	args := []string{"--data-dir", dir}
	args = durationFlag(args, "grace-period", o.GracePeriod)
	args = durationFlag(args, "backoff-base", o.BackoffBase)
	args = durationFlag(args, "backoff-max", o.BackoffMax)
	if o.MaxAttempts != 0 {
		args = append(args, "--max-attempts", strconv.Itoa(o.MaxAttempts))
	}
	spec := serviceSpec{
		name:  "baton-queue",
		flags: func(g, h string) []string { return []string{"--grpc-addr", g, "--http-addr", h} },
	}
	var dial []queueclient.Option
	if o.TLS != nil {
		args = append(args, o.TLS.Flags("queue")...)
		spec.tls = o.TLS.Source(t, "queue")
		dial = append(dial, queueclient.WithTLS(o.TLS.Source(t, "admin")))
	}
	spec.args = append(args, o.Args...)
	s := startService(t, spec)
	q := &Queue{Process: s.Process, DataDir: dir}
	q.Addr, q.HTTPAddr = s.addrs()
	c, err := queueclient.Dial(q.Addr, dial...)
	if err != nil {
		t.Fatalf("framework: dial baton-queue: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	q.Client = c
	return q
}
