package robustness

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"
)

// Violation is one broken promise a checker found.
type Violation struct {
	Checker string // "linearizability", "set", "invariant", "contract", "state"
	What    string
	Ops     []Op // the calls that show it, if any
}

func (v Violation) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %s", v.Checker, v.What)
	for _, op := range v.Ops {
		fmt.Fprintf(&b, "\n    %s", op)
	}
	return b.String()
}

// LinearizabilityResult is porcupine's verdict on a history.
type LinearizabilityResult struct {
	Result     porcupine.CheckResult
	Info       porcupine.LinearizationInfo
	Operations int
	Violations []Violation
}

// CheckLinearizable checks the key-level operations of ops against the
// model, partitioned by (queue, key). A result of Unknown means the
// search ran out of time, which is reported but not a violation.
func CheckLinearizable(ops []Op, timeout time.Duration) LinearizabilityResult {
	pops := Operations(ops)
	res, info := porcupine.CheckOperationsVerbose(Model(), pops, timeout)
	out := LinearizabilityResult{Result: res, Info: info, Operations: len(pops)}
	if res == porcupine.Illegal {
		out.Violations = explain(ops, pops)
	}
	return out
}

// explain finds the partitions that are not linearizable and, for each,
// the operations around the point where every linearization stops: the
// last operations of the longest one and the first that cannot follow.
func explain(ops []Op, pops []porcupine.Operation) []Violation {
	bySeq := map[int]Op{}
	for _, op := range ops {
		bySeq[op.Seq] = op
	}
	m := Model()
	var out []Violation
	for _, part := range m.Partition(pops) {
		res, info := porcupine.CheckOperationsVerbose(m, part, time.Minute)
		if res != porcupine.Illegal {
			continue
		}
		in := part[0].Input.(input)
		var longest []porcupine.Operation
		for _, p := range info.PartialLinearizationsOperations() {
			for _, lin := range p {
				if len(lin) > len(longest) {
					longest = lin
				}
			}
		}
		done := map[int]bool{}
		for _, op := range longest {
			done[op.Metadata.(int)] = true
		}
		var stuck *porcupine.Operation
		sorted := slices.Clone(part)
		slices.SortStableFunc(sorted, func(a, b porcupine.Operation) int { return cmp.Compare(a.Call, b.Call) })
		for i := range sorted {
			if !done[sorted[i].Metadata.(int)] && !sorted[i].Output.(output).Unknown {
				stuck = &sorted[i]
				break
			}
		}
		var b strings.Builder
		fmt.Fprintf(&b, "queue %q key %q: %d operations, no linearization; the longest linearizes %d:", in.Queue, in.Key, len(part), len(longest))
		var state any = m.Init()
		var states []string
		for _, op := range longest {
			_, state = m.Step(state, op.Input, op.Output)
			states = append(states, m.DescribeState(state))
		}
		from := max(0, len(longest)-8)
		for i, op := range longest[from:] {
			fmt.Fprintf(&b, "\n    [seq %d, client %d, %s .. %s] %s  => %s", op.Metadata.(int), op.ClientId, ms(op.Call), ms(op.Return), m.DescribeOperation(op.Input, op.Output), states[from+i])
		}
		var excerpt []Op
		if stuck != nil {
			fmt.Fprintf(&b, "\n  and cannot go on with [seq %d, client %d, %s .. %s] %s",
				stuck.Metadata.(int), stuck.ClientId, ms(stuck.Call), ms(stuck.Return), m.DescribeOperation(stuck.Input, stuck.Output))
			excerpt = append(excerpt, bySeq[stuck.Metadata.(int)])
		}
		out = append(out, Violation{Checker: "linearizability", What: b.String(), Ops: excerpt})
	}
	return out
}

func ms(t int64) string {
	if t > int64(1000*time.Hour) {
		return "∞"
	}
	return fmt.Sprintf("%.3fs", float64(t)/1e9)
}

type grant struct {
	key           string
	token         uint64
	call, return_ int64
	op            Op
}

// grantsByKey returns every key's grants (unary and work-stream leases
// answered OK), keyed by queue and key.
func grantsByKey(ops []Op) map[string][]grant {
	out := map[string][]grant{}
	for _, op := range ops {
		if op.Outcome != OK || (op.Kind != KindLease && op.Kind != KindWorkLease) {
			continue
		}
		for _, g := range op.Grants {
			k := op.Queue + "/" + g.Key
			out[k] = append(out[k], grant{key: g.Key, token: g.Token, call: op.Call, return_: op.Return, op: op})
		}
	}
	return out
}

