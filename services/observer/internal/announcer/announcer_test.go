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
