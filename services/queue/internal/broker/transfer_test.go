package broker

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/batonrun/baton/services/queue/internal/replica"
	"github.com/batonrun/baton/services/queue/internal/workqueue"
)

// TestReplicatedDroppedProposalsResync: raft drops every proposal while
// its leader hands leadership over, including proposals whose changes the
// broker made in memory before the loop proposed them. Here the transfer
// is to a member that hears nothing, so raft gives it up after an election
// timeout and the same member leads on. Under four adders that retry a
// refused key until it is acknowledged, every acknowledged key must be in
// the log: a key whose first Add was dropped must not be collapsed onto
// the leader's memory of it by the retry and answered OK without a
// record. The leader leads again without an election, and every member
// ends with the same state.
func TestReplicatedDroppedProposalsResync(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	c := newRCluster(t)
	lead := c.leader(0)
	term := lead.b.Member().Status().Term
	var deaf *rmember
	for _, m := range c.members {
		if m != lead {
			deaf = m
		}
	}

	var (
		mu      sync.Mutex
		acked   []string
		refused int
		wg      sync.WaitGroup
	)
	stop := make(chan struct{})
	for w := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				k := fmt.Sprintf("w%d-%05d", w, i)
				for {
					select {
					case <-stop:
						return
					default:
					}
					_, _, err := lead.b.Add(ctx, "q", []string{k}, AddOptions{})
					if err == nil {
						mu.Lock()
						acked = append(acked, k)
						mu.Unlock()
						break
					}
					if !errors.Is(err, ErrNotLeader) && !errors.Is(err, replica.ErrLeadershipLost) {
						t.Errorf("Add %s: %v", k, err)
						return
					}
					mu.Lock()
					refused++
					mu.Unlock()
				}
			}
		})
	}
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(acked) }
	within(t, 20*time.Second, "100 Adds acknowledged", func() bool { return count() >= 100 })
	c.cut(deaf)
	for round := range 3 {
		before := count()
		err := lead.b.Member().TransferLeadership(ctx, deaf.id)
		if !errors.Is(err, replica.ErrTransferAborted) {
			t.Fatalf("round %d: a transfer to a member that hears nothing: %v, want ErrTransferAborted", round, err)
		}
		within(t, 10*time.Second, "the leader leads again after the abandoned transfer", func() bool { return lead.b.Leading() })
		within(t, 10*time.Second, "Adds acknowledged again", func() bool { return count() > before+20 })
	}
	close(stop)
	wg.Wait()
	if st := lead.b.Member().Status(); !st.IsLeader || st.Term != term {
		t.Errorf("after the abandoned transfers: leader %v in term %d, want the same leader in term %d", st.IsLeader, st.Term, term)
	}
	c.serve(deaf, nil)
	c.converge()
	mu.Lock()
	defer mu.Unlock()
	t.Logf("%d Adds acknowledged, %d refused during the transfers", len(acked), refused)
	if refused == 0 {
		t.Error("no Add was refused during three transfers: the test did not reach the window it is about")
	}
	for _, m := range c.members {
		var lost []string
		for _, k := range acked {
			v, err := m.b.Inspect(ctx, "q", k, ReadOptions{Serializable: true})
			if err != nil {
				t.Fatal(err)
			}
			if v.State != workqueue.Pending {
				lost = append(lost, k)
			}
		}
		if len(lost) > 0 {
			t.Errorf("member %d: %d acknowledged keys are not in its state: %v", m.id, len(lost), lost[:min(10, len(lost))])
		}
	}
}
