package robustness

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"time"

	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
	"github.com/batonrun/baton/services/queue/internal/backup"
)

// The operator's procedures (docs/operations.md), done right and done
// wrong, as fault classes: the same workloads and checkers judge what
// the queue answered meanwhile.

// fenceMark is a restore of the whole queue: every token granted after
// it must be above the backup's fence (TestRestoreKeepsFencing's
// property, over a whole run).
type fenceMark struct {
	at    int64  // the history's time once the restored queue served
	token uint64 // the backup's fence
	what  string
}

// saveBackup takes a backup through member i (ClusterService Snapshot)
// into a file of the run's, and returns its path and fence.
func (r *run) saveBackup(ctx context.Context, i int, name string) (string, backup.Info, error) {
	var file bytes.Buffer
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	stream, err := r.c.ccs[i].Snapshot(cctx, &queuev1.SnapshotRequest{})
	if err != nil {
		return "", backup.Info{}, fmt.Errorf("backup through %s: %w", r.c.procs[i].name, err)
	}
	for {
		m, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return "", backup.Info{}, fmt.Errorf("backup through %s: %w", r.c.procs[i].name, err)
		}
		file.Write(m.GetData())
	}
	info, err := backup.Read(name, file.Bytes(), nil)
	if err != nil {
		return "", backup.Info{}, err
	}
	p := filepath.Join(r.t.TempDir(), name)
	return p, info, os.WriteFile(p, file.Bytes(), 0o600)
}

// restoreInto runs baton-queue restore of file into p's emptied data
// directory, as the member p is.
func (r *run) restoreInto(file string, p *proc) error {
	if err := p.wipe(); err != nil {
		return err
	}
	args := []string{"restore", "--from", file, "--data-dir", p.dir}
	for i, a := range p.args {
		if (a == "--name" || a == "--initial-cluster") && i+1 < len(p.args) {
			args = append(args, a, p.args[i+1])
		}
	}
	if out, err := exec.Command(p.binary, args...).CombinedOutput(); err != nil {
		return fmt.Errorf("restore into %s: %v: %s", p.name, err, out)
	}
	return nil
}

// restoreWhole follows the documented restore under load: the workloads
// are held back until their calls are answered (the cluster's quiet), so
// that the backup is the queue's state when the three stop and nothing
// acknowledged is lost by rewinding; a backup is saved through a
// follower; the three are stopped, emptied, the file restored into one,
// and the three started. The restored queue holds what the backup held
// (leases handed back, which the model allows as lapses) and every token
// it grants is above the backup's fence, which the run checks
// (fenceMark). The workloads go on as it serves.
func restoreWhole(ctx context.Context, r *run, s step) (string, error) {
	r.c.quiet.Lock()
	defer r.c.quiet.Unlock()
	if _, err := r.c.awaitSameApplied(ctx, 30*time.Second); err != nil {
		return "", err
	}
	f, err := r.target(ctx, roleFollower, s.pick)
	if err != nil {
		return "", err
	}
	file, info, err := r.saveBackup(ctx, f, fmt.Sprintf("restore-%d.bak", s.n))
	if err != nil {
		return "", err
	}
	// The fence as the history knows it too: the highest token granted so
	// far, which a backup that records none (or too low a one) would not
	// cover.
	fence := info.Fence.Token
	for _, op := range r.h.Ops() {
		for _, g := range op.Grants {
			fence = max(fence, g.Token)
		}
	}
	for _, p := range r.c.procs {
		if err := p.signal(syscall.SIGTERM, 30*time.Second); err != nil {
			return "", err
		}
	}
	into := r.c.procs[s.pick%3]
	if err := r.restoreInto(file, into); err != nil {
		return "", err
	}
	for _, p := range r.c.procs {
		if p != into {
			if err := p.wipe(); err != nil {
				return "", err
			}
		}
	}
	for _, p := range r.c.procs {
		if err := p.start(); err != nil {
			return "", err
		}
	}
	if err := r.c.awaitHealthy(ctx, 30*time.Second); err != nil {
		return "", fmt.Errorf("the restored queue: %w", err)
	}
	r.mu.Lock()
	r.fences = append(r.fences, fenceMark{at: r.h.Now(), token: fence, what: fmt.Sprintf("step %d", s.n)})
	r.mu.Unlock()
	return fmt.Sprintf("the three stopped and emptied, a backup of %d keys (fence %x, the highest token granted %x) restored into %s, the three started", info.Keys, info.Fence.Token, fence, into.name), nil
}

