package experiment

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	queueclient "github.com/batonrun/baton/client/queue"
	"github.com/batonrun/baton/test/framework"
)

func TestMain(m *testing.M) { os.Exit(framework.RunTests(m)) }

// rulesFile is the repository's rules file for the experiments.
const rulesFile = "../../rules.yaml"

// readRules returns the text of the repository's rules file.
func readRules(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// startEnv runs what the experiments run against, as users run it: an
// etcd, and the baton-queue, baton-observer (with rules, the text of a
// rules file) and baton-worker (every reference controller) binaries as
// child processes (test/framework: this module links no service's server
// code), until the test ends. It returns the experiments' view of them;
// queue configures the queue.
func startEnv(t *testing.T, rules string, queue framework.QueueOptions) Env {
	t.Helper()
	etcd := framework.StartEtcd(t)
	q := framework.StartQueue(t, queue)
	o := framework.StartObserver(t, framework.ObserverOptions{EtcdEndpoints: etcd.Endpoints(), QueueAddr: q.Addr, Rules: rules})
	framework.StartWorker(t, framework.WorkerOptions{EtcdEndpoints: etcd.Endpoints(), QueueAddr: q.Addr, ObserverAddr: o.Addr})
	return Env{Etcd: etcd.Client, Queue: q.Client, Observer: o.Client, ObserverAddr: o.Addr}
}

// assertClean checks that a run left no object and no queue key behind.
func assertClean(t *testing.T, e Env, queue string) {
	t.Helper()
	for _, p := range Prefixes() {
		resp, err := e.Etcd.Get(t.Context(), p, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			t.Fatal(err)
		}
		if resp.Count != 0 {
			t.Errorf("%d objects left under %s", resp.Count, p)
		}
	}
	st, err := stats(t.Context(), e.Queue, queue)
	if err != nil {
		t.Fatal(err)
	}
	if d := depthOf(st); d.Total() != 0 {
		t.Errorf("queue %s left holding %+v", queue, d)
	}
}

// TestExperiments runs each experiment against one stack whose observer
// has the repository's rules file, and checks the outcome each is meant to
// show.
func TestExperiments(t *testing.T) {
	e := startEnv(t, readRules(t), framework.QueueOptions{})

	t.Run("repeat", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		r, err := Repeat(ctx, e, RepeatOptions{Notifications: 3})
		if err != nil {
			t.Fatal(err)
		}
		if r.Observed != 3 || r.DirectObserved != 3 || r.DirectReconciles != 3 {
			t.Errorf("observed %d and %d notifications, %d direct-reaction reconciles; want 3, 3 and 3", r.DirectObserved, r.Observed, r.DirectReconciles)
		}
		if r.QueueReconciles != 1 || r.QueueLeases != 1 {
			t.Errorf("work queue: %d reconciles, %d leases; want exactly 1 each", r.QueueReconciles, r.QueueLeases)
		}
		if got := r.QueueReconciledSeqs; len(got) != 1 || got[0] != 3 {
			t.Errorf("the work-queue reconcile read change %v, want the latest, [3]", got)
		}
		if got := r.DirectReconciledSeqs; len(got) != 3 || got[0] != 1 || got[2] != 3 {
			t.Errorf("direct reaction reconciled changes %v, want [1 2 3]", got)
		}
		queued, collapsed := 0, 0
		for _, a := range r.Adds {
			queued += a.Queued
			collapsed += a.Collapsed
		}
		if len(r.Adds) != 3 || queued != 1 || collapsed != 2 {
			t.Errorf("adds %+v: want 3 Adds, 1 queued and 2 collapsed", r.Adds)
		}
		if b := r.BeforeWorker; b.Key != r.Key || b.State != "PENDING" || b.Announcements != 3 {
			t.Errorf("item before the worker: %+v, want PENDING with 3 announcements", b)
		}
		if r.Needed != 1 {
			t.Errorf("needed %d", r.Needed)
		}
		assertClean(t, e, QueueRepeat)
	})

	t.Run("repeat refuses a busy queue", func(t *testing.T) {
		if _, err := e.Queue.Add(t.Context(), QueueRepeat, []string{"someone/else"}, queueclient.AddOptions{}); err != nil {
			t.Fatal(err)
		}
		_, err := Repeat(t.Context(), e, RepeatOptions{Notifications: 3})
		if !errors.Is(err, ErrQueueBusy) {
			t.Errorf("Repeat on a busy queue: %v, want ErrQueueBusy", err)
		}
		if _, err := e.Queue.Forget(t.Context(), QueueRepeat, []string{"someone/else"}); err != nil {
			t.Fatal(err)
		}
	})

	burst := []struct {
		name string
		opts BurstOptions
	}{
		{"burst every change a new object", BurstOptions{Discover: 200, Execute: 20, Duration: time.Second}},
		{"burst over 5 objects", BurstOptions{Discover: 200, Execute: 20, Duration: time.Second, Keys: 5}},
	}
	for _, tc := range burst {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			r, err := Burst(ctx, e, tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			want := int(tc.opts.Discover * tc.opts.Duration.Seconds())
			for _, arm := range []BurstArm{r.Direct, r.Baton} {
				if arm.Changes != want {
					t.Errorf("%s: %d changes written, want %d", arm.Architecture, arm.Changes, want)
				}
				// Generous: the machine is shared, so only bound the
				// completions by the execution rate over the window.
				if most := int(arm.WindowSeconds*tc.opts.Execute) + 2; arm.Completed < 1 || arm.Completed > most {
					t.Errorf("%s: %d completed in %.2fs, want 1..%d", arm.Architecture, arm.Completed, arm.WindowSeconds, most)
				}
			}
			d := r.Direct
			if d.Backlog != d.Changes-d.Completed || d.Backlog <= 0 || d.HeldBy != "nobody" || d.Collapsed != 0 {
				t.Errorf("direct reaction: %+v; want backlog = changes − completed > 0, held by nobody, nothing collapsed", d)
			}
			if d.HandlerSaw > d.Completed+1 {
				t.Errorf("direct reaction: the handler saw %d events but completed %d: it should take the next only after reconciling", d.HandlerSaw, d.Completed)
			}
			b := r.Baton
			if b.QueueDepth == nil || int(b.QueueDepth.Total()) != b.Backlog || b.HeldBy != "the queue" {
				t.Fatalf("baton: %+v; want the queue's depth to hold the backlog", b)
			}
			if b.Observed != b.Changes || b.Announced+b.ObserverMerged != b.Observed || b.Queued+b.Collapsed != b.Observed {
				t.Errorf("baton: of %d changes the observer saw %d and announced %d (merged %d); queued %d + collapsed %d", b.Changes, b.Observed, b.Announced, b.ObserverMerged, b.Queued, b.Collapsed)
			}
			if tc.opts.Keys == 0 {
				if b.Backlog != b.Changes-b.Completed || b.Collapsed != 0 || b.Announced != b.Changes {
					t.Errorf("baton: backlog %d, collapsed %d, announced %d; want changes − completed = %d, 0 and every change", b.Backlog, b.Collapsed, b.Announced, b.Changes-b.Completed)
				}
			} else {
				if b.Backlog > tc.opts.Keys || b.Collapsed == 0 {
					t.Errorf("baton over %d objects: backlog %d, collapsed %d; want at most %d and some collapsed", tc.opts.Keys, b.Backlog, b.Collapsed, tc.opts.Keys)
				}
			}
			assertClean(t, e, QueueBurst)
		})
	}

	t.Run("an interrupted burst cleans up", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		timer := time.AfterFunc(1600*time.Millisecond, cancel)
		defer timer.Stop()
		_, err := Burst(ctx, e, BurstOptions{Discover: 200, Execute: 20, Duration: time.Second})
		if err == nil {
			t.Log("the burst finished before it was interrupted (a fast machine); cleanup is checked all the same")
		}
		assertClean(t, e, QueueBurst)
	})

	t.Run("clean removes a killed run's leftovers", func(t *testing.T) {
		for _, k := range []string{Unwatched + "xdead/direct/obj-1", watchOf(QueueBurst).Prefix + "xdead/obj-1"} {
			if _, err := e.Etcd.Put(t.Context(), k, "{}"); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := e.Queue.Add(t.Context(), QueueBurst, []string{"xdead/obj-1", "xdead/obj-2"}, queueclient.AddOptions{}); err != nil {
			t.Fatal(err)
		}
		c, err := Clean(t.Context(), e)
		if err != nil {
			t.Fatal(err)
		}
		if c.Objects != 2 || c.ObjectsUnder[Unwatched] != 1 || c.Keys[QueueBurst] != 2 {
			t.Errorf("cleaned %+v, want 2 objects (1 unwatched) and 2 keys of %s", c, QueueBurst)
		}
		assertClean(t, e, QueueBurst)
	})

	t.Run("failure", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		r, err := Failure(ctx, e, FailureOptions{Replicas: 3, Failures: 2})
		if err != nil {
			t.Fatal(err)
		}
		if r.Baton.Pods != 3 {
			t.Errorf("baton ended with %d pods, want 3", r.Baton.Pods)
		}
		if r.Direct.Pods >= 3 || r.Direct.Attempts != 1 || !strings.Contains(r.Direct.Error, "write refused") {
			t.Errorf("direct reaction: %+v; want one attempt, fewer than 3 pods and the refused write", r.Direct)
		}
		if r.Baton.Attempts != 3 || len(r.Baton.Steps) != 3 {
			t.Fatalf("baton: %d attempts, steps %+v; want 3", r.Baton.Attempts, r.Baton.Steps)
		}
		for i, s := range r.Baton.Steps {
			if s.Item.Key != r.Key || s.Item.State != "LEASED" || int(s.Item.Attempts) != i {
				t.Errorf("attempt %d: Inspect said %+v, want LEASED with %d attempts", i+1, s.Item, i)
			}
			if i > 0 && !strings.Contains(s.Item.LastError, "write refused") {
				t.Errorf("attempt %d: last_error %q, want the previous attempt's refused write", i+1, s.Item.LastError)
			}
			if s.PodsAfter != s.PodsBefore+1 {
				t.Errorf("attempt %d: pods %d → %d, want one more", i+1, s.PodsBefore, s.PodsAfter)
			}
		}
		if r.Baton.Final == nil || r.Baton.Final.Key != r.Key || r.Baton.Final.State != "ABSENT" {
			t.Errorf("final item %+v, want ABSENT", r.Baton.Final)
		}
		assertClean(t, e, QueueFailure)
	})
}

