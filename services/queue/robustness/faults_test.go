package robustness

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// A fault class: how to inject one fault and heal it. Each step of a
// schedule names one, with the seeded random numbers it uses, so that a
// seed replays the same schedule (which member plays "the leader" is the
// run's, not the seed's).
type faultClass struct {
	name string
	// partition: needs iptables.
	partition bool
	// inject injects the fault, holds it for hold, heals it, and returns
	// a line for the run's log.
	inject func(ctx context.Context, r *run, s step) (string, error)
}

// step is one fault of a schedule.
type step struct {
	n     int
	class string
	pause time.Duration // traffic before the fault
	hold  time.Duration // how long the fault lasts
	pick  int           // which member, among those the class chooses from
	bits  uint64        // where to damage a file
}

func (s step) String() string {
	return fmt.Sprintf("#%d +%v %s hold %v pick %d", s.n, s.pause.Round(time.Millisecond), s.class, s.hold.Round(time.Millisecond), s.pick)
}

// faultClasses lists every class the scheduler draws from; a new class is
// one more entry. A power loss of all three with unsynced writes dropped
// cannot happen to a process: it runs in-process (powerloss_test.go).
var faultClasses = []faultClass{
	{name: "kill-leader", inject: killRole(roleLeader)},
	{name: "kill-follower", inject: killRole(roleFollower)},
	{name: "kill-all", inject: killAll},
	{name: "stop-leader", inject: stopLeader(false)},
	{name: "stop-idle-leader", inject: stopLeader(true)},
	{name: "partition-leader", partition: true, inject: partitionLeader},
	{name: "partition-minority", partition: true, inject: partitionMinority},
	{name: "partition-bridge", partition: true, inject: partitionBridge},
	{name: "lost-disk", inject: lostDisk},
	{name: "corrupt-bitflip", inject: corrupt(false)},
	{name: "corrupt-truncate", inject: corrupt(true)},
	{name: "member-replace", inject: memberReplace},
	{name: "rolling-restart", inject: rollingRestart},
	{name: "burst-kill-leader", inject: burstKillLeader(false)},
	{name: "burst-kill-frozen", inject: burstKillLeader(true)},
	{name: "two-disks-lost", inject: twoDisksLost},
	{name: "restore-whole", inject: restoreWhole},
	{name: "restore-into-member", inject: restoreIntoMember},
	{name: "force-beside-peers", inject: forceBesidePeers},
	{name: "move-leader-sigterm", inject: moveLeaderRacingSIGTERM},
}

func classByName(name string) (faultClass, bool) {
	for _, c := range faultClasses {
		if c.name == name {
			return c, true
		}
	}
	return faultClass{}, false
}

// schedule draws a fault schedule from seed, among classes, long enough
// to fill d.
func schedule(seed uint64, classes []string, d time.Duration) []step {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	var out []step
	// A fault cycle is its pause, its hold and a recovery; the run stops
	// drawing at its end, so the schedule may be longer than it needs.
	for total := time.Duration(0); total < d; {
		s := step{n: len(out) + 1, class: classes[rng.IntN(len(classes))],
			pause: time.Duration(500+rng.IntN(2000)) * time.Millisecond,
			hold:  time.Duration(500+rng.IntN(2000)) * time.Millisecond,
			pick:  rng.IntN(6), bits: rng.Uint64()}
		out = append(out, s)
		total += s.pause + s.hold + time.Second
	}
	return out
}

const (
	roleLeader = iota
	roleFollower
)

