package announcer

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
	"github.com/batonrun/baton/services/observer/internal/cache"
	"github.com/batonrun/baton/services/observer/internal/checkpoint"
	"github.com/batonrun/baton/services/observer/internal/informer"
	"github.com/batonrun/baton/services/observer/internal/object"
	"github.com/batonrun/baton/services/observer/internal/rules"
)

// sink records every announcement as "queue key PRIORITY".
type sink struct {
	mu  sync.Mutex
	got []string
}

func (s *sink) Put(queue string, keys []string, prio queuev1.Priority, _ time.Time, _ int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range keys {
		s.got = append(s.got, fmt.Sprintf("%s %s %s", queue, k, prio))
	}
	return nil
}

func (s *sink) take() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.got
	s.got = nil
	sort.Strings(out)
	return out
}

var testRules = []rules.Rule{
	{Queue: "pods", Prefix: "/registry/pods/"},
	{Queue: "replicasets", Prefix: "/registry/pods/", OwnerKind: "ReplicaSet"},
	{Queue: "replicasets", Prefix: "/registry/replicasets/"},
}

func owned(rs string) *object.Meta {
	return &object.Meta{Kind: "Pod", Namespace: "a", Owners: []object.OwnerRef{{Kind: "ReplicaSet", Name: rs}}}
}

func TestPriorityAndKeysBySource(t *testing.T) {
	s := &sink{}
	a := New(testRules, cache.New([]string{"/registry/pods/", "/registry/replicasets/"}), s, nil, nil)
	const key = "/registry/pods/a/p"
	for _, tc := range []struct {
		name string
		ch   informer.Change
		want []string
	}{
		{"first list: low", informer.Change{Source: informer.FirstList, Cur: owned("web")},
			[]string{"pods a/p PRIORITY_LOW", "replicasets a/web PRIORITY_LOW"}},
		{"event: normal", informer.Change{Source: informer.Event, Cur: owned("web")},
			[]string{"pods a/p PRIORITY_NORMAL", "replicasets a/web PRIORITY_NORMAL"}},
		{"adoption tells both owners", informer.Change{Source: informer.Event, Cur: owned("new"), Old: owned("web")},
			[]string{"pods a/p PRIORITY_NORMAL", "replicasets a/new PRIORITY_NORMAL", "replicasets a/web PRIORITY_NORMAL"}},
		{"delete: the last owner", informer.Change{Source: informer.Relist, Old: owned("web")},
			[]string{"pods a/p PRIORITY_NORMAL", "replicasets a/web PRIORITY_NORMAL"}},
		{"replayed delete without a value", informer.Change{Source: informer.Replay},
			[]string{"pods a/p PRIORITY_NORMAL"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.ch.Prefix, tc.ch.Key = "/registry/pods/", key
			a.Changed(tc.ch)
			if got := s.take(); !slices.Equal(got, tc.want) {
				t.Errorf("announced %q, want %q", got, tc.want)
			}
		})
	}
}

func TestSetRulesAndBacklog(t *testing.T) {
	s := &sink{}
	c := cache.New([]string{"/registry/pods/", "/registry/replicasets/"})
	c.Put(&cache.Object{Key: "/registry/pods/a/p", Meta: *owned("web")})
	a := New(testRules[:1], c, s, nil, nil)
	added := a.SetRules(testRules)
	if !slices.EqualFunc(added, testRules[1:], rules.Rule.Same) {
		t.Fatalf("SetRules added %v, want %v", added, testRules[1:])
	}
	a.Backlog(added)
	if got, want := s.take(), []string{"replicasets a/web PRIORITY_LOW"}; !slices.Equal(got, want) {
		t.Errorf("backlog of the new rules announced %q, want %q (the old rule's queue is not told again)", got, want)
	}
	a.Resync("/registry/pods/")
	if got, want := s.take(), []string{"pods a/p PRIORITY_LOW", "replicasets a/web PRIORITY_LOW"}; !slices.Equal(got, want) {
		t.Errorf("resync announced %q, want %q", got, want)
	}
	if added := a.SetRules(testRules); len(added) != 0 {
		t.Errorf("the same rules again added %v", added)
	}
}

type records map[string]*checkpoint.Record

func (r records) Record(_ context.Context, prefix string) (*checkpoint.Record, error) {
	if prefix == "/registry/greetings/" {
		return nil, fmt.Errorf("%w: %s", checkpoint.ErrNotRecorded, prefix)
	}
	return r[prefix], nil
}

func TestVanished(t *testing.T) {
	s := &sink{}
	c := cache.New([]string{"/registry/pods/", "/registry/replicasets/"})
	c.Put(&cache.Object{Key: "/registry/pods/a/kept"})
	rec := records{"/registry/pods/": {Keys: []string{"/registry/pods/a/gone", "/registry/pods/a/kept"}, Revision: 5, Checkpoint: 5}}
	a := New(testRules, c, s, rec, nil)
	if err := a.Vanished(t.Context(), "/registry/pods/", 5, 9, nil); err != nil {
		t.Fatal(err)
	}
	// Owners of a vanished key are unknown: only the rule keyed by the
	// object itself announces it.
	if got, want := s.take(), []string{"pods a/gone PRIORITY_NORMAL"}; !slices.Equal(got, want) {
		t.Errorf("announced %q, want %q", got, want)
	}
	if err := a.Vanished(t.Context(), "/registry/replicasets/", 5, 9, nil); err != nil {
		t.Fatal(err)
	}
	if got := s.take(); len(got) != 0 {
		t.Errorf("no record, yet announced %q", got)
	}
	// A prefix the record does not cover (declared since) is listed from
	// scratch: nothing more to announce, and no error to retry.
	a.SetRules(append(slices.Clone(testRules), rules.Rule{Queue: "greetings", Prefix: "/registry/greetings/"}))
	if err := a.Vanished(t.Context(), "/registry/greetings/", 5, 9, nil); err != nil {
		t.Fatal(err)
	}
	if got := s.take(); len(got) != 0 {
		t.Errorf("a prefix the record does not cover announced %q", got)
	}
}

