package peers

import (
	"context"
	"fmt"
	"time"

	queueclient "github.com/batonrun/baton/client/queue"
)

// Baton adapts a baton-queue client to Queue, on one named queue.
type Baton struct {
	Client   *queueclient.Client
	Name     string
	LeaseFor time.Duration // a lease's duration; 0 is a minute
}

// Add implements Queue.
func (b Baton) Add(ctx context.Context, keys []string) error {
	_, err := b.Client.Add(ctx, b.Name, keys, queueclient.AddOptions{})
	return err
}

// Lease implements Queue.
func (b Baton) Lease(ctx context.Context, worker string, max int, wait time.Duration) ([]Leased, error) {
	d := b.LeaseFor
	if d == 0 {
		d = time.Minute
	}
	ls, err := b.Client.Lease(ctx, b.Name, queueclient.LeaseOptions{Worker: worker, MaxItems: max, Wait: wait, Duration: d})
	if err != nil {
		return nil, err
	}
	out := make([]Leased, len(ls))
	for i, l := range ls {
		out[i] = Leased{Key: l.Key, handle: l.Token}
	}
	return out, nil
}

// Ack implements Queue; a refused ack is an error.
func (b Baton) Ack(ctx context.Context, _ string, ls []Leased) error {
	acks := make([]queueclient.Ack, len(ls))
	for i, l := range ls {
		acks[i] = queueclient.Ack{Key: l.Key, Token: l.handle.(uint64), Outcome: queueclient.Success()}
	}
	res, err := b.Client.Ack(ctx, b.Name, acks)
	if err != nil {
		return err
	}
	for i, r := range res {
		if r.Status != queueclient.OK {
			return fmt.Errorf("ack of %s refused: %v", acks[i].Key, r.Status)
		}
	}
	return nil
}

// Unfinished is the queue's pending, leased and delayed keys.
func (b Baton) Unfinished(ctx context.Context) (int64, error) {
	st, err := b.Client.Stats(ctx, b.Name)
	if err != nil || len(st) == 0 {
		return 0, err
	}
	return int64(st[0].GetPending() + st[0].GetLeased() + st[0].GetDelayed()), nil
}

// Close implements Queue; the server's owner closes the client.
func (Baton) Close() error { return nil }
