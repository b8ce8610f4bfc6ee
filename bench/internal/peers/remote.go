package peers

import (
	"context"
	"fmt"
	"path/filepath"
	"time"
)

// RemoteQueue is a contender's client whose server runs apart from it.
type RemoteQueue interface {
	Queue
	Counter
	// Redial connects again after the server restarted; no call may use
	// the queue meanwhile.
	Redial(ctx context.Context) error
}

// Remote is a contender (NATS or the etcd queue) whose server runs in a
// child process, with the client in this one.
type Remote struct {
	Proc  *Proc
	Queue RemoteQueue
}

// StartRemote starts the server of kind in a child process (command runs
// ServeMain, see StartProc) with its data under dir, and connects to it;
// leases last leaseFor.
func StartRemote(ctx context.Context, command []string, kind, dir string, leaseFor time.Duration) (*Remote, error) {
	data := dir
	if kind == KindEtcd {
		data = filepath.Join(dir, "etcd")
	}
	p, err := StartProc(ctx, command, kind, data)
	if err != nil {
		return nil, err
	}
	var q RemoteQueue
	switch kind {
	case KindNATS, KindNATSSync:
		q, err = DialNATS(ctx, "nats://"+p.Addr, leaseFor)
	case KindEtcd:
		q, err = DialEtcdQueue("http://"+p.Addr, leaseFor)
	default:
		err = fmt.Errorf("unknown kind %q", kind)
	}
	if err != nil {
		p.Close()
		return nil, err
	}
	return &Remote{Proc: p, Queue: q}, nil
}

// CrashSpec is Crash's spec for this server: SIGKILL the child, start a
// new one on the same data, reconnect.
func (r *Remote) CrashSpec(run, quiet time.Duration) CrashSpec {
	return CrashSpec{
		Run:  run,
		Kill: r.Proc.Kill,
		Restart: func(ctx context.Context) error {
			if _, err := r.Proc.Restart(ctx); err != nil {
				return err
			}
			return r.Queue.Redial(ctx)
		},
		Quiet: quiet,
	}
}

// Restart SIGKILLs the server, starts it again on the same data, and
// returns the time from exec until the queue, reconnected, counts want
// unfinished keys.
func (r *Remote) Restart(ctx context.Context, want int64) (time.Duration, error) {
	if err := r.Proc.Kill(); err != nil {
		return 0, err
	}
	start := time.Now()
	if _, err := r.Proc.launch(ctx); err != nil {
		return 0, err
	}
	if err := r.Queue.Redial(ctx); err != nil {
		return 0, err
	}
	for {
		n, err := r.Queue.Unfinished(ctx)
		if err == nil && n == want {
			return time.Since(start), nil
		}
		if ctx.Err() != nil || time.Since(start) > 2*time.Minute {
			return 0, fmt.Errorf("%s not back with %d keys after 2 minutes: %d, %v", r.Proc.Kind, want, n, err)
		}
		time.Sleep(time.Millisecond)
	}
}

// Close disconnects, kills the server and removes its log; the caller owns
// dir.
func (r *Remote) Close() {
	r.Queue.Close()
	r.Proc.Close()
}
