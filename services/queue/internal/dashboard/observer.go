package dashboard

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	observerclient "github.com/batonrun/baton/client/observer"
	"github.com/batonrun/baton/client/tlsfiles"
	observerv1 "github.com/batonrun/baton/proto/baton/observer/v1"
)

// The observer's status is asked in the background, never while a page
// waits: a poll every ObserverPollEvery, each of its two calls (health and
// Status, at once) bounded by ObserverCallTimeout. The page reads the last
// answer, so an observer that is down, or that accepts connections and
// never answers, costs the page nothing and shows as unreachable within
// one timeout.
const (
	ObserverPollEvery   = 2 * time.Second
	ObserverCallTimeout = 2 * time.Second
)

// ObserverConfig says which observer the page shows.
type ObserverConfig struct {
	// Addr returns the observer's gRPC address (host:port, or a
	// comma-separated list), "" while it is not known yet (the embedded
	// stack starts the observer after the queue).
	Addr func() string
	// TLS, if set, is the queue's own certificate and CA: the observer is
	// dialed with it (its Status allows the queue's role, queue-peer).
	TLS *tlsfiles.Source
	// PollEvery and CallTimeout replace ObserverPollEvery and
	// ObserverCallTimeout when set (tests).
	PollEvery, CallTimeout time.Duration
	Logger                 *slog.Logger
}

// observerClient is what the watch asks (client/observer's Client).
type observerClient interface {
	Healthy(ctx context.Context) error
	Status(ctx context.Context) (*observerv1.StatusResponse, error)
	Close() error
}

// ObserverWatch keeps the observer's last answer for the page.
type ObserverWatch struct {
	cfg ObserverConfig

	// Run's alone.
	c      observerClient
	dialed string

	mu   sync.Mutex
	last observerJSON
}

