package service_test

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
	"github.com/batonrun/baton/services/observer/service"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// fastRecord lets a test see the known-key record written quickly.
func fastRecord(c *service.Config) { c.RecordInterval = 200 * time.Millisecond }

// waitRecord waits until the checkpoint is at least rev and the known-key
// record stored beside it is valid at it, and returns the checkpoint.
func waitRecord(t testing.TB, cli *clientv3.Client, rev int64) int64 {
	t.Helper()
	var c int64
	waitFor(t, 30*time.Second, fmt.Sprintf("checkpoint and known-key record at %d or later", rev), func() (bool, string) {
		tr, err := cli.Txn(t.Context()).Then(clientv3.OpGet(service.CheckpointKey), clientv3.OpGet(service.RecordKey)).Commit()
		if err != nil {
			return false, err.Error()
		}
		ck, mk := tr.Responses[0].GetResponseRange().GetKvs(), tr.Responses[1].GetResponseRange().GetKvs()
		if len(ck) == 0 || len(mk) == 0 {
			return false, fmt.Sprintf("%d checkpoint, %d record", len(ck), len(mk))
		}
		c, err = strconv.ParseInt(string(ck[0].Value), 10, 64)
		if err != nil {
			return false, err.Error()
		}
		var m struct{ Checkpoint int64 }
		if err := json.Unmarshal(mk[0].Value, &m); err != nil {
			return false, err.Error()
		}
		return c >= rev && m.Checkpoint == c, fmt.Sprintf("checkpoint %d, record at %d", c, m.Checkpoint)
	})
	return c
}

// lastChange returns the mod revision of the last object written under
// /registry/ (the checkpoint stops there while etcd is idle; etcd's own
// revision goes on with the observer's checkpoint writes).
func lastChange(t testing.TB, cli *clientv3.Client) int64 {
	t.Helper()
	resp, err := cli.Get(t.Context(), "/registry/", clientv3.WithPrefix(), clientv3.WithKeysOnly(),
		clientv3.WithSort(clientv3.SortByModRevision, clientv3.SortDescend), clientv3.WithLimit(1))
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) == 0 {
		return 0
	}
	return resp.Kvs[0].ModRevision
}

// deletedPods returns the pods queue keys of the deletes among ops.
func deletedPods(ops []op) []string {
	var out []string
	for _, o := range ops {
		if o.value == "" {
			out = append(out, o.expect["pods"]...)
		}
	}
	return out
}

func checkPriority(t testing.TB, q *queueProc, queue string, keys []string, want queuev1.Priority) {
	t.Helper()
	for _, k := range keys {
		item, err := q.client.Inspect(t.Context(), queue, k)
		if err != nil {
			t.Errorf("Inspect %s %s: %v", queue, k, err)
			continue
		}
		if item.GetPriority() != want {
			t.Errorf("%s %s announced at %v, want %v", queue, k, item.GetPriority(), want)
		}
	}
}

// Pods are deleted while no observer runs and etcd compacts that history:
// the replay from the checkpoint is impossible, and the restarted observer
// announces every deleted pod from the known-key record stored beside the
// checkpoint.
func TestDeletesWhileDownAndCompactedAreAnnouncedAfterRestart(t *testing.T) {
	srv, cli := etcdWithClient(t)
	q := startQueue(t)
	o := startObserver(t, srv.Endpoints(), q.addr, fastRecord)
	w := setup(t, o, cli, q, "down")
	waitRecord(t, cli, lastChange(t, cli))
	o.stop()

	ops := w.churn(60)
	w.applyAll(t, cli, ops)
	deleted := deletedPods(ops)
	if len(deleted) == 0 {
		t.Fatal("the churn deleted nothing")
	}
	if _, err := cli.Compact(t.Context(), headRevision(t, cli), clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}

	logs := newLogCapture(t)
	o2 := startObserverLog(t, srv.Endpoints(), q.addr, fastRecord, logs.logger())
	settle(t, o2, cli)
	w.checkQueue(t, q)
	checkPriority(t, q, "pods", deleted, queuev1.Priority_PRIORITY_NORMAL)
	checkCache(t, o2, cli)
	rec := logs.waitLog(t, 10*time.Second, slog.LevelInfo, "announced as deleted every key of the known-key record", map[string]string{"prefix": "/registry/pods/"})
	if rec.Attrs["deleted"] != fmt.Sprint(len(deleted)) {
		t.Errorf("record deletes logged as %s, want %d: %v", rec.Attrs["deleted"], len(deleted), rec)
	}
	if got := logs.find(slog.LevelWarn, "not announced", nil); len(got) > 0 {
		t.Errorf("warned that deletes are not announced: %v", got)
	}
	// The new observer writes its own record once it has delivered.
	waitRecord(t, cli, lastChange(t, cli))
}

