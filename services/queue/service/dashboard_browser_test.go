package service_test

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	queueclient "github.com/batonrun/baton/client/queue"
	observerv1 "github.com/batonrun/baton/proto/baton/observer/v1"
	"github.com/batonrun/baton/services/queue/service"
	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
)

// chromium finds Debian's headless browser; scripts/test.sh installs it.
func chromium(t *testing.T) string {
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("no chromium on PATH: scripts/test.sh installs Debian's chromium package for this test")
	}
	t.Skip("no chromium on PATH (apt-get install chromium); skipping the browser test")
	return ""
}

// render loads url in headless Chromium, lets its scripts run, and returns
// the DOM; with shot set it also saves a screenshot there.
func render(t *testing.T, bin, url, shot string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 90*time.Second)
	defer cancel()
	args := []string{"--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1400,1650",
		"--virtual-time-budget=4000", "--user-data-dir=" + t.TempDir()}
	if shot != "" {
		if out, err := exec.CommandContext(ctx, bin, append(args, "--screenshot="+shot, url)...).CombinedOutput(); err != nil {
			t.Fatalf("chromium screenshot: %v\n%s", err, out)
		}
	}
	var stdout, stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, bin, append(args, "--dump-dom", url)...)
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("chromium --dump-dom: %v\n%s", err, stderr.String())
	}
	return stdout.String()
}

// browserObserver answers ObserverService Status as an observer with one
// controller's declaration in force and a watch 3 revisions behind, and
// says SERVING: the observer's side of the wire (the embedded stack's
// tests show the page a real one).
type browserObserver struct {
	observerv1.UnimplementedObserverServiceServer
}

func (browserObserver) Status(context.Context, *observerv1.StatusRequest) (*observerv1.StatusResponse, error) {
	return &observerv1.StatusResponse{
		Prefixes: []*observerv1.PrefixStatus{
			{Prefix: "/baton/rules/", ObservedRevision: 40, HeadRevision: 40, Listed: true},
			{Prefix: "/registry/greetings/", ObservedRevision: 37, HeadRevision: 40, Listed: true},
		},
		Rules: []*observerv1.Rule{
			{Queue: "greetings", Prefix: "/registry/greetings/", Source: observerv1.RuleSource_RULE_SOURCE_DECLARATION, DeclarationKey: "/baton/rules/greetings"},
			{Queue: "pods", Prefix: "/registry/pods/", Source: observerv1.RuleSource_RULE_SOURCE_BUILTIN},
		},
		Declarations: []*observerv1.DeclarationStatus{{Key: "/baton/rules/greetings", ModRevision: 12, Queue: "greetings", InForceRevision: 12}},
	}, nil
}

func startBrowserObserver(t *testing.T) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer()
	hs := health.NewServer()
	hs.SetServingStatus(observerv1.ObserverService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	healthpb.RegisterHealthServer(gs, hs)
	observerv1.RegisterObserverServiceServer(gs, browserObserver{})
	done := make(chan struct{})
	go func() { defer close(done); _ = gs.Serve(lis) }()
	t.Cleanup(func() { gs.Stop(); <-done })
	return lis.Addr().String()
}