// target resolves a role to a member: the leader, or one of the others
// chosen by pick.
func (r *run) target(ctx context.Context, role, pick int) (int, error) {
	l, err := r.c.awaitLeader(ctx, 10*time.Second)
	if err != nil {
		return -1, err
	}
	if role == roleLeader {
		return l, nil
	}
	var fs []int
	for i := range r.c.procs {
		if i != l {
			fs = append(fs, i)
		}
	}
	return fs[pick%len(fs)], nil
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

func killRole(role int) func(ctx context.Context, r *run, s step) (string, error) {
	return func(ctx context.Context, r *run, s step) (string, error) {
		i, err := r.target(ctx, role, s.pick)
		if err != nil {
			return "", err
		}
		p := r.c.procs[i]
		p.kill()
		sleepCtx(ctx, s.hold)
		return "SIGKILL " + p.name, p.start()
	}
}

func killAll(ctx context.Context, r *run, s step) (string, error) {
	for _, p := range r.c.procs {
		p.kill()
	}
	sleepCtx(ctx, s.hold/2)
	for _, p := range r.c.procs {
		if err := p.start(); err != nil {
			return "", err
		}
	}
	return "SIGKILL all three", nil
}

// windowClients numbers the one-call clients of stopLeader's calls to the
// frozen leader, apart from every workload's and burstKillLeader's.
const windowClients = 100000

// stopLeader freezes the leader past every lease's length (at most 2 s in
// the workloads), so a new leader offers its keys again while it still
// believes it leads; then it thaws. Just before it thaws, calls that its
// memory would answer without writing anything go to it, each on a
// client of its own that dials it alone, so that it reads them as it
// wakes, before it hears of the new term: Adds of keys it holds pending
// (they collapse in its memory, whatever the new leader did with them),
// Forgets of keys it may not hold, and an Extend of each lease the others
// granted while it was frozen (live, and unknown to it). Each is recorded
// and checked like any call: an answer must be the queue's truth or a
// refusal.
//
// Under load (idle false) an entry of the old term is nearly always in
// flight when the leader stops, and the calls that wait for it fail with
// it; the workloads change the keys meanwhile through the others. With
// idle, the leader is frozen with nothing in flight and nothing about to
// be written, which is where an answer from stale memory used to get out:
// every workload's calls are held back (the cluster's quiet) until those
// under way are answered and every lease has lapsed, its expiry committed
// (a lease that lapsed while it was frozen would be written as it wakes),
// and they stay held back until it has woken, since a call of theirs sent
// to it while frozen would be written as it wakes too. The fault's own
// client makes the changes through the others: once one of them leads it
// Adds the keys the frozen leader holds absent, Forgets those it holds
// pending and leases some, so that every call sent in the window has an
// answer its memory gets wrong.
func stopLeader(idle bool) func(ctx context.Context, r *run, s step) (string, error) {
	return func(ctx context.Context, r *run, s step) (string, error) {
		i, err := r.target(ctx, roleLeader, s.pick)
		if err != nil {
			return "", err
		}
		p := r.c.procs[i]
		adds, forgets := linKeys, []string{
			linKeys[s.bits%uint64(len(linKeys))],
			linKeys[(s.bits+5)%uint64(len(linKeys))],
		}
		if idle {
			r.c.quiet.Lock()
			defer r.c.quiet.Unlock()
			sleepCtx(ctx, 2500*time.Millisecond)
			adds, forgets = r.c.localStates(ctx, i, linQueue, linKeys)
		}
		if err := p.signal(syscall.SIGSTOP, 0); err != nil {
			return "", err
		}
		stopped := r.h.Now()
		if idle {
			if err := r.changeThroughOthers(ctx, s, i, forgets, adds); err != nil {
				_ = p.signal(syscall.SIGCONT, 0)
				return "", err
			}
		} else {
			sleepCtx(ctx, 2500*time.Millisecond+s.hold)
		}
		var (
			wg sync.WaitGroup
			n  int
		)
		call := func(f func(cl *client)) {
			cl := r.c.client(windowClients+s.n*256+n, r.h, []int{i}, r.cfg.seed)
			cl.quiet = nil
			n++
			wg.Go(func() { f(cl) })
		}
		for _, k := range adds {
			call(func(cl *client) { cl.add(ctx, linQueue, k, 0) })
		}
		for _, k := range forgets {
			call(func(cl *client) { cl.forget(ctx, linQueue, k) })
		}
		for _, g := range grantedSince(r.h, stopped, p.name, linQueue, 4) {
			call(func(cl *client) { cl.extend(ctx, linQueue, g) })
		}
		// The calls are on their way to the frozen member before it
		// thaws; the pause only makes that likelier, nothing waits on it.
		sleepCtx(ctx, 50*time.Millisecond)
		err = p.signal(syscall.SIGCONT, 0)
		wg.Wait()
		what := "SIGSTOP " + p.name
		if idle {
			what = "with nothing in flight, SIGSTOP " + p.name + ", keys changed through the others"
		}
		return fmt.Sprintf("%s, %d calls sent to it, then SIGCONT", what, n), err
	}
}

// changeThroughOthers makes, through the members other than the frozen
// one, the changes stopLeader's idle variant needs: once one of them
// leads, Adds of absent (keys the frozen member holds absent), Forgets of
// pending (those it holds pending) and a Lease of up to four keys. Every
// call is recorded; each key is tried until an answer or a refusal that
// says nothing changed.
func (r *run) changeThroughOthers(ctx context.Context, s step, frozen int, absent, pending []string) error {
	cl := r.c.client(windowClients+s.n*256+255, r.h, othersThan(frozen), r.cfg.seed)
	cl.quiet = nil
	deadline := time.Now().Add(20 * time.Second)
	until := func(f func() Op) error {
		for time.Now().Before(deadline) && ctx.Err() == nil {
			switch f().Outcome {
			case OK:
				return nil
			case "":
				continue // not sent: the member is down
			}
			time.Sleep(20 * time.Millisecond)
		}
		return fmt.Errorf("no member but the frozen %s answered within 20 s", r.c.procs[frozen].name)
	}
	for _, k := range absent {
		if err := until(func() Op { return cl.add(ctx, linQueue, k, 0) }); err != nil {
			return err
		}
	}
	for _, k := range pending {
		if err := until(func() Op { return cl.forget(ctx, linQueue, k) }); err != nil {
			return err
		}
	}
	return until(func() Op { return cl.lease(ctx, linQueue, 4, 0, 2*time.Second) })
}

// othersThan returns the members other than i.
func othersThan(i int) []int {
	var out []int
	for j := range 3 {
		if j != i {
			out = append(out, j)
		}
	}
	return out
}

// localStates reads keys of queue from member i's own state (serializable
// Inspects, not recorded: the model knows only linearizable reads) and
// returns those it holds pending and those it holds absent. A key it
// could not read is in neither.
func (c *cluster) localStates(ctx context.Context, i int, queue string, keys []string) (pending, absent []string) {
	for _, k := range keys {
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		resp, err := c.qcs[i].Inspect(cctx, &queuev1.InspectRequest{Queue: queue, Key: k, Serializable: true})
		cancel()
		switch {
		case err != nil:
		case resp.GetItem().GetState() == queuev1.ItemState_ITEM_STATE_PENDING:
			pending = append(pending, k)
		case resp.GetItem().GetState() == queuev1.ItemState_ITEM_STATE_ABSENT:
			absent = append(absent, k)
		}
	}
	return pending, absent
}

// grantedSince returns up to max leases of queue that members other than
// member granted (answered) since the history's time since.
func grantedSince(h *History, since int64, member, queue string, max int) []Grant {
	var out []Grant
	for _, op := range h.Ops() {
		if op.Call < since || op.Member == member || op.Queue != queue || op.Outcome != OK || (op.Kind != KindLease && op.Kind != KindWorkLease) {
			continue
		}
		for _, g := range op.Grants {
			if len(out) == max {
				return out
			}
			out = append(out, g)
		}
	}
	return out
}

func (r *run) partition(ctx context.Context, s step, cut func() error, what string) (string, error) {
	if err := cut(); err != nil {
		_ = r.fw.heal()
		return "", err
	}
	sleepCtx(ctx, s.hold+time.Second)
	return what, r.fw.heal()
}

func partitionLeader(ctx context.Context, r *run, s step) (string, error) {
	i, err := r.target(ctx, roleLeader, s.pick)
	if err != nil {
		return "", err
	}
	return r.partition(ctx, s, func() error { return r.fw.isolate(r.c, i) }, "isolate the leader "+r.c.procs[i].name)
}

func partitionMinority(ctx context.Context, r *run, s step) (string, error) {
	i, err := r.target(ctx, roleFollower, s.pick)
	if err != nil {
		return "", err
	}
	return r.partition(ctx, s, func() error { return r.fw.isolate(r.c, i) }, "isolate the follower "+r.c.procs[i].name)
}

// partitionBridge leaves one member (the bridge) seeing both others, who
// cannot see each other.
func partitionBridge(ctx context.Context, r *run, s step) (string, error) {
	b := s.pick % 3
	x, y := (b+1)%3, (b+2)%3
	return r.partition(ctx, s, func() error { return r.fw.cutPair(r.c, x, y) },
		fmt.Sprintf("bridge %s: cut %s from %s", r.c.procs[b].name, r.c.procs[x].name, r.c.procs[y].name))
}

func lostDisk(ctx context.Context, r *run, s step) (string, error) {
	p := r.c.procs[s.pick%3]
	p.kill()
	if err := p.wipe(); err != nil {
		return "", err
	}
	sleepCtx(ctx, s.hold/2)
	return "lost the disk of " + p.name, p.start()
}

// corrupt damages one file of a stopped member's raft/ directory, a bit
// flipped or the file cut short, and starts it: it must refuse to start
// or be repaired from its peers, and never spread the damage (the
// checkers see that). A member that refuses is then treated as one that
// lost its disk.
func corrupt(truncate bool) func(ctx context.Context, r *run, s step) (string, error) {
	return func(ctx context.Context, r *run, s step) (string, error) {
		p := r.c.procs[s.pick%3]
		p.kill()
		var files []string
		_ = filepath.WalkDir(filepath.Join(p.dir, "raft"), func(path string, d os.DirEntry, err error) error {
			if err == nil && !d.IsDir() {
				if fi, err := d.Info(); err == nil && fi.Size() > 0 {
					files = append(files, path)
				}
			}
			return nil
		})
		if len(files) == 0 {
			return "no file to damage in " + p.name + "'s raft/", p.start()
		}
		slices.Sort(files)
		f := files[int(s.bits%uint64(len(files)))]
		b, err := os.ReadFile(f)
		if err != nil {
			return "", err
		}
		off := int((s.bits >> 8) % uint64(len(b)))
		var what string
		if truncate {
			b = b[:off]
			what = fmt.Sprintf("cut %s of %s to %d bytes", filepath.Base(f), p.name, off)
		} else {
			b[off] ^= 1 << ((s.bits >> 40) % 8)
			what = fmt.Sprintf("flipped a bit of %s of %s at offset %d", filepath.Base(f), p.name, off)
		}
		if err := os.WriteFile(f, b, 0o600); err != nil {
			return "", err
		}
		if err := p.start(); err != nil {
			return "", err
		}
		if p.waitExit(3 * time.Second) {
			what += ": refused to start (" + strings.TrimSpace(lastLine(p.lastLog(2000))) + "); wiped and restarted"
			return what, p.restartEmptied()
		}
		// Started on it. A cut may have been repaired as a write torn by a
		// crash, dropping entries the member had acknowledged to the
		// leader; raft then finds the leader's commit past its log, and
		// the member stops following and stays up, not ready, its log
		// saying to empty its directory (docs/reliability.md). That is
		// the damage contained: the suite does what the log says.
		if r.c.awaitHealthyOr(ctx, 15*time.Second, func() bool { return p.logContains(cannotFollow) }) {
			what += ": started on it, then stopped following, as its log says; wiped and restarted"
			p.kill()
			r.noteDamagedStart(what)
			return what, p.restartEmptied()
		}
		r.noteDamagedStart(what)
		return what + ": started on it", nil
	}
}

// cannotFollow is what a member logs when it stops following a leader
// whose log contradicts its own (a log cut short, a restored copy).
const cannotFollow = "this member cannot follow the queue's leader"

func lastLine(s string) string {
	s = strings.TrimSpace(s)
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		s = s[i+1:]
	}
	if len(s) > 300 {
		s = s[:300]
	}
	return s
}

