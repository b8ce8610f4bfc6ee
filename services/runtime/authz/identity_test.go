package authz

import (
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/batonrun/baton/client/tlsfiles"
	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// hostileName is a CN a CA may sign without looking: 60,000 bytes, with a
// right-to-left override and a NUL.
var hostileName = "\u202eevil\x00" + strings.Repeat("a", 60_000)

// maxLine bounds a denial's log line with a hostile name: the fields a
// line holds, each name cut to tlsfiles.MaxShownBytes.
const maxLine = 2048

// checkShown fails the test when s holds a raw control or bidi character,
// or is longer than max.
func checkShown(t *testing.T, what, s string, max int) {
	t.Helper()
	if len(s) > max {
		t.Errorf("%s is %d bytes, want at most %d: %.200q…", what, len(s), max, s)
	}
	if strings.ContainsAny(s, "\u202e\x00") {
		t.Errorf("%s holds a raw U+202E or NUL: %.200q…", what, s)
	}
}

// deniedLabels returns the identity labels of baton_authz_denied_total.
func deniedLabels(t *testing.T, reg prometheus.Gatherer) []string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, mf := range mfs {
		if mf.GetName() != DeniedMetric {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "identity" {
					out = append(out, l.GetValue())
				}
			}
		}
	}
	return out
}

// TestHostileIdentityOverGRPC: a denied call from a certificate with a
// 60,000-byte CN holding U+202E and NUL (and many roles), on a queue of
// the same kind, is logged, counted and answered with the name and the
// queue bounded and escaped; the metric keeps its name and labels.
func TestHostileIdentityOverGRPC(t *testing.T) {
	p := newPKI(t)
	s := startServer(t, p, nil, tlsfiles.RequireClientCert)
	orgs := []string{"baton:viewer"}
	for range 200 {
		orgs = append(orgs, "baton:\u202e"+strings.Repeat("r", 300))
	}
	conn := s.dial(t, p.source(t, hostileName, orgs...))
	err := call(t.Context(), conn, queuev1.QueueService_Add_FullMethodName, "\u202e"+strings.Repeat("q", 60_000))
	if status.Code(err) != codes.PermissionDenied {
		t.Fatalf("Add from a viewer: %v, want PERMISSION_DENIED", err)
	}
	checkShown(t, "the denial's message", status.Convert(err).Message(), maxLine)
	if !strings.Contains(status.Convert(err).Message(), `\u202eevil\x00aaaa`) {
		t.Errorf("the denial's message %.200q… does not show the name escaped", status.Convert(err).Message())
	}

	lines := s.logs.lines(`"level":"WARN"`, "call denied")
	if len(lines) != 1 {
		t.Fatalf("%d denial lines, want 1", len(lines))
	}
	checkShown(t, "the denial's log line", lines[0], maxLine)

	labels := deniedLabels(t, s.reg)
	if len(labels) != 1 {
		t.Fatalf("identity labels %q, want one", labels)
	}
	checkShown(t, "the identity label", labels[0], tlsfiles.MaxShownBytes)
	if got := deniedCount(t, s.reg, queuev1.QueueService_Add_FullMethodName, tlsfiles.Shown(hostileName)); got != 1 {
		t.Errorf("%s{identity=%q} = %v, want 1", DeniedMetric, tlsfiles.Shown(hostileName), got)
	}
}

// TestHostileIdentityOverHTTP: the same over HTTP, and a hostile path from
// a client without a certificate, whose refusal is logged too.
func TestHostileIdentityOverHTTP(t *testing.T) {
	p := newPKI(t)
	reg := prometheus.NewRegistry()
	logs := &logBuffer{}
	a, err := New(Options{Logger: slog.New(slog.NewJSONHandler(logs, nil)), Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	url := startHTTPS(t, p, a.HTTP(http.NotFoundHandler()))
	hostilePath := "/debug/pprof/%E2%80%AE%00" + strings.Repeat("p", 20_000)
	for _, c := range []*http.Client{httpClient(t, p.source(t, hostileName, "baton:viewer")), httpClient(t, p.anonymous(t))} {
		res, err := c.Get(url + hostilePath)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(res.Body)
		res.Body.Close()
		if res.StatusCode != http.StatusForbidden && res.StatusCode != http.StatusUnauthorized {
			t.Errorf("GET: %d, want 403 or 401", res.StatusCode)
		}
		checkShown(t, "the refusal's body", string(body), maxLine)
	}
	lines := logs.lines(`"level":"WARN"`)
	if len(lines) != 2 {
		t.Fatalf("%d refusal lines, want 2: %q", len(lines), lines)
	}
	for _, l := range lines {
		checkShown(t, "a refusal's log line", l, maxLine)
	}
	for _, l := range deniedLabels(t, reg) {
		checkShown(t, "an identity label", l, tlsfiles.MaxShownBytes)
	}
	if got := deniedCount(t, reg, "HTTP /debug/pprof/", tlsfiles.Shown(hostileName)); got != 1 {
		t.Errorf(`%s{method="HTTP /debug/pprof/",identity=%q} = %v, want 1`, DeniedMetric, tlsfiles.Shown(hostileName), got)
	}
}
