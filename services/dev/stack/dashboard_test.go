package stack

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/batonrun/baton/client/kinds"
	"github.com/batonrun/baton/client/tlsfiles"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// TestDashboardShowsTheStack: the queue's dashboard in the embedded stack
// with mutual TLS on every link shows the real observer, asked with the
// queue's own certificate: ready, its watches and lag, the reference
// controllers' built-in rules, and a controller's declaration written to
// etcd, in force; and the stack's worker connected by its work streams,
// under its certificate's name.
func TestDashboardShowsTheStack(t *testing.T) {
	r := startStack(t, t.TempDir(), func(c *Config) { c.TLS = true })

	d := kinds.Declaration{Queue: "dashtoys", For: kinds.Kind{Kind: "DashToy", Resource: "dashtoys"}}
	value, err := d.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	ecfg := clientv3.Config{Endpoints: []string{r.ep.Etcd}, DialTimeout: 5 * time.Second}
	if err := (stackCerts{dir: r.ep.Certs}).etcdClient().Apply(&ecfg, nil); err != nil {
		t.Fatal(err)
	}
	etcd, err := clientv3.New(ecfg)
	if err != nil {
		t.Fatal(err)
	}
	defer etcd.Close()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if _, err := etcd.Put(ctx, d.Key(), string(value)); err != nil {
		t.Fatal(err)
	}

	viewer, err := tlsfiles.Load(tlsfiles.Config{CertFile: filepath.Join(r.ep.Certs, "viewer.crt"), KeyFile: filepath.Join(r.ep.Certs, "viewer.key"), CAFile: filepath.Join(r.ep.Certs, "ca.crt")})
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: viewer.ClientConfig("127.0.0.1")}, Timeout: 10 * time.Second}
	defer client.CloseIdleConnections()
	get := func(path string, v any) string {
		t.Helper()
		res, err := client.Get("https://" + r.ep.QueueHTTP + path)
		if err != nil {
			t.Fatal(err)
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		if res.StatusCode != http.StatusOK {
			t.Fatalf("%s: %d %s", path, res.StatusCode, b)
		}
		if err := json.Unmarshal(b, v); err != nil {
			t.Fatalf("%s: %v: %s", path, err, b)
		}
		return string(b)
	}

	type rule struct {
		Queue, Prefix, Source string
	}
	type declaration struct {
		Key, Queue      string
		InForceRevision int64 `json:"in_force_revision"`
		Refused         string
		Watches         []rule
	}
	type prefix struct {
		Prefix string
		Listed bool
	}
	var o struct {
		Configured, Reachable, Ready bool
		StatusError                  string `json:"status_error"`
		Prefixes                     []prefix
		Declarations                 []declaration
		Rules                        []rule
	}
	eventually(t, 60*time.Second, "showing the observer ready with the declaration in force", func() (bool, string) {
		body := get("/api/observer", &o)
		if o.StatusError != "" {
			t.Fatalf("the observer refused the queue's Status: %s", o.StatusError)
		}
		i := slices.IndexFunc(o.Declarations, func(x declaration) bool { return x.Key == d.Key() })
		// Its rule, and the garbage collector's feed of its kind.
		want := []rule{{Queue: "dashtoys", Prefix: "/registry/dashtoys/", Source: "declaration"}, {Queue: kinds.GarbageCollectorQueue, Prefix: "/registry/dashtoys/", Source: "declaration"}}
		return o.Configured && o.Reachable && o.Ready &&
			i >= 0 && o.Declarations[i].InForceRevision > 0 && slices.Equal(o.Declarations[i].Watches, want) &&
			slices.ContainsFunc(o.Prefixes, func(p prefix) bool { return p.Prefix == "/registry/dashtoys/" && p.Listed }), body
	})
	if !slices.ContainsFunc(o.Rules, func(r rule) bool { return r.Queue == "replicasets" && r.Source == "built in" }) {
		t.Errorf("the built-in rules are not shown: %+v", o.Rules)
	}

	type worker struct {
		Worker, Queue string
		Streams       int
		Identities    []string
	}
	var w struct {
		StreamsKnown bool `json:"streams_known"`
		Workers      []worker
	}
	eventually(t, 30*time.Second, "showing the worker's streams", func() (bool, string) {
		body := get("/api/workers", &w)
		return w.StreamsKnown && slices.ContainsFunc(w.Workers, func(x worker) bool {
			return x.Queue == "replicasets" && x.Streams > 0 && slices.Equal(x.Identities, []string{"worker"}) && x.Worker != ""
		}), body
	})
}
