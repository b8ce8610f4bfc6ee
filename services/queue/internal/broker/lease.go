package broker

// Leases: handing out ready keys (at once, or waiting for one: the long
// poll), the work stream's variant, and extending them. A lease is in
// memory only; a replicated member answers one only once it is settled
// (reads.go).

import (
	"context"
	"github.com/batonrun/baton/client/queue/limits"
	"github.com/batonrun/baton/services/queue/internal/store"
	"github.com/batonrun/baton/services/queue/internal/workqueue"
	"math"
	"time"
)

// LeaseOptions are a Lease's, as the API's LeaseRequest and a work stream's
// open carry them (the server checks them first).
type LeaseOptions struct {
	// Worker is the name the caller gives itself.
	Worker string
	// Holder points at the name of the caller's verified identity, to
	// which the leases are bound (nil binds them to no one; see
	// workqueue's Holders).
	Holder *string
	// Max is how many keys at most.
	Max int
	// Duration is how long the leases last; 0 means
	// Config.DefaultLease.
	Duration time.Duration
	// Wait is how long a Lease waits for a key when none is ready (the
	// long poll); 0 answers at once. A work stream waits as long as its
	// context lasts.
	Wait time.Duration
}

// Lease hands out up to o.Max ready keys, waiting up to o.Wait for one.
func (b *Broker) Lease(ctx context.Context, queue string, o LeaseOptions) ([]workqueue.Grant, error) {
	return b.lease(ctx, false, queue, o)
}

// LeaseStream is Lease for a work stream, which waits as long as ctx
// lasts and records what it is granted before it sends it, so that the
// stream's end hands back every lease it held. Once keys are granted,
// the majority's confirmation (on a replicated leader) is waited for
// even if ctx ends meanwhile, within confirmTimeout: a grant cut short
// there would stay leased to nobody until its expiry, where one that
// returns is the stream's to hand back.
func (b *Broker) LeaseStream(ctx context.Context, queue string, o LeaseOptions) ([]workqueue.Grant, error) {
	o.Wait = forever
	return b.lease(ctx, true, queue, o)
}

// forever is a wait that only the caller's context ends.
const forever = time.Duration(math.MaxInt64)

// confirmTimeout bounds a stream's wait for the majority's confirmation of
// a grant, from the grant (a variable for a test).
var confirmTimeout = 10 * time.Second

// lease is Lease, waiting for keys with ctx; detached, it confirms what
// it grants with a context of its own, bounded by confirmTimeout from the
// grant, which ctx's end does not cut short (LeaseStream).
func (b *Broker) lease(ctx context.Context, detached bool, queue string, o LeaseOptions) ([]workqueue.Grant, error) {
	if o.Duration <= 0 {
		o.Duration = b.cfg.DefaultLease
	}
	wait := o.Wait
	var timeout <-chan time.Time
	if wait > 0 {
		t := time.NewTimer(wait)
		defer t.Stop()
		timeout = t.C
	}
	expired := false
	for {
		gen := b.gen.Load() // the leadership the grants are made in
		qs, err := b.lockExisting(queue)
		if err != nil {
			return nil, err
		}
		if qs == nil {
			if wait <= 0 || expired {
				// No queue, nothing to hand out, nothing kept: an empty
				// answer, settled as below.
				if !detached {
					if err := b.confirmGrants(ctx, gen, false); err != nil {
						return nil, err
					}
				}
				return nil, nil
			}
			// A queue to wait on, for the Add that wakes us.
			if qs, err = b.lock(queue); err != nil {
				return nil, err
			}
		}
		qs.use()
		before := qs.q.PendingCount()
		now := time.Now().UnixNano()
		qs.saw(o.Worker, now)
		grants := qs.q.Lease(nil, workqueue.LeaseRequest{Max: o.Max, MaxBytes: limits.MaxResponseBytes, Worker: o.Worker, Holder: o.Holder, Duration: o.Duration}, now)
		if len(grants) > 0 || wait <= 0 || expired {
			var obs *queueObservers
			if len(grants) > 0 {
				obs = b.observers(qs)
			}
			b.unlock(qs, before)
			for _, g := range grants {
				obs.queueDur.Observe(float64(now-g.PendingSince) / 1e9)
			}
			// An empty answer is a read too ("nothing is ready"), which a
			// deposed leader must not give: a unary Lease settles it as
			// it does grants. A work stream answers empty only when it
			// ends, and then nothing is sent.
			if len(grants) > 0 || !detached {
				if err := b.confirmGrants(ctx, gen, detached); err != nil {
					return nil, err
				}
			}
			return grants, nil
		}
		qs.waiters.Add(1)
		ready := make(chan struct{}, 1)
		qs.waitq = append(qs.waitq, ready)
		b.unlock(qs, before)
		select {
		case <-ready:
		case <-timeout:
			expired = true // one last look, then answer empty
		case <-b.draining:
			expired = true // shutting down: answer now, with what is ready
		case <-ctx.Done():
			err = ctx.Err()
		case <-b.closed:
			err = store.ErrClosed
		}
		qs.mu.Lock()
		if !qs.unwait(ready) && err != nil && qs.q.PendingCount() > 0 {
			// Woken for a key it will not look for: another waiter may.
			qs.wake(1)
		}
		qs.mu.Unlock()
		qs.waiters.Add(-1)
		b.dropIfUnused(queue, qs)
		if err != nil {
			return nil, err
		}
	}
}

// confirmGrants confirms grants made in the leadership gen (settled, on
// a replicated queue's leader) with ctx, or, detached, with a context that
// ctx's end does not cancel, bounded from now. A single member answers at
// once: a key it grants may still be on its way to the disk, and a crash
// before it is there loses the lease with the key's Add (whose caller was
// not answered yet), which no later call can tell from the lease never
// having been granted.
func (b *Broker) confirmGrants(ctx context.Context, gen uint64, detached bool) error {
	if !b.j.SettlesLeases() {
		return nil
	}
	if !detached {
		return b.settled(ctx, gen, true)
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), confirmTimeout)
	defer cancel()
	return b.settled(cctx, gen, true)
}

// Revision returns the highest etcd revision announced to queue since
// this broker started leading it (0 if none): what a lease granted now
// carries as its min_revision.
func (b *Broker) Revision(queue string) int64 {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if qs := b.queues[queue]; qs != nil {
		return qs.rev.Load()
	}
	return 0
}

// Extend extends holder's live leases to now+d; a zero expiry means
// LEASE_LOST (a token that is not live, or a lease bound to another holder).
func (b *Broker) Extend(ctx context.Context, queue string, holder *string, refs []AckItem, d time.Duration) ([]int64, error) {
	if d <= 0 {
		d = b.cfg.DefaultLease
	}
	out := make([]int64, len(refs))
	gen := b.gen.Load()
	qs, err := b.lockExisting(queue)
	if err != nil {
		return nil, err
	}
	if qs != nil {
		qs.use()
		before := qs.q.PendingCount()
		now := time.Now().UnixNano()
		for i, r := range refs {
			out[i], _ = qs.q.Extend(r.Key, r.Token, holder, d, now)
		}
		b.unlock(qs, before)
	}
	// Answered from memory, LEASE_LOST as much as a new expiry: a leader
	// deposed without knowing it would refuse a lease the new leader
	// granted, so both wait for the confirmation a grant waits for.
	if b.j.SettlesLeases() {
		if err := b.settled(ctx, gen, true); err != nil {
			return nil, err
		}
	}
	return out, nil
}