// pod decodes a pod owned by the ReplicaSet rs, as the informer does.
func pod(t *testing.T, rs, label, image, phase string) *object.Meta {
	t.Helper()
	m, err := object.Decode(fmt.Appendf(nil, `{"kind":"Pod","metadata":{"name":"p","namespace":"a","labels":{"l":%q},`+
		`"ownerReferences":[{"kind":"ReplicaSet","name":%q,"uid":"u"}]},"spec":{"image":%q},"status":{"phase":%q}}`, label, rs, image, phase))
	if err != nil {
		t.Fatal(err)
	}
	return &m
}

// TestStatusOnlyChanges: a watch event that changes nothing but a pod's
// status is not announced to the pods queue, whose rule ignores its own
// status changes, but is to the pod's owner and to a queue whose rule does
// not opt out; anything else is announced as before.
func TestStatusOnlyChanges(t *testing.T) {
	s := &sink{}
	rs := []rules.Rule{
		{Queue: "pods", Prefix: "/registry/pods/", IgnoreOwnStatus: true},
		{Queue: "replicasets", Prefix: "/registry/pods/", OwnerKind: "ReplicaSet"},
		{Queue: "audit", Prefix: "/registry/pods/"},
	}
	a := New(rs, cache.New([]string{"/registry/pods/"}), s, nil, nil)
	pending := pod(t, "web", "1", "nginx", "Pending")
	running := pod(t, "web", "1", "nginx", "Running")
	malformed, _ := object.Decode([]byte("not json"))
	all := []string{"audit a/p PRIORITY_NORMAL", "pods a/p PRIORITY_NORMAL", "replicasets a/web PRIORITY_NORMAL"}
	for _, tc := range []struct {
		name string
		ch   informer.Change
		want []string
	}{
		{"status only: not to its own queue", informer.Change{Source: informer.Event, Old: pending, Cur: running},
			[]string{"audit a/p PRIORITY_NORMAL", "replicasets a/web PRIORITY_NORMAL"}},
		{"an identical rewrite", informer.Change{Source: informer.Event, Old: running, Cur: running},
			[]string{"audit a/p PRIORITY_NORMAL", "replicasets a/web PRIORITY_NORMAL"}},
		{"spec", informer.Change{Source: informer.Event, Old: running, Cur: pod(t, "web", "1", "nginx:2", "Running")}, all},
		{"label", informer.Change{Source: informer.Event, Old: running, Cur: pod(t, "web", "2", "nginx", "Running")}, all},
		{"status and owner", informer.Change{Source: informer.Event, Old: pending, Cur: pod(t, "new", "1", "nginx", "Running")},
			[]string{"audit a/p PRIORITY_NORMAL", "pods a/p PRIORITY_NORMAL", "replicasets a/new PRIORITY_NORMAL", "replicasets a/web PRIORITY_NORMAL"}},
		{"create", informer.Change{Source: informer.Event, Cur: running}, all},
		{"delete", informer.Change{Source: informer.Event, Old: running}, all},
		{"from a malformed value", informer.Change{Source: informer.Event, Old: &malformed, Cur: running}, all},
		{"to a malformed value", informer.Change{Source: informer.Event, Old: running, Cur: &malformed},
			[]string{"audit a/p PRIORITY_NORMAL", "pods a/p PRIORITY_NORMAL", "replicasets a/web PRIORITY_NORMAL"}},
		// A relist's difference or a replayed change may stand for several
		// changes: announced whatever it is.
		{"relist", informer.Change{Source: informer.Relist, Old: pending, Cur: running}, all},
		{"replay", informer.Change{Source: informer.Replay, Old: pending, Cur: running}, all},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.ch.Prefix, tc.ch.Key = "/registry/pods/", "/registry/pods/a/p"
			a.Changed(tc.ch)
			if got := s.take(); !slices.Equal(got, tc.want) {
				t.Errorf("announced %q, want %q", got, tc.want)
			}
		})
	}
	if got := a.Skipped(); len(got) != 1 || got["pods"] != 2 {
		t.Errorf("Skipped() = %v, want 2 for pods", got)
	}
}

// TestStatusOnlyChangesResync: a resync or a backlog announces every
// cached object by every rule, whatever its last change was.
func TestStatusOnlyChangesResync(t *testing.T) {
	s := &sink{}
	c := cache.New([]string{"/registry/pods/"})
	c.Put(&cache.Object{Key: "/registry/pods/a/p", Meta: *pod(t, "web", "1", "nginx", "Running")})
	rs := []rules.Rule{{Queue: "pods", Prefix: "/registry/pods/", IgnoreOwnStatus: true}}
	a := New(rs, c, s, nil, nil)
	a.Resync("/registry/pods/")
	a.Backlog(rs)
	if got, want := s.take(), []string{"pods a/p PRIORITY_LOW", "pods a/p PRIORITY_LOW"}; !slices.Equal(got, want) {
		t.Errorf("announced %q, want %q", got, want)
	}
}