// TestWithoutRulesAndParked runs against an observer whose rules lack the
// repeat experiment's, and a queue that parks keys after two failures:
// Repeat refuses to start and says how to add the rule, and Failure, with
// more failures than the queue allows, stops with the reason and still
// cleans up.
func TestWithoutRulesAndParked(t *testing.T) {
	rules := "builtin: true\nrules:\n  - queue: experiment-failure\n    prefix: /registry/experiment-failure/\n"
	e := startEnv(t, rules, framework.QueueOptions{MaxAttempts: 2})
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()

	_, err := Repeat(ctx, e, RepeatOptions{Notifications: 3})
	if !errors.Is(err, ErrNoRule) || !strings.Contains(err.Error(), "/registry/experiment-repeat/ to queue experiment-repeat") ||
		!strings.Contains(err.Error(), "--rules "+RulesFile) || !strings.Contains(err.Error(), e.ObserverAddr) {
		t.Errorf("Repeat without its rule: %v, want ErrNoRule naming the rule, the observer and the rules file", err)
	}

	_, err = Failure(ctx, e, FailureOptions{Replicas: 3, Failures: 2})
	if err == nil || !strings.Contains(err.Error(), "parked") || !strings.Contains(err.Error(), "--max-attempts") {
		t.Errorf("Failure on a queue with --max-attempts 2: %v, want the parked key explained", err)
	}
	assertClean(t, e, QueueFailure)
}

