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
	"testing"
	"time"

	queueclient "github.com/batonrun/baton/client/queue"
	"github.com/batonrun/baton/services/queue/service"
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
	args := []string{"--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1400,700",
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

// TestDashboardInBrowser loads the dashboard of a running queue in a real
// browser: every queue shows, the numbers follow the work, and the key
// inspector answers.
func TestDashboardInBrowser(t *testing.T) {
	bin := chromium(t)
	ctx, cancel := context.WithCancel(t.Context())
	addrs := make(chan [2]net.Addr, 1)
	cfg := service.DefaultConfig()
	cfg.GRPCAddr, cfg.HTTPAddr, cfg.DataDir = "127.0.0.1:0", "127.0.0.1:0", t.TempDir()
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

	// The numbers follow the work.
	add("pods", 10, 100)
	if got := pending(render(t, bin, base, ""), "pods"); got != "14" {
		t.Fatalf("after 10 more adds pods pending = %s, want 14", got)
	}
	t.Logf("screenshot: %s", shot)
}
