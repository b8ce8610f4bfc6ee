package service_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/batonrun/baton/services/queue/client"
	"github.com/batonrun/baton/services/worker/objects"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// startObserver stands in for the observer until its service package lands:
// it watches /registry/ and announces keys to the queues by DESIGN's rules
// (an object to its own queue; a child to its owner's queue). It returns ""
// as the observer address, so workers read etcd directly.
func startObserver(t *testing.T, s *stack) string {
	t.Helper()
	ownerQueue := map[string]string{
		objects.KindReplicaSet: "replicasets", objects.KindJob: "jobs",
		objects.KindStatefulSet: "statefulsets", objects.KindDeployment: "deployments",
	}
	runBackground(t, "announcer", func(ctx context.Context) error {
		for wr := range s.cli.Watch(ctx, "/registry/", clientv3.WithPrefix(), clientv3.WithPrevKV()) {
			adds := map[string][]string{}
			for _, ev := range wr.Events {
				parts := strings.Split(string(ev.Kv.Key), "/") // "", registry, resource, ns, name
				if len(parts) != 5 {
					continue
				}
				res, key := parts[2], parts[3]+"/"+parts[4]
				adds[res] = append(adds[res], key)
				val := ev.Kv.Value
				if ev.Type == clientv3.EventTypeDelete && ev.PrevKv != nil {
					val = ev.PrevKv.Value
				}
				var o struct {
					Metadata objects.ObjectMeta `json:"metadata"`
				}
				if json.Unmarshal(val, &o) == nil {
					for _, ref := range o.Metadata.OwnerReferences {
						if q := ownerQueue[ref.Kind]; q != "" {
							adds[q] = append(adds[q], parts[3]+"/"+ref.Name)
						}
					}
				}
			}
			for q, keys := range adds {
				if _, err := s.queue.Add(ctx, q, keys, client.AddOptions{Source: "test-announcer"}); err != nil && ctx.Err() == nil {
					t.Errorf("announce: %v", err)
				}
			}
		}
		return nil
	})
	return ""
}
