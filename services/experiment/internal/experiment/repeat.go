package experiment

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
	"github.com/batonrun/baton/sdk/reconcile"
)

// RepeatOptions sets the repeat experiment.
type RepeatOptions struct {
	// Notifications is how many rapid changes are made to the one object.
	Notifications int
}

// Validate names the first bad option.
func (o RepeatOptions) Validate() error {
	if o.Notifications < 1 || o.Notifications > 1000 {
		return errors.New("notifications: must be 1 to 1000")
	}
	return nil
}

// RepeatResult is one run of the repeat experiment.
type RepeatResult struct {
	Experiment string `json:"experiment"`
	RunID      string `json:"run_id"`
	Queue      string `json:"queue"`
	Key        string `json:"key"`
	// Notifications is how many changes were written to the object;
	// DirectObserved and Observed how many watch events the direct-reaction
	// handler and the observer received for them.
	Notifications  int `json:"notifications"`
	DirectObserved int `json:"direct_reaction_notifications_observed"`
	Observed       int `json:"work_queue_notifications_observed"`
	// DirectReconciles counts the direct-reaction handler's reconciles, and
	// DirectReconciledSeqs the change (spec.seq) each one acted on.
	DirectReconciles     int     `json:"direct_reaction_reconciles"`
	DirectReconciledSeqs []int64 `json:"direct_reaction_reconciled_seqs"`
	// Adds is what the queue answered each of the observer's Adds of the
	// key while no worker ran (from its added and collapsed counters), and
	// BeforeWorker the key's queue item just before the worker started.
	Adds         []AddOutcome `json:"adds"`
	BeforeWorker ItemView     `json:"queue_item_before_worker"`
	// QueueLeases is how many times the queue handed the key out (Stats'
	// leases_total, before and after), QueueReconciles how many reconciles
	// the worker ran, and QueueReconciledSeqs what each one read.
	QueueLeases         uint64  `json:"work_queue_leases"`
	QueueReconciles     int     `json:"work_queue_reconciles"`
	QueueReconciledSeqs []int64 `json:"work_queue_reconciled_seqs"`
	// Needed is how many reconciles the latest state needs: one.
	Needed int `json:"correct_number_needed"`
}

// ItemView is the part of a queue item the experiments show.
type ItemView struct {
	Key           string `json:"key"`
	State         string `json:"state"`
	Attempts      uint32 `json:"attempts"`
	LastError     string `json:"last_error,omitempty"`
	Announcements uint64 `json:"announcements"`
	Dirty         bool   `json:"dirty,omitempty"`
	Worker        string `json:"worker,omitempty"`
}

func viewOf(it *queuev1.Item) ItemView {
	st := it.GetState().String()
	if len(st) > len("ITEM_STATE_") {
		st = st[len("ITEM_STATE_"):]
	}
	return ItemView{Key: it.GetKey(), State: st, Attempts: it.GetAttempts(), LastError: it.GetLastError(),
		Announcements: it.GetAnnouncements(), Dirty: it.GetDirty(), Worker: it.GetWorker()}
}

