package queue_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	queueclient "github.com/batonrun/baton/client/queue"
	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
)

// partitionGID is the first of the groups the partition test runs its
// members as (one each): iptables' owner match tells their sockets apart
// by it, which a proxy on loopback cannot (every connection comes from
// 127.0.0.1).
const partitionGID = 47100

// firewall adds iptables OUTPUT rules on loopback and removes them at the
// end of the test. It needs root and iptables; the test skips without.
type firewall struct {
	t     *testing.T
	rules [][]string
}

func newFirewall(t *testing.T) *firewall {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("the partition test cuts peer traffic with iptables, which needs root")
	}
	if _, err := exec.LookPath("iptables"); err != nil {
		t.Skip("the partition test cuts peer traffic with iptables, which is not installed")
	}
	if out, err := exec.Command("iptables", "-S", "OUTPUT").CombinedOutput(); err != nil {
		t.Skipf("iptables cannot be used here: %v: %s", err, out)
	}
	f := &firewall{t: t}
	t.Cleanup(f.heal)
	return f
}

// drop adds a rule dropping the TCP packets that match spec on loopback.
func (f *firewall) drop(spec ...string) {
	f.t.Helper()
	rule := append([]string{"OUTPUT", "-o", "lo", "-p", "tcp"}, spec...)
	rule = append(rule, "-j", "DROP")
	if out, err := exec.Command("iptables", append([]string{"-I"}, rule...)...).CombinedOutput(); err != nil {
		f.t.Fatalf("iptables -I %v: %v: %s", rule, err, out)
	}
	f.rules = append(f.rules, rule)
}

// heal removes every rule drop added.
func (f *firewall) heal() {
	for _, rule := range f.rules {
		if out, err := exec.Command("iptables", append([]string{"-D"}, rule...)...).CombinedOutput(); err != nil {
			f.t.Errorf("iptables -D %v: %v: %s", rule, err, out)
		}
	}
	f.rules = nil
}

// cut cuts member i's peer traffic both ways: every packet to its peer
// listener (the others' streams to it, and calls handed on to it), and
// every packet its own process sends to another member's peer listener.
func (f *firewall) cut(r *replicated, i int) {
	f.drop("--dport", port(r.peers[i]))
	for j, p := range r.peers {
		if j != i {
			f.drop("-m", "owner", "--gid-owner", fmt.Sprint(partitionGID+i), "--dport", port(p))
		}
	}
}

func port(addr string) string { return addr[strings.LastIndexByte(addr, ':')+1:] }

