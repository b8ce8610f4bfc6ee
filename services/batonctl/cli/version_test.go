package cli

import (
	"encoding/json"
	"runtime"
	"strings"
	"testing"

	"github.com/batonrun/baton/test/framework"
)

// TestVersion: version prints the client's build, and what the servers say
// of theirs: the queue's format level and each member's, and whether the
// observer answers; --client asks no server; a server that does not answer
// is in the report and fails the command.
func TestVersion(t *testing.T) {
	etcd := framework.StartEtcd(t)
	q := framework.StartQueue(t, framework.QueueOptions{})
	o := framework.StartObserver(t, framework.ObserverOptions{EtcdEndpoints: etcd.Endpoints(), QueueAddr: q.Addr})
	all := []string{"--etcd-endpoints", etcd.Endpoints()[0], "--queue-addr", q.Addr, "--observer-addr", o.Addr, "--timeout", "3s"}
	run := func(args ...string) result {
		return runCtx(t, t.Context(), "", append(append([]string(nil), all...), args...)...)
	}

	r := run("version").mustSucceed(t)
	for _, want := range []string{"Client Version: ", runtime.Version() + ", " + runtime.GOOS + "/" + runtime.GOARCH, "Queue Format Level: ", "Observer: " + o.Addr + " answers"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("version lacks %q:\n%s", want, r.stdout)
		}
	}
	var v versionReport
	if err := json.Unmarshal([]byte(run("version", "-o", "json").mustSucceed(t).stdout), &v); err != nil {
		t.Fatal(err)
	}
	if v.Client.GoVersion != runtime.Version() || v.Client.Version == "" || v.Queue == nil || v.Queue.FormatLevel == 0 ||
		len(v.Queue.Members) != 1 || v.Queue.Members[0].FormatLevel != v.Queue.FormatLevel || v.Queue.Members[0].State != "leader" ||
		v.Observer == nil || !v.Observer.Answers {
		t.Errorf("version -o json: %+v %+v %+v", v.Client, v.Queue, v.Observer)
	}
	if y := run("version", "-o", "yaml").mustSucceed(t).stdout; !strings.Contains(y, "clientVersion:") || !strings.Contains(y, "formatLevel: ") {
		t.Errorf("version -o yaml:\n%s", y)
	}

	// --client asks nothing: every server may be down.
	r = runCtx(t, t.Context(), "", "--queue-addr", deadAddr, "--observer-addr", deadAddr, "--etcd-endpoints", "http://"+deadAddr, "version", "--client")
	if r.code != 0 || !strings.HasPrefix(r.stdout, "Client Version: ") || strings.Count(r.stdout, "\n") != 1 {
		t.Errorf("version --client: %+v", r)
	}

	// The observer down: the report still, and exit 1.
	o.Stop()
	r = run("version", "-o", "json")
	v = versionReport{}
	if r.code != 1 || json.Unmarshal([]byte(r.stdout), &v) != nil || v.Queue.FormatLevel == 0 || v.Observer.Answers ||
		!strings.Contains(v.Observer.Error, "connection refused: is the observer running at "+o.Addr) || r.stderr != "error: no answer from the observer\n" {
		t.Errorf("version with the observer down: %+v", r)
	}
	if r := run("version", "-o", "xml"); r.code != 2 {
		t.Errorf("version -o xml: %+v", r)
	}
}