// TestRulesFile checks that the shipped rules file names exactly the
// experiments' Watches and keeps the built-in rules.
func TestRulesFile(t *testing.T) {
	text := readRules(t)
	if !strings.Contains(text, "\nbuiltin: true\n") {
		t.Errorf("%s does not keep the built-in rules (builtin: true)", rulesFile)
	}
	for _, w := range Watches() {
		if !strings.Contains(text, "  - queue: "+w.Queue+"\n    prefix: "+w.Prefix+"\n") {
			t.Errorf("%s lacks the rule %s → %s", rulesFile, w.Prefix, w.Queue)
		}
	}
	if n := strings.Count(text, "- queue:"); n != len(Watches()) {
		t.Errorf("%s has %d rules, want %d", rulesFile, n, len(Watches()))
	}
}

func TestOptionsValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"burst rate", BurstOptions{Discover: 0, Execute: 1, Duration: time.Second}.Validate(), "discover"},
		{"burst execute", BurstOptions{Discover: 1, Execute: -1, Duration: time.Second}.Validate(), "execute"},
		{"burst duration", BurstOptions{Discover: 1, Execute: 1}.Validate(), "duration"},
		{"burst size", BurstOptions{Discover: 1e5, Execute: 1, Duration: 2 * time.Second}.Validate(), "100,000"},
		{"repeat", RepeatOptions{}.Validate(), "notifications"},
		{"failure replicas", FailureOptions{Replicas: 1, Failures: 1}.Validate(), "replicas"},
		{"failure failures", FailureOptions{Replicas: 3, Failures: 3}.Validate(), "failures"},
	} {
		if tc.err == nil || !strings.Contains(tc.err.Error(), tc.want) {
			t.Errorf("%s: %v, want an error naming %q", tc.name, tc.err, tc.want)
		}
	}
	if err := (BurstOptions{Discover: 1000, Execute: 10, Duration: time.Second}).Validate(); err != nil {
		t.Errorf("default burst: %v", err)
	}
}