// TestReplicatedPartitionedLeader cuts the leader's peer traffic both
// ways with real processes under load (iptables, not an in-process
// transport): the cut-off leader acknowledges nothing, the other two
// elect a leader, and after healing there is one leader, every member has
// applied the same log, and every acknowledged Add is offered.
func TestReplicatedPartitionedLeader(t *testing.T) {
	fw := newFirewall(t)
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	r := newReplicatedWith(t, func(i int, p *proc) { p.gid = partitionGID + uint32(i) })
	old := r.leader(ctx)
	// The load's client dials every member, the one to be cut off first:
	// its client port keeps answering, with refusals, so the client must
	// move its retries to another member, not merely when a connection
	// fails.
	addrs := []string{r.procs[old].grpcAddr}
	for i, p := range r.procs {
		if i != old {
			addrs = append(addrs, p.grpcAddr)
		}
	}
	c, err := queueclient.Dial(strings.Join(addrs, ","), queueclient.WithBackoff(queueclient.Backoff{Initial: 10 * time.Millisecond, Max: 200 * time.Millisecond}))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	var (
		mu    sync.Mutex
		acked []string
		wg    sync.WaitGroup
	)
	loadCtx, stopLoad := context.WithCancel(ctx)
	for a := range 2 {
		wg.Go(func() {
			for n := 0; loadCtx.Err() == nil; n++ {
				k := fmt.Sprintf("a%d-%05d", a, n)
				actx, acancel := context.WithTimeout(loadCtx, 5*time.Second)
				_, err := c.Add(actx, "q", []string{k}, queueclient.AddOptions{})
				acancel()
				if err == nil {
					mu.Lock()
					acked = append(acked, k)
					mu.Unlock()
				}
			}
		})
	}
	defer func() { stopLoad(); wg.Wait() }()
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(acked) }
	for count() < 50 && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}

	if l := r.leader(ctx); l != old {
		t.Fatalf("leadership moved from m%d to m%d before the cut", old+1, l+1)
	}
	fw.cut(r, old)
	cutAt := time.Now()
	t.Logf("cut m%d, the leader, off its peers", old+1)

	// The other two elect one of them.
	var elected string
	for elected == "" {
		for i, cc := range r.ccs {
			if i == old {
				continue
			}
			sctx, scancel := context.WithTimeout(ctx, time.Second)
			st, err := cc.Status(sctx, &queuev1.StatusRequest{})
			scancel()
			if err == nil && st.GetMember().GetLeader() {
				elected = st.GetMember().GetName()
			}
		}
		if ctx.Err() != nil {
			t.Fatal("the majority elected no leader")
		}
		time.Sleep(5 * time.Millisecond)
	}
	took := time.Since(cutAt)
	t.Logf("%s leads the majority %v after the cut (election timeout 500ms)", elected, took.Round(time.Millisecond))
	// A bound with room for a loaded machine, not the figure itself.
	if took > 10*time.Second {
		t.Errorf("the majority took %v to elect a leader", took)
	}
	// The cut-off member acknowledges nothing sent to it: it cannot
	// commit, nor hand the call to the new leader.
	for n := range 3 {
		actx, acancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := r.qcs[old].Add(actx, &queuev1.AddRequest{Queue: "q", Keys: []string{fmt.Sprintf("minority-%d", n)}})
		acancel()
		if err == nil {
			t.Fatalf("the cut-off member m%d acknowledged an Add %v after the cut", old+1, time.Since(cutAt))
		}
	}

	// The client, first pointed at the cut-off member, adds through the
	// majority.
	before, until := count(), time.Now().Add(20*time.Second)
	for count() < before+50 {
		if time.Now().After(until) {
			t.Fatalf("%d Adds acknowledged in the 20 s after the election, want 50: the client stays on the cut-off member", count()-before)
		}
		time.Sleep(10 * time.Millisecond)
	}

	fw.heal()
	stopLoad()
	wg.Wait()
	// One leader, named by all three, and the same log applied on each.
	deadline := time.Now().Add(30 * time.Second)
	for {
		var leaders, applied []string
		for _, cc := range r.ccs {
			sctx, scancel := context.WithTimeout(ctx, time.Second)
			st, err := cc.Status(sctx, &queuev1.StatusRequest{})
			scancel()
			if err != nil {
				leaders = append(leaders, err.Error())
				continue
			}
			leaders = append(leaders, st.GetLeaderName())
			applied = append(applied, fmt.Sprint(st.GetMember().GetAppliedIndex()))
		}
		same := func(s []string) bool {
			for _, v := range s {
				if v != s[0] {
					return false
				}
			}
			return len(s) == len(r.ccs)
		}
		if same(leaders) && leaders[0] != "" && same(applied) {
			t.Logf("healed: %s leads, every member applied through %s", leaders[0], applied[0])
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("30 s after healing: leaders %v, applied %v", leaders, applied)
		}
		time.Sleep(20 * time.Millisecond)
	}
	offered := offeredBy(t, ctx, c)
	mu.Lock()
	defer mu.Unlock()
	for _, k := range acked {
		if !offered[k] {
			t.Errorf("%s: acknowledged, not offered after the partition", k)
		}
	}
	t.Logf("%d acknowledged Adds, all offered", len(acked))
}