// memberReplace removes a follower with MemberRemove, stops it, adds it
// back with MemberAdd (same name and peer address) and starts it on an
// empty directory: it joins as a learner and becomes a voter, all under
// traffic.
func memberReplace(ctx context.Context, r *run, s step) (string, error) {
	i, err := r.target(ctx, roleFollower, s.pick)
	if err != nil {
		return "", err
	}
	p := r.c.procs[i]
	via := (i + 1) % 3
	if err := retry(ctx, 20*time.Second, func(ctx context.Context) error {
		_, err := r.c.ccs[via].MemberRemove(ctx, &queuev1.MemberRemoveRequest{Name: p.name})
		if err != nil && strings.Contains(err.Error(), "NotFound") {
			return nil
		}
		return err
	}); err != nil {
		return "", fmt.Errorf("MemberRemove %s: %w", p.name, err)
	}
	p.kill()
	sleepCtx(ctx, s.hold/2)
	if err := retry(ctx, 20*time.Second, func(ctx context.Context) error {
		_, err := r.c.ccs[via].MemberAdd(ctx, &queuev1.MemberAddRequest{Name: p.name, PeerAddr: p.peerAddr, ClientAddr: p.grpcAddr})
		return err
	}); err != nil {
		return "", fmt.Errorf("MemberAdd %s: %w", p.name, err)
	}
	if err := p.wipe(); err != nil {
		return "", err
	}
	return "MemberRemove, MemberAdd and rejoin of " + p.name, p.start()
}