// restoreIntoMember restores a backup taken now into one member of the
// queue that runs (the misuse of restoring into a live queue, and of
// repeating the restore into one member): that member is one voter of a
// restored queue whose other members never start, and the others refuse
// it, so it must acknowledge nothing while it runs (an Add it
// acknowledged would be lost: the set checker sees it). Then it is
// emptied and started, and rejoins the queue that runs.
func restoreIntoMember(ctx context.Context, r *run, s step) (string, error) {
	l, err := r.c.awaitLeader(ctx, 10*time.Second)
	if err != nil {
		return "", err
	}
	file, _, err := r.saveBackup(ctx, l, fmt.Sprintf("member-%d.bak", s.n))
	if err != nil {
		return "", err
	}
	p := r.c.procs[s.pick%3]
	if err := p.signal(syscall.SIGTERM, 30*time.Second); err != nil {
		return "", err
	}
	if err := r.restoreInto(file, p); err != nil {
		return "", err
	}
	if err := p.start(); err != nil {
		return "", err
	}
	sleepCtx(ctx, 2*time.Second+s.hold)
	p.kill()
	return fmt.Sprintf("a backup restored into %s of the queue that runs, started among the others, then emptied and started again", p.name), p.restartEmptied()
}

// forceBesidePeers starts a follower with --force-new-cluster while its
// two peers run the queue with a leader: it must refuse and exit, its log
// untouched (TestForceNewClusterBesideALiveQueueRefused); one that ran
// would be a queue of its own beside the others, which the run reports.
// Then it starts as itself.
func forceBesidePeers(ctx context.Context, r *run, s step) (string, error) {
	i, err := r.target(ctx, roleFollower, s.pick)
	if err != nil {
		return "", err
	}
	p := r.c.procs[i]
	if err := p.signal(syscall.SIGTERM, 30*time.Second); err != nil {
		return "", err
	}
	p.once = []string{"--force-new-cluster"}
	if err := p.start(); err != nil {
		return "", err
	}
	if !p.waitExit(20 * time.Second) {
		p.kill()
		r.mu.Lock()
		r.extra = append(r.extra, Violation{Checker: "procedures", What: fmt.Sprintf("step %d: %s started with --force-new-cluster beside two members that lead the queue, and ran", s.n, p.name)})
		r.mu.Unlock()
		return "forced " + p.name + " beside its peers: it ran (emptied and restarted)", p.restartEmptied()
	}
	if !p.logContains("--force-new-cluster refused") {
		return "", fmt.Errorf("%s exited with --force-new-cluster beside its peers without saying it refused: %s", p.name, p.lastLog(5))
	}
	return "forced " + p.name + " beside its peers: refused; started as itself", p.start()
}

// moveLeaderRacingSIGTERM asks the leader to hand leadership to a
// follower and SIGTERMs that follower at once, then starts it again.
// Whatever the transfer does, nothing acknowledged may be lost and the
// queue must elect a leader.
func moveLeaderRacingSIGTERM(ctx context.Context, r *run, s step) (string, error) {
	l, err := r.c.awaitLeader(ctx, 10*time.Second)
	if err != nil {
		return "", err
	}
	f := othersThan(l)[s.pick%2]
	p := r.c.procs[f]
	var (
		wg     sync.WaitGroup
		answer string
	)
	wg.Go(func() {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		resp, err := r.c.ccs[l].MoveLeader(cctx, &queuev1.MoveLeaderRequest{To: p.name})
		answer = fmt.Sprintf("%v %v", resp.GetLeaderName(), errString(err))
	})
	if s.bits%2 == 0 {
		time.Sleep(time.Duration(s.bits%50) * time.Millisecond)
	}
	err = p.signal(syscall.SIGTERM, 30*time.Second)
	wg.Wait()
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("move-leader to %s racing its SIGTERM (answered %s); started again", p.name, answer), p.start()
}

// checkFences reports every grant after a restore of the whole queue
// whose token is not above the backup's fence.
func (r *run) checkFences(ops []Op) []Violation {
	var out []Violation
	for _, m := range r.fences {
		for _, op := range ops {
			if op.Call < m.at || op.Outcome != OK {
				continue
			}
			if i := slices.IndexFunc(op.Grants, func(g Grant) bool { return g.Token <= m.token }); i >= 0 {
				out = append(out, Violation{Checker: "fence", What: fmt.Sprintf("after the restore of %s, %s granted %s with token %x, not above the backup's fence %x", m.what, op.Member, op.Grants[i].Key, op.Grants[i].Token, m.token)})
			}
		}
	}
	return out
}