// TestDashboardInBrowser loads the dashboard of a running queue in a real
// browser: every queue shows, the numbers follow the work, the key
// inspector answers; the workers show with the keys they hold (a worker
// of unary Leases and one on a work stream), the parked keys with their
// errors (as text: an error is the worker's, markup included), and the
// observer's health, lag and declared controllers.
func TestDashboardInBrowser(t *testing.T) {
	bin := chromium(t)
	ctx, cancel := context.WithCancel(t.Context())
	addrs := make(chan [2]net.Addr, 1)
	cfg := service.DefaultConfig()
	cfg.GRPCAddr, cfg.HTTPAddr, cfg.DataDir = "127.0.0.1:0", "127.0.0.1:0", t.TempDir()
	cfg.ObserverAddr = startBrowserObserver(t)
	cfg.OnListen = func(g, h net.Addr) { addrs <- [2]net.Addr{g, h} }
	done := make(chan error, 1)
	go func() { done <- service.Run(ctx, cfg, nil) }()
	t.Cleanup(func() { cancel(); <-done })
	a := <-addrs
	c, err := queueclient.Dial(a[0].String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	add := func(queue string, n, from int) {
		keys := make([]string, n)
		for i := range keys {
			keys[i] = fmt.Sprintf("default/k%d", from+i)
		}
		if _, err := c.Add(t.Context(), queue, keys, queueclient.AddOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	add("pods", 5, 0)
	add("replicasets", 2, 0)
	// A long lease: a loaded machine may take a while to render twice.
	leases, err := c.Lease(t.Context(), "pods", queueclient.LeaseOptions{Worker: "browser-test", MaxItems: 1, Duration: 10 * time.Minute})
	if err != nil || len(leases) != 1 {
		t.Fatalf("lease: %v %v", leases, err)
	}
	// A worker on a work stream, holding one key of deployments.
	add("deployments", 1, 0)
	ws, err := c.Work(t.Context(), "deployments", queueclient.WorkOptions{Worker: "stream-worker", MaxInFlight: 1, LeaseDuration: 10 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	ev, err := ws.Recv()
	if err != nil || ev.Lease == nil {
		t.Fatalf("work stream: %+v %v", ev, err)
	}
	streamKey := ev.Lease.Key
	// A key parked with an error that looks like markup.
	const parkErr = `image <b>pull</b> failed: <img src=x onerror=alert(1)>`
	add("jobs", 1, 0)
	jl, err := c.Lease(t.Context(), "jobs", queueclient.LeaseOptions{Worker: "jobs-worker", MaxItems: 1})
	if err != nil || len(jl) != 1 {
		t.Fatalf("lease jobs: %v %v", jl, err)
	}
	if _, err := c.Ack(t.Context(), "jobs", []queueclient.Ack{{Key: jl[0].Key, Token: jl[0].Token, Outcome: queueclient.Terminal(parkErr)}}); err != nil {
		t.Fatal(err)
	}

	base := "http://" + a[1].String() + "/"
	pending := func(dom, queue string) string {
		m := regexp.MustCompile(`data-queue="` + queue + `"><td[^>]*>` + queue + `</td><td class="n pending">(\d+)</td>`).FindStringSubmatch(dom)
		if m == nil {
			t.Fatalf("queue %s not shown with its pending count in:\n%s", queue, dom)
		}
		return m[1]
	}
	shot := filepath.Join(t.ArtifactDir(), "dashboard.png")
	dom := render(t, bin, base+"#queue=pods&key="+leases[0].Key, shot)
	if got := pending(dom, "pods"); got != "4" {
		t.Fatalf("pods pending = %s, want 4", got)
	}
	if got := pending(dom, "replicasets"); got != "2" {
		t.Fatalf("replicasets pending = %s, want 2", got)
	}
	for _, want := range []string{"leased", "browser-test", leases[0].Key} {
		if !regexp.MustCompile(`<dd[^>]*>` + regexp.QuoteMeta(want) + `</dd>`).MatchString(dom) {
			t.Fatalf("key inspector does not show %q:\n%s", want, dom)
		}
	}
	if fi, err := os.Stat(shot); err != nil || fi.Size() == 0 {
		t.Fatalf("no screenshot: %v", err)
	}
	shows := func(what, re string) {
		t.Helper()
		if !regexp.MustCompile(re).MatchString(dom) {
			t.Errorf("the page does not show %s (%s):\n%s", what, re, dom)
		}
	}
	q := regexp.QuoteMeta
	shows("the Lease caller with the key it holds", `<tr data-worker="browser-test" data-queue="pods"><td>browser-test</td><td>pods</td><td class="n leased">1</td>`)
	shows("the stream's worker, connected", `<tr data-worker="stream-worker" data-queue="deployments"><td>stream-worker</td><td>deployments</td><td class="n leased">1</td><td>1</td><td class="n">1 / 1</td>`)
	shows("the Lease caller's key", `<tr data-key="`+q(leases[0].Key)+`" data-queue="pods"><td class="key"><a [^>]*>`+q(leases[0].Key)+`</a></td><td>pods</td><td>browser-test</td><td>\d`)
	shows("the stream's key", `<tr data-key="`+q(streamKey)+`" data-queue="deployments"><td class="key"><a [^>]*>`+q(streamKey)+`</a></td><td>deployments</td><td>stream-worker</td>`)
	shows("the parked key with its error as text", `<tr data-key="default/k0" data-queue="jobs"><td class="key"><a [^>]*>default/k0</a></td><td>jobs</td><td class="n">1</td><td class="err">`+
		q(`image &lt;b&gt;pull&lt;/b&gt; failed: &lt;img src=x onerror=alert(1)&gt;`)+`</td>`)
	if strings.Contains(dom, "<b>pull</b>") || strings.Contains(dom, "<img src") {
		t.Errorf("the parked key's error became markup:\n%s", dom)
	}
	shows("the observer ready, 3 revisions behind", `<tr data-part="observer"><td>observer</td><td class="state leased">ready</td><td class="detail">`+q(cfg.ObserverAddr)+` · 3 revisions behind etcd`)
	shows("the workers' health", `<tr data-part="workers"><td>workers</td><td class="state leased">1 work stream open</td>`)
	shows("the declared controller, in force", `<tr data-declaration="/baton/rules/greetings"><td>/baton/rules/greetings</td><td>greetings</td><td><div><div>/registry/greetings/</div></div></td><td class="state leased">in force</td>`)
	shows("the built-in rule", `<tr><td>pods</td><td>/registry/pods/</td><td>its own key</td><td>built in</td></tr>`)
	shows("the lagging watch", `<tr data-prefix="/registry/greetings/"><td>/registry/greetings/</td><td class="n">37</td><td class="n">40</td><td class="n delayed">3</td>`)

	// The numbers follow the work.
	add("pods", 10, 100)
	if got := pending(render(t, bin, base, ""), "pods"); got != "14" {
		t.Fatalf("after 10 more adds pods pending = %s, want 14", got)
	}
	t.Logf("screenshot: %s", shot)
}