// retry calls f until it succeeds or limit passes; each call has a
// second.
func retry(ctx context.Context, limit time.Duration, f func(ctx context.Context) error) error {
	deadline := time.Now().Add(limit)
	for {
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := f(cctx)
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// rollingRestart SIGTERMs each member in turn, the followers first, and
// waits for the queue to be whole before the next.
func rollingRestart(ctx context.Context, r *run, s step) (string, error) {
	l, err := r.target(ctx, roleLeader, 0)
	if err != nil {
		return "", err
	}
	order := []int{(l + 1) % 3, (l + 2) % 3, l}
	for _, i := range order {
		p := r.c.procs[i]
		if err := p.signal(syscall.SIGTERM, 10*time.Second); err != nil {
			return "", err
		}
		if err := p.start(); err != nil {
			return "", err
		}
		if err := r.c.awaitHealthy(ctx, 30*time.Second); err != nil {
			return "", fmt.Errorf("after restarting %s: %w", p.name, err)
		}
	}
	return "SIGTERM and restart of each member in turn", nil
}

// burstClients numbers the one-call clients of burstKillLeader's Adds,
// apart from every workload's.
const burstClients = 1000

// burstKillLeader sends a burst of Adds of fresh keys of the set queue to
// the leader at once and SIGKILLs it the moment it acknowledges the
// first, then keeps it down past an election, so that the others elect a
// leader without whatever of the burst had not reached them. With
// frozen, both followers are SIGSTOPped during the burst and thawed once
// the leader is dead, so that none of it can have reached them; a queue
// that answers only what a majority holds then answers none of the burst,
// and the leader is killed after 300 ms.
//
// A queue that answers an Add only once a majority holds it loses none of
// those it acknowledged (the set checker sees each one); one that answers
// before the commit (the negative control's) loses some, and with frozen
// followers every one.
func burstKillLeader(frozen bool) func(ctx context.Context, r *run, s step) (string, error) {
	return func(ctx context.Context, r *run, s step) (string, error) {
		l, err := r.target(ctx, roleLeader, s.pick)
		if err != nil {
			return "", err
		}
		p := r.c.procs[l]
		var followers []*proc
		if frozen {
			for i, f := range r.c.procs {
				if i != l {
					if err := f.signal(syscall.SIGSTOP, 0); err != nil {
						return "", err
					}
					followers = append(followers, f)
				}
			}
		}
		thaw := func() error {
			var errs []error
			for _, f := range followers {
				errs = append(errs, f.signal(syscall.SIGCONT, 0))
			}
			return errors.Join(errs...)
		}
		n := 16 + int(s.bits%48)
		acked := make(chan struct{}, n)
		var wg sync.WaitGroup
		for i := range n {
			cl := r.c.client(burstClients+s.n*64+i, r.h, []int{l}, r.cfg.seed)
			key := fmt.Sprintf("b%04d-%02d", s.n, i)
			wg.Go(func() {
				if op := cl.add(ctx, setQueue, key, 0); op.Outcome == OK {
					acked <- struct{}{}
				}
			})
		}
		limit := 5 * time.Second
		if frozen {
			limit = 300 * time.Millisecond
		}
		select {
		case <-acked:
			acked <- struct{}{} // counted below
		case <-time.After(limit):
		case <-ctx.Done():
		}
		p.kill()
		if err := thaw(); err != nil {
			return "", err
		}
		wg.Wait()
		// An election takes 0.5 to 1 s: the killed leader, back sooner with
		// the longest log, could win it and keep what it had alone.
		sleepCtx(ctx, 1500*time.Millisecond+s.hold)
		what := fmt.Sprintf("%d Adds to the leader %s, %d acknowledged by its SIGKILL", n, p.name, len(acked))
		if frozen {
			what = fmt.Sprintf("followers frozen; %d Adds to the leader %s, %d acknowledged by its SIGKILL; followers thawed", n, p.name, len(acked))
		}
		return what, p.start()
	}
}

// twoDisksLost is a reboot in which two members lose their disks: all
// three stop, two data directories are emptied, and those two start while
// the third (the survivor, the only one holding the queue) is still down.
// They must not form a new, empty queue: for the hold and 2 s more they
// answer no Stats NOT_FOUND (nor anything at all) and acknowledge nothing,
// while the workloads keep calling them (the checkers see any
// acknowledged call). Then the operator's recovery (docs/queue.md): the
// survivor restarted alone with --force-new-cluster is a queue of one
// holding everything it held, and the two, emptied again and started,
// rejoin it.
//
// The survivor is the leader, and the followers are frozen (SIGSTOP)
// before anyone is killed, so that it holds every change the queue
// acknowledged: a change is acknowledged once a majority holds it, and
// losing two disks of three may lose one that the third never received;
// the leader has them all, and with the followers frozen it can neither
// commit another nor be replaced. (An operator picks the member whose
// log goes furthest for the same reason.)
func twoDisksLost(ctx context.Context, r *run, s step) (string, error) {
	return twoDisksLostOf(ctx, r, s, setQueue, -1)
}

// twoDisksLostOf is twoDisksLost, probing the waiting members with
// queue, one the queue held before the reboot. survivor < 0 is the
// leader, its followers frozen; a quiet queue, whose members all hold
// everything, may name one.
func twoDisksLostOf(ctx context.Context, r *run, s step, queue string, survivor int) (string, error) {
	if survivor < 0 {
		var err error
		if survivor, err = r.freezeFollowers(ctx); err != nil {
			return "", err
		}
	}
	var lost []int
	for i := range r.c.procs {
		r.c.procs[i].kill()
		if i != survivor {
			lost = append(lost, i)
		}
	}
	for _, i := range lost {
		p := r.c.procs[i]
		if err := p.restartEmptied(); err != nil {
			return "", err
		}
	}
	what := fmt.Sprintf("SIGKILL all three, %s and %s lost their disks and started without %s",
		r.c.procs[lost[0]].name, r.c.procs[lost[1]].name, r.c.procs[survivor].name)
	probes := 0
	for deadline := time.Now().Add(s.hold + 2*time.Second); time.Now().Before(deadline) && ctx.Err() == nil; {
		for _, i := range lost {
			probes++
			if v := refusesQueue(ctx, r, i, queue, fmt.Sprintf("x%04d-%04d", s.n, probes)); v != "" {
				r.extra = append(r.extra, Violation{Checker: "two-disks-lost", What: fmt.Sprintf("%s, %s", what, v)})
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, i := range lost {
		r.c.procs[i].kill()
	}
	sp := r.c.procs[survivor]
	sp.once = []string{"--force-new-cluster"}
	if err := sp.start(); err != nil {
		return "", err
	}
	if _, err := r.c.awaitLeader(ctx, 30*time.Second); err != nil {
		return "", fmt.Errorf("%s started with --force-new-cluster: %w", sp.name, err)
	}
	for _, i := range lost {
		p := r.c.procs[i]
		if err := p.restartEmptied(); err != nil {
			return "", err
		}
	}
	return fmt.Sprintf("%s; %d probes of them answered nothing; %s forced into a queue of one, the others emptied and started to rejoin", what, probes, sp.name), nil
}

// freezeFollowers SIGSTOPs both followers of the leader and returns the
// leader, once it still says it leads with them frozen: no other member
// can then lead, nor can it commit anything more.
func (r *run) freezeFollowers(ctx context.Context) (int, error) {
	deadline := time.Now().Add(20 * time.Second)
	for {
		l, err := r.c.awaitLeader(ctx, 10*time.Second)
		if err != nil {
			return -1, err
		}
		var frozen []*proc
		for i, p := range r.c.procs {
			if i != l {
				if err := p.signal(syscall.SIGSTOP, 0); err != nil {
					return -1, err
				}
				frozen = append(frozen, p)
			}
		}
		if st, err := r.c.status(ctx, l); err == nil && st.GetMember().GetLeader() {
			return l, nil
		}
		for _, p := range frozen {
			_ = p.signal(syscall.SIGCONT, 0)
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return -1, fmt.Errorf("no leader that still leads with its followers frozen within 20 s")
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// refusesQueue probes member i, which has no queue to serve, with Stats
// of queue and an Add of a fresh key to it (recorded, so that the
// checkers judge it too): it says what is wrong, or "" if the member
// answered neither (an empty new queue answers Stats NOT_FOUND).
func refusesQueue(ctx context.Context, r *run, i int, queue, key string) string {
	c := r.c
	cctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	st, serr := c.qcs[i].Stats(cctx, &queuev1.StatsRequest{Queue: queue})
	op := Op{Client: probeClients + i, Member: c.procs[i].name, Kind: KindAdd, Queue: queue, Key: key, Call: r.h.Now()}
	resp, aerr := c.qcs[i].Add(cctx, &queuev1.AddRequest{Queue: queue, Keys: []string{key}})
	op.Return = r.h.Now()
	op.Outcome, op.Err = Classify(aerr)
	op.Queued = aerr == nil && resp.GetQueued() == 1
	r.h.Record(op)
	switch {
	case serr == nil:
		return fmt.Sprintf("%s answered Stats of %s: %v", c.procs[i].name, queue, st.GetQueues())
	case status.Code(serr) == codes.NotFound:
		return fmt.Sprintf("%s answered Stats of %s NOT_FOUND: a new, empty queue", c.procs[i].name, queue)
	case aerr == nil:
		return fmt.Sprintf("%s acknowledged an Add of %s to %s", c.procs[i].name, key, queue)
	}
	return ""
}

// probeClients numbers the probes of members that must refuse, apart
// from every workload's.
const probeClients = 2000
