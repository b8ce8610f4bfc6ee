package informer_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
	"github.com/batonrun/baton/services/etcdembed"
	"github.com/batonrun/baton/services/observer/internal/announcer"
	"github.com/batonrun/baton/services/observer/internal/cache"
	"github.com/batonrun/baton/services/observer/internal/informer"
	"github.com/batonrun/baton/services/observer/internal/rules"
	"github.com/batonrun/baton/services/observer/internal/watchmux"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// sink records every announcement as "queue key".
type sink struct {
	mu  sync.Mutex
	got []string
}

func (s *sink) Put(queue string, keys []string, _ queuev1.Priority, _ time.Time, _ int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, k := range keys {
		s.got = append(s.got, queue+" "+k)
	}
	return nil
}

func (s *sink) take() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := s.got
	s.got = nil
	slices.Sort(out)
	return out
}

// TestStatusOnlyWatchEvents: through etcd, the informer and the cache, a
// write that changes nothing but a pod's status reaches the pod's owner
// and a queue that does not opt out, not the pods queue, whose rule
// ignores its own status changes; a create, a spec or label change, a
// write of a malformed value and a delete reach every queue.
func TestStatusOnlyWatchEvents(t *testing.T) {
	srv := etcdembed.StartForTest(t)
	cli, err := clientv3.New(clientv3.Config{Endpoints: srv.Endpoints(), Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	const prefix, key = "/registry/pods/", "/registry/pods/a/p"
	c := cache.New([]string{prefix})
	s := &sink{}
	a := announcer.New([]rules.Rule{
		{Queue: "pods", Prefix: prefix, IgnoreOwnStatus: true},
		{Queue: "replicasets", Prefix: prefix, OwnerKind: "ReplicaSet"},
		{Queue: "audit", Prefix: prefix},
	}, c, s, nil, nil)
	mux := watchmux.New(cli, watchmux.Options{})
	defer mux.Close()
	in := informer.New(mux, prefix, c, nil, a, informer.Options{})
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan struct{})
	go func() { defer close(done); _ = in.Run(ctx) }()
	defer func() { cancel(); <-done }()
	select {
	case <-in.ListedC():
	case <-time.After(30 * time.Second):
		t.Fatal("the informer did not list")
	}

	pod := func(label, image, phase string) string {
		return fmt.Sprintf(`{"kind":"Pod","metadata":{"name":"p","namespace":"a","labels":{"l":%q},`+
			`"ownerReferences":[{"kind":"ReplicaSet","name":"web","uid":"u"}]},"spec":{"image":%q},"status":{"phase":%q}}`, label, image, phase)
	}
	all := []string{"audit a/p", "pods a/p", "replicasets a/web"}
	notOwn := []string{"audit a/p", "replicasets a/web"}
	for _, step := range []struct {
		name, value string // value "" deletes
		want        []string
	}{
		{"create", pod("1", "nginx", "Pending"), all},
		{"status only", pod("1", "nginx", "Running"), notOwn},
		{"status only, re-encoded", "{ " + pod("1", "nginx", "Succeeded")[1:], notOwn},
		{"spec", pod("1", "nginx:2", "Succeeded"), all},
		{"label", pod("2", "nginx:2", "Succeeded"), all},
		{"identical", pod("2", "nginx:2", "Succeeded"), notOwn},
		{"malformed", `{"kind":"Pod","metadata":{"ownerReferences":"web"}}`, []string{"audit a/p", "pods a/p", "replicasets a/web"}},
		{"from malformed", pod("2", "nginx:2", "Succeeded"), all},
		{"delete", "", all},
	} {
		var rev int64
		if step.value == "" {
			resp, err := cli.Delete(t.Context(), key)
			if err != nil {
				t.Fatal(err)
			}
			rev = resp.Header.Revision
		} else {
			resp, err := cli.Put(t.Context(), key, step.value)
			if err != nil {
				t.Fatal(err)
			}
			rev = resp.Header.Revision
		}
		// The change is handed on before the observed revision passes it.
		deadline := time.Now().Add(30 * time.Second)
		for in.Stats().ObservedRevision < rev {
			if time.Now().After(deadline) {
				t.Fatalf("%s: the informer did not observe revision %d", step.name, rev)
			}
			time.Sleep(5 * time.Millisecond)
		}
		if got := s.take(); !slices.Equal(got, step.want) {
			t.Errorf("%s: announced %q, want %q", step.name, got, step.want)
		}
	}
	if got := a.Skipped()["pods"]; got != 3 {
		t.Errorf("Skipped()[pods] = %d, want 3", got)
	}
}