// The observer is cut off from etcd while pods are deleted and its revision
// is compacted away: its relist finds the deletes by diffing with its cache
// and announces each, with its owner.
func TestDeletesAcrossRelistAfterCompactionAreAnnounced(t *testing.T) {
	srv, cli := etcdWithClient(t)
	p := startProxy(t, strings.TrimPrefix(srv.Endpoints()[0], "http://"))
	q := startQueue(t)
	o := startObserver(t, []string{"http://" + p.addr()}, q.addr, nil)
	w := setup(t, o, cli, q, "relist-deletes")
	before := prefixStatus(t, o, "/registry/pods/")

	p.cut(true)
	var ops []op
	for _, name := range sortedPods(w)[:25] {
		ops = append(ops, op{key: "/registry/pods/" + w.ns + "/" + name,
			expect: map[string][]string{"pods": {w.ns + "/" + name}, "replicasets": {w.ns + "/" + w.pods[name]}}})
		delete(w.pods, name)
	}
	w.applyAll(t, cli, ops)
	if _, err := cli.Compact(t.Context(), headRevision(t, cli), clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	p.cut(false)

	settle(t, o, cli)
	w.checkQueue(t, q)
	checkPriority(t, q, "pods", deletedPods(ops), queuev1.Priority_PRIORITY_NORMAL)
	checkCache(t, o, cli)
	if after := prefixStatus(t, o, "/registry/pods/"); after.GetRelistsTotal() <= before.GetRelistsTotal() {
		t.Errorf("relists_total %d → %d, want a relist after compaction", before.GetRelistsTotal(), after.GetRelistsTotal())
	}
}

func sortedPods(w *world) []string {
	var names []string
	for n := range w.pods {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// An upgrade: a checkpoint written by an observer that kept no record, and
// history since compacted. The observer starts, says what it cannot know,
// and writes its record.
func TestStartsWithACheckpointButNoRecord(t *testing.T) {
	srv, cli := etcdWithClient(t)
	q := startQueue(t)
	for i := range 5 {
		if _, err := cli.Put(t.Context(), fmt.Sprintf("/registry/pods/up/p%d", i), podValue("up", fmt.Sprintf("p%d", i), "", "")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := cli.Put(t.Context(), service.CheckpointKey, fmt.Sprintf("%020d", headRevision(t, cli))); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Delete(t.Context(), "/registry/pods/up/p0"); err != nil {
		t.Fatal(err)
	}
	if _, err := cli.Compact(t.Context(), headRevision(t, cli), clientv3.WithCompactPhysical()); err != nil {
		t.Fatal(err)
	}
	logs := newLogCapture(t)
	o := startObserverLog(t, srv.Endpoints(), q.addr, fastRecord, logs.logger())
	waitFor(t, 30*time.Second, "observer to be ready", func() (bool, string) {
		err := probeReady(t.Context(), o.httpAddr)
		return err == nil, fmt.Sprint(err)
	})
	logs.waitLog(t, 10*time.Second, slog.LevelWarn, "no usable known-key record is stored", map[string]string{"prefix": "/registry/pods/", "checkpoint": "*"})
	settle(t, o, cli)
	waitRecord(t, cli, lastChange(t, cli))
}

// Pods are created without pause: every creation makes the stored record
// stale, yet records are written at most once per RecordInterval, and the
// checkpoint still moves on.
func TestRecordWritesAreRateLimited(t *testing.T) {
	srv, cli := etcdWithClient(t)
	q := startQueue(t)
	const interval = time.Second
	o := startObserver(t, srv.Endpoints(), q.addr, func(c *service.Config) { c.RecordInterval = interval })
	settle(t, o, cli)
	first := waitRecord(t, cli, lastChange(t, cli))
	writes := func() float64 {
		return scrape(t, o.httpAddr, "baton_observer_record_writes_total")[""]
	}
	start, before := time.Now(), writes()
	for i := 0; time.Since(start) < 3*time.Second; i++ {
		name := fmt.Sprintf("p%05d", i)
		if _, err := cli.Put(t.Context(), "/registry/pods/busy/"+name, podValue("busy", name, "", "")); err != nil {
			t.Fatal(err)
		}
	}
	elapsed, n := time.Since(start), writes()-before
	if limit := float64(elapsed/interval) + 1; n > limit {
		t.Errorf("%v records written in %v of constant creation, want at most %v (one a second)", n, elapsed.Round(time.Millisecond), limit)
	}
	if n == 0 {
		t.Error("no record written while pods were created")
	}
	if c := waitRecord(t, cli, lastChange(t, cli)); c <= first {
		t.Errorf("checkpoint %d did not move past %d", c, first)
	}
}
