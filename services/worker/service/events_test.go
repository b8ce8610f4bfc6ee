package service_test

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/batonrun/baton/client/kinds"
	"github.com/batonrun/baton/sdk/events"
	"github.com/batonrun/baton/sdk/objects"
	"github.com/batonrun/baton/test/framework"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// storedEvent is one Event in etcd, with its lease.
type storedEvent struct {
	events.Event
	lease clientv3.LeaseID
}

// eventsAbout returns the Events in etcd about kind/name in default, by
// message.
func (s *stack) eventsAbout(kind, name string) map[string]storedEvent {
	s.t.Helper()
	resp, err := s.cli.Get(s.t.Context(), kinds.EventKind().NamespacePrefix("default"), clientv3.WithPrefix())
	if err != nil {
		s.t.Fatal(err)
	}
	out := map[string]storedEvent{}
	for _, kv := range resp.Kvs {
		var ev events.Event
		if err := json.Unmarshal(kv.Value, &ev); err != nil {
			s.t.Fatalf("%s: %v", kv.Key, err)
		}
		if ev.InvolvedObject.Kind == kind && ev.InvolvedObject.Name == name {
			out[ev.Message] = storedEvent{ev, clientv3.LeaseID(kv.Lease)}
		}
	}
	return out
}

// hasEvent reports whether evs holds an event of reason and type with
// message, recorded by component, about an object of uid.
func hasEvent(evs map[string]storedEvent, typ, reason, message, component, uid string) bool {
	ev, ok := evs[message]
	return ok && ev.Type == typ && ev.Reason == reason && ev.Source.Component == component &&
		ev.InvolvedObject.UID == uid && ev.Count >= 1 && ev.lease != 0
}