// Repeat changes one object Notifications times in quick succession, and
// counts the reconciles of a direct-reaction handler and of a worker that
// leases the key from the queue only after the observer has announced every
// change.
func Repeat(ctx context.Context, e Env, o RepeatOptions) (_ *RepeatResult, err error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	w := watchOf(QueueRepeat)
	if err := checkRule(ctx, e, w); err != nil {
		return nil, err
	}
	if err := checkIdle(ctx, e.Queue, QueueRepeat); err != nil {
		return nil, err
	}
	run := newRunID()
	objKey := w.Prefix + run + "/web"
	qkey := run + "/web"
	res := &RepeatResult{Experiment: "repeat", RunID: run, Queue: QueueRepeat, Key: qkey, Notifications: o.Notifications, Needed: 1}
	defer finish(e, run, w, &err)

	rev, err := revisionNow(ctx, e.Etcd)
	if err != nil {
		return nil, err
	}
	if err := waitCaughtUp(ctx, e, w, rev); err != nil {
		return nil, err
	}
	before, err := stats(ctx, e.Queue, QueueRepeat)
	if err != nil {
		return nil, err
	}
	obsBefore, err := viewObserver(ctx, e, w)
	if err != nil {
		return nil, err
	}

	// Direct reaction: the handler reconciles every event it is given,
	// with the object the event carries.
	hctx, hcancel := context.WithCancel(ctx)
	defer hcancel()
	var (
		mu             sync.Mutex
		directSeqs     []int64
		directObserved int
	)
	wch := e.Etcd.Watch(hctx, objKey, clientv3.WithRev(rev+1))
	go func() {
		for resp := range wch {
			for _, ev := range resp.Events {
				if ev.Type != clientv3.EventTypePut {
					continue
				}
				mu.Lock()
				directObserved++
				mu.Unlock()
				sleepCtx(hctx, 10*time.Millisecond) // the reconcile's work
				mu.Lock()
				directSeqs = append(directSeqs, seqOf(ev.Kv.Value))
				mu.Unlock()
			}
		}
	}()

	// Baton: the observer Adds the key for each change; no worker runs
	// yet. Each change waits for the observer's Add of the one before, so
	// every notification is one Add and the queue's answer to each shows;
	// changes made faster than that the observer's outbox (a set of keys)
	// merges before they reach the queue: the same collapse, one step
	// earlier.
	collapsed := before.GetCollapsedTotal()
	for i := 1; i <= o.Notifications; i++ {
		if _, err := e.Etcd.Put(ctx, objKey, marshalObject("Experiment", run, "web", map[string]any{"seq": i})); err != nil {
			return nil, fmt.Errorf("change %d: %w", i, err)
		}
		var st *queuev1.QueueStats
		err := waitFor(ctx, 30*time.Second, fmt.Sprintf("the observer to announce change #%d", i), func() (bool, error) {
			var err error
			st, err = stats(ctx, e.Queue, QueueRepeat)
			return err == nil && st.GetAddsTotal()-before.GetAddsTotal() >= uint64(i), err
		})
		if errors.Is(err, errTimeout) {
			v, verr := viewObserver(ctx, e, w)
			if verr != nil {
				return nil, errors.Join(err, verr)
			}
			return nil, fmt.Errorf("%w (%s); is it watching this etcd and announcing to this queue?", err, v.describe(w))
		}
		if err != nil {
			return nil, err
		}
		c := int(st.GetCollapsedTotal() - collapsed)
		collapsed = st.GetCollapsedTotal()
		res.Adds = append(res.Adds, AddOutcome{Keys: 1, Queued: 1 - c, Collapsed: c})
	}
	n := o.Notifications
	err = waitFor(ctx, 30*time.Second, "every notification to reach the direct-reaction handler", func() (bool, error) {
		mu.Lock()
		defer mu.Unlock()
		return len(directSeqs) >= n, nil
	})
	if err != nil {
		return nil, err
	}
	obsAfter, err := viewObserver(ctx, e, w)
	if err != nil {
		return nil, err
	}
	res.Observed = int(obsAfter.events() - obsBefore.events())
	item, err := e.Queue.Inspect(ctx, QueueRepeat, qkey)
	if err != nil {
		return nil, err
	}
	res.BeforeWorker = viewOf(item)

	// Now a worker is free: it leases the key and reconciles the object as
	// it is now.
	var queueSeqs []int64
	rec := reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
		resp, err := e.Etcd.Get(ctx, objKey)
		if err != nil {
			return reconcile.Result{}, err
		}
		seq := int64(-1)
		if len(resp.Kvs) == 1 {
			seq = seqOf(resp.Kvs[0].Value)
		}
		mu.Lock()
		queueSeqs = append(queueSeqs, seq)
		mu.Unlock()
		return reconcile.Result{}, nil
	})
	wk, err := startWorker(ctx, e, QueueRepeat, workerName(run), rec)
	if err != nil {
		return nil, err
	}
	err = waitFor(ctx, 30*time.Second, "the worker to reconcile the key and the queue to forget it", func() (bool, error) {
		mu.Lock()
		done := len(queueSeqs) > 0
		mu.Unlock()
		if !done {
			return false, nil
		}
		it, err := e.Queue.Inspect(ctx, QueueRepeat, qkey)
		return it.GetState() == queuev1.ItemState_ITEM_STATE_ABSENT, err
	})
	if serr := wk.stop(); err == nil {
		err = serr
	}
	if err != nil {
		return nil, err
	}
	after, err := stats(ctx, e.Queue, QueueRepeat)
	if err != nil {
		return nil, err
	}
	hcancel()
	mu.Lock()
	defer mu.Unlock()
	res.DirectObserved = directObserved
	res.DirectReconciles = len(directSeqs)
	res.DirectReconciledSeqs = append([]int64(nil), directSeqs...)
	res.QueueReconciles = len(queueSeqs)
	res.QueueReconciledSeqs = append([]int64(nil), queueSeqs...)
	res.QueueLeases = after.GetLeasesTotal() - before.GetLeasesTotal()
	return res, nil
}