// CheckInvariants checks the promises that hold over the whole history,
// whatever the model says:
//
//   - Tokens increase per key: a grant that began after another returned
//     carries a larger token.
//   - A stale token is refused: an Ack or Extend answered OK with token T
//     must not have begun after a grant of a larger token of its key
//     returned. With tokens increasing this is also "at most one valid
//     lease per key at a time": two OK answers on different tokens with
//     no lapse possible between them.
//   - Every error is one the contract answers (no INTERNAL, UNKNOWN, …).
//   - A work stream holds a lease until its ack is answered: the
//     workload's streams have max_in_flight 1 and record each work lease
//     with the call of the ack that freed its slot, so a lease that
//     returned before that ack's answer was pushed into a slot the stream
//     still held.
func CheckInvariants(ops []Op) []Violation {
	var out []Violation
	grants := grantsByKey(ops)
	for k, gs := range grants {
		byReturn := slices.Clone(gs)
		slices.SortFunc(byReturn, func(a, b grant) int { return cmp.Compare(a.return_, b.return_) })
		byCall := slices.Clone(gs)
		slices.SortFunc(byCall, func(a, b grant) int { return cmp.Compare(a.call, b.call) })
		var best *grant
		i := 0
		for _, g := range byCall {
			for i < len(byReturn) && byReturn[i].return_ < g.call {
				if best == nil || byReturn[i].token > best.token {
					best = &byReturn[i]
				}
				i++
			}
			if best != nil && g.token <= best.token {
				out = append(out, Violation{Checker: "invariant", What: fmt.Sprintf("%s: token %x granted after token %x had been (tokens must increase per key)", k, g.token, best.token), Ops: []Op{best.op, g.op}})
			}
		}
	}
	for _, op := range ops {
		if op.Outcome == OK && (op.Kind == KindAck || op.Kind == KindWorkAck || op.Kind == KindExtend) && op.Status == StatusOK {
			for _, g := range grants[op.Queue+"/"+op.Key] {
				if g.token > op.Token && g.return_ < op.Call {
					out = append(out, Violation{Checker: "invariant", What: fmt.Sprintf("%s/%s: %s with token %x answered OK after token %x had been granted (a stale token must be LEASE_LOST)", op.Queue, op.Key, op.Kind, op.Token, g.token), Ops: []Op{g.op, op}})
					break
				}
			}
		}
		if op.Outcome != OK && outsideContract(op.Err) {
			out = append(out, Violation{Checker: "contract", What: fmt.Sprintf("%s answered an error the contract does not name: %s", op.Kind, op.Err), Ops: []Op{op}})
		}
	}
	return append(out, checkWorkOrder(ops)...)
}

// checkWorkOrder finds the work leases that came before the answer to the
// ack that freed their slot (CheckInvariants).
func checkWorkOrder(ops []Op) []Violation {
	type sent struct {
		client int
		call   int64
	}
	answered := map[sent]Op{}
	for _, op := range ops {
		if op.Kind == KindWorkAck && op.Outcome == OK {
			answered[sent{op.Client, op.Call}] = op
		}
	}
	var out []Violation
	for _, op := range ops {
		if op.Kind != KindWorkLease || op.Outcome != OK {
			continue
		}
		if a, ok := answered[sent{op.Client, op.Call}]; ok && a.Return > op.Return {
			var keys []string
			for _, g := range op.Grants {
				keys = append(keys, g.Key)
			}
			out = append(out, Violation{Checker: "invariant", What: fmt.Sprintf("%s: work lease of %s before the answer to the ack of %s that freed its slot (a lease is held until its ack is answered)", op.Queue, strings.Join(keys, ", "), a.Key), Ops: []Op{a, op}})
		}
	}
	return out
}

// SetResult is the set checker's count of a workload of unique keys.
type SetResult struct {
	Added, Ambiguous, Offered int
	Lost, Unexpected          []string
	Duplicated                []string
	Violations                []Violation
}

