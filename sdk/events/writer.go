package events

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/batonrun/baton/client/kinds"
	"github.com/batonrun/baton/sdk/objects"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// maxBatch bounds the events Run takes from the buffer at once; repeats
// among them become one write.
const maxBatch = 256

// maxAttempts bounds the compare-and-swaps of one write: each failed one
// means another writer changed the event (or etcd dropped it) in between.
// Only processes recording the same event at once contend, and a short
// random pause after each loss spreads them out.
const maxAttempts = 16

// stored is what the Recorder knows of a stored Event: enough to write
// its next repeat without reading it.
type stored struct {
	uid     string
	created string
	first   time.Time
	count   int
	modRev  int64
}

// Run writes the recorded events to etcd until ctx is cancelled, then
// writes what is still buffered within Options.FlushTimeout and returns
// nil. Call it once, for any view of the Recorder; events recorded while
// it does not run wait in the buffer, and are dropped once it is full.
func (r *Recorder) Run(ctx context.Context) error {
	if r == nil {
		return errors.New("events: Run of a nil Recorder")
	}
	if !r.running.CompareAndSwap(false, true) {
		return errors.New("events: Run called twice")
	}
	// Writes under way when ctx is cancelled finish: their own timeouts
	// bound them.
	wctx := context.WithoutCancel(ctx)
	for {
		select {
		case <-ctx.Done():
			r.flush(wctx)
			return nil
		case rec := <-r.buf:
			r.writeBatch(wctx, r.take(rec))
		}
	}
}

// take returns first and what else the buffer holds, up to maxBatch.
func (c *core) take(first record) []record {
	batch := []record{first}
	for len(batch) < maxBatch {
		select {
		case rec := <-c.buf:
			batch = append(batch, rec)
		default:
			return batch
		}
	}
	return batch
}

// flush writes what the buffer holds, for at most FlushTimeout.
func (c *core) flush(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, c.o.FlushTimeout)
	defer cancel()
	for ctx.Err() == nil {
		select {
		case rec := <-c.buf:
			c.writeBatch(ctx, c.take(rec))
		default:
			return
		}
	}
	if n := len(c.buf); n > 0 {
		c.log.Warn("events not written: the flush timed out", "events", n)
	}
}

// group is the repeats of one event in a batch: one write.
type group struct {
	key   string
	rec   record // the last of them
	n     int
	first time.Time
}

// writeBatch writes batch, repeats of one event as one write, up to
// Writers events at once.
func (c *core) writeBatch(ctx context.Context, batch []record) {
	var groups []*group
	byKey := map[string]*group{}
	for _, rec := range batch {
		k := rec.key()
		if g, ok := byKey[k]; ok {
			g.n++
			g.rec = rec
			continue
		}
		g := &group{key: k, rec: rec, n: 1, first: rec.at}
		byKey[k] = g
		groups = append(groups, g)
	}
	sem := make(chan struct{}, c.o.Writers)
	var wg sync.WaitGroup
	for _, g := range groups {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := c.write(ctx, g); err != nil {
				c.stats.failed.Add(1)
				c.log.Warn("event not written", "key", g.key, "reason", g.rec.reason, "err", err)
			}
		})
	}
	wg.Wait()
}

