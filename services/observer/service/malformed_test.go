package service_test

import (
	"bufio"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	observerv1 "github.com/batonrun/baton/proto/baton/observer/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// scrape returns the value of every sample of metric on the observer's
// /metrics, by its label set as Prometheus writes it ({a="x",b="y"}; ""
// for none).
func scrape(t testing.TB, httpAddr, metric string) map[string]float64 {
	t.Helper()
	resp, err := httpClient.Get("http://" + httpAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		var labels, value string
		if rest, ok := strings.CutPrefix(line, metric+"{"); ok {
			if labels, value, ok = strings.Cut(rest, "} "); !ok {
				continue
			}
			labels = "{" + labels + "}"
		} else if value, ok = strings.CutPrefix(line, metric+" "); !ok {
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		out[labels] = v
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// Malformed objects, written before the observer starts (its first list
// sees them) and while it watches: each is logged once at WARN with its key
// and reason and counted by reason; a key whose path does not fit the
// layout is not cached and announces nothing; a malformed value is cached
// and announced by its own key only (no owner keys).
func TestMalformedObjectsAreLoggedCountedAndBadPathsAnnounceNothing(t *testing.T) {
	srv, cli := etcdWithClient(t)
	q := startQueue(t)
	type malformed struct {
		key, value, reason string
		announce           string // the pods queue key, "" for none
	}
	cases := func(ns string) []malformed {
		owned := func(valueNS, name string) string { return podValue(valueNS, name, "rs1", "") }
		return []malformed{
			{"/registry/pods/" + ns + "/empty", "", "empty", ns + "/empty"},
			{"/registry/pods/" + ns + "/proto", "k8s\x00\n\x0b\n\x02v1\x12\x03Pod\x12\x00", "protobuf", ns + "/proto"},
			{"/registry/pods/" + ns + "/invalid", `{"kind":"Pod","metadata":{"name":`, "invalid_json", ns + "/invalid"},
			{"/registry/pods/" + ns + "/array", "[" + owned(ns, "array") + "]", "not_object", ns + "/array"},
			{"/registry/pods/" + ns + "/elsewhere", owned("other", "elsewhere"), "namespace_mismatch", ns + "/elsewhere"},
			{"/registry/pods/" + ns + "/deep/er", owned(ns, "er"), "bad_path", ""},
			{"/registry/pods/" + ns + "/", owned(ns, ""), "bad_path", ""},
			{"/registry/pods//" + ns, owned("", ns), "bad_path", ""},
		}
	}
	put := func(ms []malformed) {
		for _, m := range ms {
			if _, err := cli.Put(t.Context(), m.key, m.value); err != nil {
				t.Fatal(err)
			}
		}
	}
	listed, watched := cases("mal-list"), cases("mal-watch")
	put(listed)

	logs := newLogCapture(t)
	o := startObserverLog(t, srv.Endpoints(), q.addr, nil, logs.logger())
	settle(t, o, cli)
	put(watched)
	// The same bad keys written again are counted again, not logged again.
	put(watched)
	settle(t, o, cli)

	all := append(slices.Clone(listed), watched...)
	wantCount := map[string]float64{}
	wantPods := map[string]bool{}
	for _, m := range all {
		recs := logs.find(slog.LevelWarn, "malformed object", map[string]string{"key": m.key, "reason": m.reason})
		if len(recs) != 1 {
			t.Errorf("%q (%s): %d WARN lines, want 1", m.key, m.reason, len(recs))
		}
		wantCount[fmt.Sprintf(`{prefix="/registry/pods/",reason="%s"}`, m.reason)] += 1
		if m.announce != "" {
			wantPods[m.announce] = true
		}
	}
	for _, m := range watched {
		wantCount[fmt.Sprintf(`{prefix="/registry/pods/",reason="%s"}`, m.reason)] += 1 // written twice
	}
	got := scrape(t, o.httpAddr, "baton_observer_malformed_objects_total")
	for labels, want := range wantCount {
		if got[labels] != want {
			t.Errorf("baton_observer_malformed_objects_total%s = %v, want %v", labels, got[labels], want)
		}
	}
	if v, ok := got[`{prefix="/registry/replicasets/",reason="bad_path"}`]; !ok || v != 0 {
		t.Errorf("replicasets prefix bad_path = %v (exported %v), want 0, exported", v, ok)
	}

	// The queues: each malformed value's own key, nothing for a bad path,
	// no owner key from any of them (every one names ReplicaSet rs1).
	pods, err := q.keys(t.Context(), "pods")
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(pods, wantPods) {
		t.Errorf("queue pods holds %v, want %v", slices.Sorted(maps.Keys(pods)), slices.Sorted(maps.Keys(wantPods)))
	}
	if rss, err := q.keys(t.Context(), "replicasets"); err != nil && !strings.Contains(err.Error(), "NotFound") {
		t.Fatal(err)
	} else if len(rss) != 0 {
		t.Errorf("queue replicasets holds %v, want nothing (no owner keys from malformed objects)", slices.Sorted(maps.Keys(rss)))
	}

	// The cache holds the malformed values and no bad path; the owner index
	// holds none of them.
	rev := headRevision(t, cli)
	for _, m := range all {
		_, err := o.rpc.Get(t.Context(), &observerv1.GetRequest{Key: m.key, MinRevision: rev})
		switch {
		case m.announce == "" && status.Code(err) != codes.NotFound:
			t.Errorf("Get %q (bad path) = %v, want NotFound", m.key, err)
		case m.announce != "" && err != nil:
			t.Errorf("Get %q (malformed value) = %v, want it cached", m.key, err)
		}
	}
	children, err := o.rpc.List(t.Context(), &observerv1.ListRequest{OwnerKind: "ReplicaSet", OwnerName: "rs1", MinRevision: rev})
	if err != nil {
		t.Fatal(err)
	}
	if len(children.GetItems()) != 0 {
		t.Errorf("List by owner rs1 = %d items, want none", len(children.GetItems()))
	}

	// A good object beside them is still announced with its owner.
	if _, err := cli.Put(t.Context(), "/registry/pods/mal-watch/good", podValue("mal-watch", "good", "rs1", "")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 30*time.Second, "the good pod's owner key", func() (bool, string) {
		rss, _ := q.keys(t.Context(), "replicasets")
		return rss["mal-watch/rs1"], fmt.Sprint(rss)
	})
}