// CheckSet is a Jepsen-style set checker for queue, where every key is
// Added once by its adder (and, by a worker, at most once more while it
// holds it) and never reused, and the history ends with a drain that
// leased every key left once every fault was healed:
//
//   - lost: an Add answered OK and no grant of its key returned after the
//     Add began;
//   - unexpected: a grant of a key no Add (even a refused one) named;
//   - duplicated: a grant that began after an Ack of success of the key
//     was answered OK, with no Add (OK or ambiguous) that may have come
//     after the acked lease was granted. This is also the "Added while
//     leased is offered exactly once more" rule: a worker's Add during its
//     lease explains one more offer, and the Ack of that offer's success
//     allows none.
func CheckSet(ops []Op, queue string) SetResult {
	var r SetResult
	type addOp struct{ call, ret int64 }
	adds := map[string][]addOp{}
	named := map[string]bool{}
	var acks []Op
	for _, op := range ops {
		if op.Queue != queue {
			continue
		}
		switch {
		case op.Kind == KindAdd:
			named[op.Key] = true
			if op.Outcome == Refused {
				continue
			}
			if op.Client >= 0 && len(adds[op.Key]) == 0 {
				if op.Outcome == OK {
					r.Added++
				} else {
					r.Ambiguous++
				}
			}
			ret := op.Return
			if op.Outcome == Ambiguous {
				ret = 1 << 62
			}
			adds[op.Key] = append(adds[op.Key], addOp{op.Call, ret})
		case (op.Kind == KindAck || op.Kind == KindWorkAck) && op.Outcome == OK && op.Status == StatusOK && op.AckKind == AckSuccess:
			acks = append(acks, op)
		}
	}
	grants := grantsByKey(ops)
	prefix := queue + "/"
	offered := map[string]bool{}
	for k, gs := range grants {
		if !strings.HasPrefix(k, prefix) {
			continue
		}
		key := strings.TrimPrefix(k, prefix)
		offered[key] = true
		if !named[key] {
			r.Unexpected = append(r.Unexpected, key)
			r.Violations = append(r.Violations, Violation{Checker: "set", What: fmt.Sprintf("%s/%s granted, never Added", queue, key), Ops: []Op{gs[0].op}})
		}
	}
	r.Offered = len(offered)
	for _, op := range ops {
		if op.Queue != queue || op.Kind != KindAdd || op.Outcome != OK {
			continue
		}
		found := false
		for _, g := range grants[prefix+op.Key] {
			if g.return_ > op.Call {
				found = true
				break
			}
		}
		if !found && !slices.Contains(r.Lost, op.Key) {
			r.Lost = append(r.Lost, op.Key)
			r.Violations = append(r.Violations, Violation{Checker: "set", What: fmt.Sprintf("%s/%s: Add acknowledged, never offered after it", queue, op.Key), Ops: []Op{op}})
		}
	}
	for _, ack := range acks {
		gs := grants[prefix+ack.Key]
		var acked *grant
		for i := range gs {
			if gs[i].token == ack.Token {
				acked = &gs[i]
			}
		}
		if acked == nil {
			continue // a token the history never saw granted: the invariants speak of it
		}
		explained := false
		for _, a := range adds[ack.Key] {
			if a.ret > acked.call {
				explained = true
			}
		}
		if explained {
			continue
		}
		for _, g := range gs {
			if g.call > ack.Return {
				r.Duplicated = append(r.Duplicated, ack.Key)
				r.Violations = append(r.Violations, Violation{Checker: "set", What: fmt.Sprintf("%s/%s offered again after its Ack of success, with no Add since its lease", queue, ack.Key), Ops: []Op{acked.op, ack, g.op}})
				break
			}
		}
	}
	slices.Sort(r.Lost)
	slices.Sort(r.Unexpected)
	slices.Sort(r.Duplicated)
	return r
}

// RepoRoot finds the repository's root from dir: the nearest parent that
// holds go.work.
func RepoRoot(dir string) (string, error) {
	d, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(d, "go.work")); err == nil {
			return d, nil
		}
		parent := filepath.Dir(d)
		if parent == d {
			return "", fmt.Errorf("no go.work above %s", dir)
		}
		d = parent
	}
}

// WriteArtifacts writes a run's history (history.jsonl), porcupine's
// visualisation of it (linearizability.html) and the report (report.txt)
// into dir, which it creates.
func WriteArtifacts(dir string, ops []Op, lin *LinearizabilityResult, report string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	f, err := os.Create(filepath.Join(dir, "history.jsonl"))
	if err != nil {
		return err
	}
	if err := WriteJSONLines(f, ops); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	if lin != nil && lin.Info.PartialLinearizations() != nil {
		if err := porcupine.VisualizePath(Model(), lin.Info, filepath.Join(dir, "linearizability.html")); err != nil {
			return fmt.Errorf("visualize: %w", err)
		}
	}
	return os.WriteFile(filepath.Join(dir, "report.txt"), []byte(report), 0o644)
}