// TestEventsEndToEnd: the reference controllers record Kubernetes' events
// about what they do, through the worker's recorder, and batonctl shows
// them: get events, and describe's Events section.
func TestEventsEndToEnd(t *testing.T) {
	s := startStack(t)
	w := s.startWorker(s.workerConfig())

	s.apply("replicasets", "web", map[string]any{"kind": "ReplicaSet", "spec": map[string]any{"replicas": 3, "template": tpl("nginx", 0, 0)}})
	s.apply("statefulsets", "db", map[string]any{"kind": "StatefulSet", "spec": map[string]any{"replicas": 2, "template": tpl("pg", 0, 0)}})
	s.apply("deployments", "api", map[string]any{"kind": "Deployment", "spec": map[string]any{"replicas": 2, "template": tpl("api:1", 0, 0)}})
	s.apply("jobs", "ok", map[string]any{"kind": "Job", "spec": map[string]any{"template": tpl("busybox", 0.1, 0)}})
	s.apply("jobs", "bad", map[string]any{"kind": "Job", "spec": map[string]any{"backoffLimit": 0, "template": tpl("busybox", 0.1, 1)}})
	s.apply("replicasets", "big", map[string]any{"kind": "ReplicaSet", "spec": map[string]any{"replicas": 12, "template": tpl("nginx", 0, 0)}})

	rsUID := get[objects.ReplicaSet](s, "replicasets", "web").Metadata.UID
	var created []string
	waitFor(t, converge, "a SuccessfulCreate of the ReplicaSet for each of its 3 pods", func() bool {
		pods := s.pods("ReplicaSet", "web")
		evs := s.eventsAbout("ReplicaSet", "web")
		created = created[:0]
		for name := range pods {
			if !hasEvent(evs, events.Normal, "SuccessfulCreate", "Created pod: "+name, "replicaset-controller", rsUID) {
				return false
			}
			created = append(created, name)
		}
		return len(pods) == 3
	})
	s.apply("replicasets", "web", map[string]any{"kind": "ReplicaSet", "spec": map[string]any{"replicas": 1, "template": tpl("nginx", 0, 0)}})
	waitFor(t, converge, "a SuccessfulDelete for each of the 2 pods scaled away", func() bool {
		pods := s.pods("ReplicaSet", "web")
		evs := s.eventsAbout("ReplicaSet", "web")
		deleted := 0
		for _, name := range created {
			if _, kept := pods[name]; !kept && hasEvent(evs, events.Normal, "SuccessfulDelete", "Deleted pod: "+name, "replicaset-controller", rsUID) {
				deleted++
			}
		}
		return len(pods) == 1 && deleted == 2
	})

	stsUID := get[objects.StatefulSet](s, "statefulsets", "db").Metadata.UID
	waitFor(t, converge, "the StatefulSet's creates of db-0 and db-1", func() bool {
		evs := s.eventsAbout("StatefulSet", "db")
		return hasEvent(evs, events.Normal, "SuccessfulCreate", "create Pod db-0 in StatefulSet db successful", "statefulset-controller", stsUID) &&
			hasEvent(evs, events.Normal, "SuccessfulCreate", "create Pod db-1 in StatefulSet db successful", "statefulset-controller", stsUID)
	})
	depUID := get[objects.Deployment](s, "deployments", "api").Metadata.UID
	waitFor(t, converge, "the Deployment's ScalingReplicaSet", func() bool {
		d := get[objects.Deployment](s, "deployments", "api")
		evs := s.eventsAbout("Deployment", "api")
		for msg, ev := range evs {
			if strings.HasPrefix(msg, "Scaled up replica set api-") && strings.HasSuffix(msg, " from 0 to 2") &&
				hasEvent(evs, events.Normal, "ScalingReplicaSet", msg, "deployment-controller", depUID) {
				return d.Status.ReadyReplicas == 2 && ev.Count == 1
			}
		}
		return false
	})
	okUID, badUID := get[objects.Job](s, "jobs", "ok").Metadata.UID, get[objects.Job](s, "jobs", "bad").Metadata.UID
	waitFor(t, converge, "the Jobs' Completed and BackoffLimitExceeded", func() bool {
		return hasEvent(s.eventsAbout("Job", "ok"), events.Normal, "Completed", "Job completed", "job-controller", okUID) &&
			hasEvent(s.eventsAbout("Job", "bad"), events.Warning, "BackoffLimitExceeded", "Job has reached the specified backoff limit", "job-controller", badUID)
	})
	for _, job := range []string{"ok", "bad"} {
		for name := range s.pods("Job", job) {
			if !hasEvent(s.eventsAbout("Job", job), events.Normal, "SuccessfulCreate", "Created pod: "+name, "job-controller", map[string]string{"ok": okUID, "bad": badUID}[job]) {
				t.Errorf("no SuccessfulCreate of job %s for its pod %s", job, name)
			}
		}
	}
	if v := w.metric(t, `baton_worker_events_written_total{op="create"}`); v == "" || v == "0" {
		t.Errorf("events created, by the metric: %q", v)
	}
	if v := w.metric(t, `baton_worker_events_dropped_total{reason="write_failed"}`); v != "0" {
		t.Errorf("events not written, by the metric: %q; want 0", v)
	}

	// batonctl shows them, as kubectl would.
	batonctl := func(args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(t.Context(), framework.Binary(t, "batonctl"),
			append([]string{"--etcd-endpoints", strings.Join(s.etcd.Endpoints(), ","), "--queue-addr", s.queueAddr}, args...)...)
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			t.Fatalf("batonctl %s: %v\n%s%s", strings.Join(args, " "), err, out.String(), errb.String())
		}
		return out.String()
	}
	list := batonctl("get", "events")
	for _, name := range created {
		if !hasLine(list, "Normal", "SuccessfulCreate", "replicaset/web", "Created", "pod:", name) {
			t.Errorf("get events lacks the creation of %s:\n%s", name, list)
		}
	}
	if !hasLine(list, "Warning", "BackoffLimitExceeded", "job/bad") {
		t.Errorf("get events lacks the failed Job:\n%s", list)
	}
	d := batonctl("describe", "rs", "web")
	_, section, _ := strings.Cut(d, "\nEvents:\n")
	for _, name := range created {
		if !hasLine(section, "Normal", "SuccessfulCreate") || !hasLine(section, "replicaset-controller", "Created", "pod:", name) {
			t.Errorf("describe rs web lacks the creation of %s:\n%s", name, d)
		}
	}
	if strings.Contains(section, "StatefulSet") || strings.Contains(section, "Job") || strings.Contains(section, "big-") {
		t.Errorf("describe rs web shows other objects' events:\n%s", d)
	}
	// A ReplicaSet of 12 pods: 9 events of one pod each, then one event
	// combining the other 3, with its count.
	waitFor(t, converge, "the 12 pods of big", func() bool { return len(s.pods("ReplicaSet", "big")) == 12 })
	waitFor(t, converge, "big's creations recorded", func() bool {
		n := 0
		for _, ev := range s.eventsAbout("ReplicaSet", "big") {
			n += ev.Count
		}
		return n == 12
	})
	d = batonctl("describe", "rs", "big")
	_, section, _ = strings.Cut(d, "\nEvents:\n")
	if !hasLine(section, "(x3") || !hasLine(section, "replicaset-controller", "(combined", "from", "similar", "events):", "Created", "pod:") ||
		strings.Count(section, "SuccessfulCreate") != 10 {
		t.Errorf("describe rs big: want 9 creations of a pod each and one combined, counted 3 times:\n%s", d)
	}
}

// hasLine reports whether out has a line holding cells, in order, as
// whitespace-separated words (the first cells may be preceded by others,
// such as LAST SEEN's).
func hasLine(out string, cells ...string) bool {
	for line := range strings.SplitSeq(out, "\n") {
		f := strings.Fields(line)
		for i := range f {
			if len(f)-i >= len(cells) && slices.Equal(f[i:i+len(cells)], cells) {
				return true
			}
		}
	}
	return false
}