// write stores g's event: a new Event with count g.n, or, when the event
// is stored already, the stored one with its count raised by g.n and its
// lastTimestamp moved, by a compare-and-swap on its revision. Either is
// written with the current lease, so the event lives TTL past this write.
func (c *core) write(ctx context.Context, g *group) error {
	c.seenMu.Lock()
	prev, known := c.seen.get(g.key)
	c.seenMu.Unlock()
	for i := range maxAttempts {
		if i > 0 {
			pause(ctx, i)
		}
		lease, err := c.leaseNow(ctx)
		if err != nil {
			return err
		}
		ev := c.event(g, prev, known)
		b, err := json.Marshal(ev)
		if err != nil {
			return fmt.Errorf("encode event: %w", err)
		}
		cmp := clientv3.Compare(clientv3.CreateRevision(g.key), "=", 0)
		if known {
			cmp = clientv3.Compare(clientv3.ModRevision(g.key), "=", prev.modRev)
		}
		tctx, cancel := context.WithTimeout(ctx, c.o.OpTimeout)
		resp, err := c.etcd.Txn(tctx).If(cmp).
			Then(clientv3.OpPut(g.key, string(b), clientv3.WithLease(lease))).
			Else(clientv3.OpGet(g.key)).Commit()
		cancel()
		if errors.Is(err, rpctypes.ErrLeaseNotFound) {
			c.dropLease(lease) // expired or revoked under us: grant another
			continue
		}
		if err != nil {
			return fmt.Errorf("write event: %w", err)
		}
		if resp.Succeeded {
			c.remember(g.key, stored{uid: ev.Metadata.UID, created: ev.Metadata.CreationTimestamp,
				first: ev.FirstTimestamp, count: ev.Count, modRev: resp.Header.Revision})
			if known {
				c.stats.updated.Add(1)
			} else {
				c.stats.created.Add(1)
			}
			return nil
		}
		// Someone else wrote it, or it expired: start from what etcd has.
		kvs := resp.Responses[0].GetResponseRange().GetKvs()
		if len(kvs) == 0 {
			prev, known = stored{}, false
			continue
		}
		var have Event
		if err := json.Unmarshal(kvs[0].Value, &have); err != nil {
			return fmt.Errorf("decode the stored event: %w", err)
		}
		if !g.rec.same(&have) {
			return fmt.Errorf("another event is stored under the name (about %s %s/%s, reason %s)",
				have.InvolvedObject.Kind, have.InvolvedObject.Namespace, have.InvolvedObject.Name, have.Reason)
		}
		prev, known = stored{uid: have.Metadata.UID, created: have.Metadata.CreationTimestamp,
			first: have.FirstTimestamp, count: have.Count, modRev: kvs[0].ModRevision}, true
	}
	c.forget(g.key)
	return fmt.Errorf("write event: gave up after %d attempts: %w", maxAttempts, objects.ErrConflict)
}

// pause waits a random while, longer after more lost attempts (up to
// 2 ms each), or until ctx ends.
func pause(ctx context.Context, attempts int) {
	t := time.NewTimer(rand.N(time.Duration(attempts) * 2 * time.Millisecond))
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

// event builds g's Event over prev, the stored one when known.
func (c *core) event(g *group, prev stored, known bool) *Event {
	r := &g.rec
	ev := &Event{
		Kind: kinds.Event,
		Metadata: objects.ObjectMeta{
			Name: r.name(), Namespace: r.ref.Namespace,
			UID: objects.NewUID(), CreationTimestamp: g.first.Format(time.RFC3339),
		},
		InvolvedObject: r.ref, Reason: r.reason, Message: r.message, Type: r.typ,
		Count: g.n, FirstTimestamp: g.first, LastTimestamp: r.at,
		Source:              Source{Component: r.component, Host: r.host},
		ReportingController: r.component,
	}
	if known {
		ev.Metadata.UID, ev.Metadata.CreationTimestamp = prev.uid, prev.created
		ev.FirstTimestamp = prev.first
		ev.Count = prev.count + g.n
	}
	return ev
}

func (c *core) remember(key string, s stored) {
	c.seenMu.Lock()
	c.seen.put(key, s)
	c.seenMu.Unlock()
}

func (c *core) forget(key string) {
	c.seenMu.Lock()
	c.seen.remove(key)
	c.seenMu.Unlock()
}

// leaseNow returns the lease of the current bucket, granting it on the
// bucket's first write: for TTL and one bucket more, so that every event
// written while it is current lives at least TTL.
func (c *core) leaseNow(ctx context.Context) (clientv3.LeaseID, error) {
	c.leaseMu.Lock()
	defer c.leaseMu.Unlock()
	now := c.o.Now()
	if c.lease != 0 && now.Sub(c.leaseAt) < c.o.LeaseBucket {
		return c.lease, nil
	}
	ttl := int64(math.Ceil((c.o.TTL + c.o.LeaseBucket).Seconds()))
	tctx, cancel := context.WithTimeout(ctx, c.o.OpTimeout)
	defer cancel()
	resp, err := c.etcd.Grant(tctx, ttl)
	if err != nil {
		return 0, fmt.Errorf("grant a lease for events: %w", err)
	}
	c.lease, c.leaseAt = resp.ID, now
	c.stats.leases.Add(1)
	return c.lease, nil
}

// dropLease forgets id if it is the current lease.
func (c *core) dropLease(id clientv3.LeaseID) {
	c.leaseMu.Lock()
	if c.lease == id {
		c.lease = 0
	}
	c.leaseMu.Unlock()
}