// NewObserverWatch returns a watch of the observer of cfg; call Run.
func NewObserverWatch(cfg ObserverConfig) *ObserverWatch {
	if cfg.PollEvery <= 0 {
		cfg.PollEvery = ObserverPollEvery
	}
	if cfg.CallTimeout <= 0 {
		cfg.CallTimeout = ObserverCallTimeout
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &ObserverWatch{cfg: cfg, last: observerJSON{Configured: true}}
}

// Run polls the observer until ctx ends, then closes its connection.
func (w *ObserverWatch) Run(ctx context.Context) {
	t := time.NewTicker(w.cfg.PollEvery)
	defer t.Stop()
	defer func() {
		if w.c != nil {
			_ = w.c.Close()
		}
	}()
	for {
		w.poll(ctx)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// poll asks the observer once and records what it said.
func (w *ObserverWatch) poll(ctx context.Context) {
	addr := w.cfg.Addr()
	if addr == "" {
		return // not known yet: the page says it is not checked yet
	}
	if w.c == nil || addr != w.dialed {
		if w.c != nil {
			_ = w.c.Close()
			w.c = nil
		}
		var opts []observerclient.Option
		if w.cfg.TLS != nil {
			opts = append(opts, observerclient.WithTLS(w.cfg.TLS))
		}
		c, err := observerclient.Dial(addr, opts...)
		if err != nil {
			w.record(addr, err, nil, err)
			return
		}
		w.c, w.dialed = c, addr
	}
	ctx, cancel := context.WithTimeout(ctx, w.cfg.CallTimeout)
	defer cancel()
	var (
		wg        sync.WaitGroup
		healthErr error
		st        *observerv1.StatusResponse
		statusErr error
		c         = w.c
	)
	wg.Go(func() { healthErr = c.Healthy(ctx) })
	wg.Go(func() { st, statusErr = c.Status(ctx) })
	wg.Wait()
	if ctx.Err() != nil && errors.Is(context.Cause(ctx), context.Canceled) {
		return // the queue is stopping: nothing to record
	}
	w.record(addr, healthErr, st, statusErr)
}

// record keeps one poll's answers: the health check's (nil: ready) and
// Status's.
func (w *ObserverWatch) record(addr string, healthErr error, st *observerv1.StatusResponse, statusErr error) {
	now := time.Now().UnixMilli()
	w.mu.Lock()
	defer w.mu.Unlock()
	was := w.last
	o := was
	o.Addr, o.CheckedMs = addr, now
	// The health service answers every verified client: an observer that
	// answers it is reachable, ready or not.
	o.Reachable = healthErr == nil || errors.Is(healthErr, observerclient.ErrNotServing)
	o.Ready = healthErr == nil
	o.Error, o.NotReady = "", ""
	switch {
	case !o.Reachable:
		o.Error = healthErr.Error()
	case !o.Ready:
		o.NotReady = healthErr.Error()
	}
	if statusErr != nil {
		o.StatusError = statusErr.Error()
	} else {
		o.StatusError = ""
		o.AnsweredMs = now
		o.fromStatus(st)
	}
	w.last = o
	// A line when it stops or starts answering, not one per poll.
	if first := was.CheckedMs == 0; first && !o.Reachable || !first && was.Reachable != o.Reachable {
		if o.Reachable {
			w.cfg.Logger.Info("dashboard: the observer answers again", "observer", addr)
		} else {
			w.cfg.Logger.Warn("dashboard: the observer does not answer; the page shows it unreachable", "observer", addr, "error", o.Error)
		}
	}
}

// snapshot is the last answer.
func (w *ObserverWatch) snapshot() observerJSON {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last
}

// observerJSON is /api/observer. The fields from Prefixes on are the
// observer's last answer to Status, at AnsweredMs, kept while it does not
// answer.
type observerJSON struct {
	// Configured: the queue was given --observer-addr; nothing else is set
	// when it was not.
	Configured bool   `json:"configured"`
	Addr       string `json:"address,omitempty"`
	// CheckedMs is when the last poll ended (Unix ms); 0: not yet.
	CheckedMs int64 `json:"checked_ms"`
	// Reachable: the observer answered its health check.
	Reachable bool   `json:"reachable"`
	Error     string `json:"error,omitempty"`
	// Ready: it says it is (etcd answers and its first lists are done).
	Ready    bool   `json:"ready"`
	NotReady string `json:"not_ready,omitempty"`
	// StatusError is why its Status call failed (a policy that does not
	// allow it to the queue's certificate, say), "" when it answered.
	StatusError string `json:"status_error,omitempty"`
	// AnsweredMs is when Status last answered (Unix ms); 0: never.
	AnsweredMs int64 `json:"answered_ms"`
	// LagRevisions is the most etcd revisions a watch's cache trails the
	// head it last saw (baton_observer_lag_revisions' largest).
	LagRevisions int64             `json:"lag_revisions"`
	Prefixes     []prefixJSON      `json:"prefixes"`
	OutboxSize   uint64            `json:"outbox_size"`
	Outboxes     []outboxJSON      `json:"outboxes"`
	Declarations []declarationJSON `json:"declarations"`
	// Rules are the rules in force that no declaration states (built in,
	// from a rules file, or given in code).
	Rules []ruleJSON `json:"rules"`
}

type prefixJSON struct {
	Prefix   string `json:"prefix"`
	Observed int64  `json:"observed_revision"`
	Head     int64  `json:"head_revision"`
	Lag      int64  `json:"lag_revisions"`
	Listed   bool   `json:"listed"`
}

type outboxJSON struct {
	Queue     string `json:"queue"`
	Size      uint64 `json:"size"`
	LastError string `json:"last_error,omitempty"`
}

// declarationJSON is one controller's declaration and what became of it.
type declarationJSON struct {
	Key         string `json:"key"`
	Queue       string `json:"queue"`
	ModRevision int64  `json:"mod_revision"`
	// InForceRevision is the revision whose rules are in force (0: none).
	InForceRevision int64 `json:"in_force_revision"`
	// Refused is why the current value is not in force.
	Refused string `json:"refused,omitempty"`
	// Watches are the rules in force from it.
	Watches []ruleJSON `json:"watches"`
}

type ruleJSON struct {
	Queue           string `json:"queue"`
	Prefix          string `json:"prefix"`
	OwnerKind       string `json:"owner_kind,omitempty"`
	Source          string `json:"source"`
	IgnoreOwnStatus bool   `json:"ignore_own_status,omitempty"`
}

// fromStatus replaces o's details by st's.
func (o *observerJSON) fromStatus(st *observerv1.StatusResponse) {
	o.LagRevisions, o.Prefixes = 0, []prefixJSON{}
	for _, p := range st.GetPrefixes() {
		lag := max(0, p.GetHeadRevision()-p.GetObservedRevision())
		o.LagRevisions = max(o.LagRevisions, lag)
		o.Prefixes = append(o.Prefixes, prefixJSON{Prefix: p.GetPrefix(), Observed: p.GetObservedRevision(), Head: p.GetHeadRevision(), Lag: lag, Listed: p.GetListed()})
	}
	o.OutboxSize, o.Outboxes = st.GetOutboxSize(), []outboxJSON{}
	for _, b := range st.GetOutboxes() {
		o.Outboxes = append(o.Outboxes, outboxJSON{Queue: b.GetQueue(), Size: b.GetSize(), LastError: b.GetLastError()})
	}
	byDecl := map[string][]ruleJSON{}
	o.Rules = []ruleJSON{}
	for _, r := range st.GetRules() {
		rj := ruleJSON{Queue: r.GetQueue(), Prefix: r.GetPrefix(), OwnerKind: r.GetOwnerKind(), Source: ruleSource(r.GetSource()), IgnoreOwnStatus: r.GetIgnoreOwnStatus()}
		if r.GetSource() == observerv1.RuleSource_RULE_SOURCE_DECLARATION {
			byDecl[r.GetDeclarationKey()] = append(byDecl[r.GetDeclarationKey()], rj)
			continue
		}
		o.Rules = append(o.Rules, rj)
	}
	o.Declarations = []declarationJSON{}
	for _, d := range st.GetDeclarations() {
		w := byDecl[d.GetKey()]
		if w == nil {
			w = []ruleJSON{}
		}
		o.Declarations = append(o.Declarations, declarationJSON{Key: d.GetKey(), Queue: d.GetQueue(), ModRevision: d.GetModRevision(),
			InForceRevision: d.GetInForceRevision(), Refused: d.GetRefused(), Watches: w})
	}
}

// ruleSource names where a rule comes from, as the page says it.
func ruleSource(s observerv1.RuleSource) string {
	switch s {
	case observerv1.RuleSource_RULE_SOURCE_BUILTIN:
		return "built in"
	case observerv1.RuleSource_RULE_SOURCE_FILE:
		return "rules file"
	case observerv1.RuleSource_RULE_SOURCE_CONFIG:
		return "configuration"
	case observerv1.RuleSource_RULE_SOURCE_DECLARATION:
		return "declaration"
	}
	return "unknown"
}
