package robustness

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"
)

// Kind names a recorded call.
type Kind string

// The calls the workloads make. A work stream's events are recorded as
// their own kinds: a pushed lease has no request of its own, and a stream's
// ack of success may be answered before it is durable.
const (
	KindAdd       Kind = "add"
	KindLease     Kind = "lease"
	KindAck       Kind = "ack"
	KindExtend    Kind = "extend"
	KindForget    Kind = "forget"
	KindInspect   Kind = "inspect"
	KindWorkLease Kind = "work-lease"
	KindWorkAck   Kind = "work-ack"
)

// Outcome is what a call's answer says about its effect (Classify).
type Outcome string

const (
	// OK: the call was applied and answered.
	OK Outcome = "ok"
	// Refused: the error says nothing changed.
	Refused Outcome = "refused"
	// Ambiguous: the call may or may not have taken effect.
	Ambiguous Outcome = "ambiguous"
)

// Ack outcomes, as an ack's AckKind.
const (
	AckSuccess  = "success"
	AckFailure  = "failure"
	AckRequeue  = "requeue"
	AckTerminal = "terminal"
)

// Item statuses of Ack and Extend results.
const (
	StatusOK        = "OK"
	StatusLeaseLost = "LEASE_LOST"
)

// Item states of Inspect, as the model names them.
const (
	StateAbsent  = "absent"
	StatePending = "pending"
	StateDelayed = "delayed"
	StateLeased  = "leased"
	StateParked  = "parked"
)

// Grant is one key a Lease (or a work stream) handed out.
type Grant struct {
	Key   string `json:"key"`
	Token uint64 `json:"token"`
}

// Op is one recorded call: who made it, when (nanoseconds since the run
// began, on the monotonic clock), what it asked and what it was told. The
// workloads make single-key calls, except Lease, which may grant several
// keys: every key-level check can then read an Op on its own.
type Op struct {
	Seq    int    `json:"seq"`
	Client int    `json:"client"`
	Member string `json:"member,omitempty"` // the member dialled
	Kind   Kind   `json:"kind"`
	Queue  string `json:"queue"`
	Key    string `json:"key,omitempty"`
	Call   int64  `json:"call"`
	Return int64  `json:"return"`

	// Inputs.
	Delay   time.Duration `json:"delay,omitempty"`    // Add
	Token   uint64        `json:"token,omitempty"`    // Ack, Extend
	AckKind string        `json:"ack_kind,omitempty"` // Ack

	// Outputs.
	Outcome   Outcome `json:"outcome"`
	Err       string  `json:"err,omitempty"` // code, reason and message
	Queued    bool    `json:"queued,omitempty"`
	Status    string  `json:"status,omitempty"` // Ack, Extend
	Grants    []Grant `json:"grants,omitempty"` // Lease, work lease
	Forgotten int     `json:"forgotten,omitempty"`
	State     string  `json:"state,omitempty"` // Inspect
	Dirty     bool    `json:"dirty,omitempty"` // Inspect
}

func (o Op) String() string {
	b, _ := json.Marshal(o)
	return string(b)
}

// History collects the calls of one run, from every client at once.
type History struct {
	start time.Time
	mu    sync.Mutex
	ops   []Op
}

// NewHistory starts a history; its times count from now.
func NewHistory() *History { return &History{start: time.Now()} }

// Now is the time since the history began, in nanoseconds.
func (h *History) Now() int64 { return int64(time.Since(h.start)) }

// Record appends op, numbering it.
func (h *History) Record(op Op) {
	h.mu.Lock()
	op.Seq = len(h.ops)
	h.ops = append(h.ops, op)
	h.mu.Unlock()
}

// Ops returns a copy of the operations recorded so far, ordered by call
// time.
func (h *History) Ops() []Op {
	h.mu.Lock()
	out := slices.Clone(h.ops)
	h.mu.Unlock()
	slices.SortStableFunc(out, func(a, b Op) int { return cmpInt64(a.Call, b.Call) })
	return out
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// WriteJSONLines writes ops one JSON object a line.
func WriteJSONLines(w io.Writer, ops []Op) error {
	enc := json.NewEncoder(w)
	for _, op := range ops {
		if err := enc.Encode(op); err != nil {
			return fmt.Errorf("encode op %d: %w", op.Seq, err)
		}
	}
	return nil
}

// Tally counts operations by kind and outcome, for the run's report.
func Tally(ops []Op) map[string]int {
	out := map[string]int{}
	for _, op := range ops {
		k := string(op.Kind) + " " + string(op.Outcome)
		if op.Outcome == OK && op.Status != "" {
			k += " " + op.Status
		}
		out[k]++
	}
	return out
}
