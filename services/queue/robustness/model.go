package robustness

import (
	"fmt"
	"hash/fnv"
	"strings"

	"github.com/anishathalye/porcupine"
)

// keyState is one key's state as the model knows it. The model is
// nondeterministic (a step returns every state the queue may be in after
// it), and porcupine's power-set construction keeps the set.
type keyState struct {
	State string // StateAbsent, …
	Token uint64 // the live lease's token; 0 when leased by a call whose answer was lost
	Dirty bool   // leased and announced again since
	// Soft: absent by a work stream's ack of success, which the queue may
	// answer before it is durable; a crash or a new leader may bring the
	// key back as pending, until a later durable write of the key.
	Soft bool
}

func (s keyState) String() string {
	switch s.State {
	case StateLeased:
		d := ""
		if s.Dirty {
			d = ",dirty"
		}
		if s.Token == 0 {
			return "leased(?" + d + ")"
		}
		return fmt.Sprintf("leased(%x%s)", s.Token, d)
	case StateAbsent:
		if s.Soft {
			return "absent(soft)"
		}
	}
	return s.State
}

// input is one key-level operation for porcupine.
type input struct {
	Kind    Kind
	Queue   string
	Key     string
	Delay   bool   // Add with a delay
	Token   uint64 // Lease's grant; Ack's, Extend's token
	AckKind string
	Stream  bool // an ack on the work stream
	// Phantom: a Lease of this queue (or a work stream) whose answer was
	// lost began before this operation returned: it may have granted the
	// key to a token no one knows, at any moment since.
	Phantom bool
}

// output is what the queue answered, for this key.
type output struct {
	Unknown   bool // ambiguous: applied or not
	Queued    bool
	Status    string
	Forgotten int
	State     string
	Dirty     bool
}

// lapses returns the states s may move to by itself: a lease may lapse at
// any moment (expiry, a work stream that ends, a new leader, which offers
// every key leased under the old one again), a delayed key becomes pending
// when its time comes, and a soft absence may be undone by a crash.
// Attempts are not modelled, and parking on attempts is off in the runs
// (--max-attempts 0), so a lapse always lands on pending. Once a Lease
// of the key's queue went unanswered (phantom), a pending key may also
// have been leased by it, to a token no one knows.
func lapses(s keyState, phantom bool) []keyState {
	switch {
	case s.State == StateLeased, s.State == StateDelayed, s.State == StateAbsent && s.Soft:
		return []keyState{s, {State: StatePending}}
	case s.State == StatePending && phantom:
		return []keyState{s, {State: StateLeased}}
	}
	return []keyState{s}
}

// apply returns the states after in answered out, from state c, or none
// if the queue could not have answered so from c. out.Unknown asks for
// the states where it took effect, whatever it answered; the caller adds
// the one where it did not.
func apply(c keyState, in input, out output) []keyState {
	switch in.Kind {
	case KindAdd:
		next, queued := addTo(c, in.Delay)
		var ok []keyState
		for i := range next {
			if out.Unknown || out.Queued == queued[i] {
				ok = append(ok, next[i])
			}
		}
		return ok
	case KindLease, KindWorkLease:
		if c.State != StatePending {
			return nil
		}
		return []keyState{{State: StateLeased, Token: in.Token}}
	case KindAck, KindWorkAck:
		live := c.State == StateLeased && c.Token == in.Token && in.Token != 0
		if !out.Unknown && out.Status == StatusLeaseLost {
			if live {
				return nil
			}
			return []keyState{c}
		}
		if !live {
			return nil
		}
		if c.Dirty {
			return []keyState{{State: StatePending}}
		}
		switch in.AckKind {
		case AckSuccess:
			return []keyState{{State: StateAbsent, Soft: in.Stream}}
		case AckFailure, AckRequeue:
			return []keyState{{State: StateDelayed}}
		case AckTerminal:
			return []keyState{{State: StateParked}}
		}
		return nil
	case KindExtend:
		live := c.State == StateLeased && c.Token == in.Token && in.Token != 0
		if out.Unknown || (out.Status == StatusOK) == live {
			return []keyState{c}
		}
		return nil
	case KindForget:
		forgotten := 0
		if c.State != StateAbsent {
			forgotten = 1
		}
		if !out.Unknown && out.Forgotten != forgotten {
			return nil
		}
		if forgotten == 0 {
			return []keyState{c}
		}
		return []keyState{{State: StateAbsent}}
	case KindInspect:
		if out.State != c.State || (c.State == StateLeased && out.Dirty != c.Dirty) {
			return nil
		}
		return []keyState{c}
	}
	return nil
}

// addTo returns the states an Add may leave, each with whether the key
// counts as queued (docs/design.md's table and its "queued + collapsed"
// rule). An Add with a delay on a delayed key is queued only if it asks
// for an earlier time, which the model does not know: both.
func addTo(c keyState, delay bool) ([]keyState, []bool) {
	fresh := keyState{State: StatePending}
	if delay {
		fresh.State = StateDelayed
	}
	switch c.State {
	case StateAbsent, StateParked:
		return []keyState{fresh}, []bool{true}
	case StatePending:
		return []keyState{c}, []bool{false}
	case StateDelayed:
		if delay {
			return []keyState{c, c}, []bool{true, false}
		}
		return []keyState{fresh}, []bool{true}
	case StateLeased:
		if c.Dirty {
			return []keyState{c}, []bool{false}
		}
		d := c
		d.Dirty = true
		return []keyState{d}, []bool{true}
	}
	return nil, nil
}

// stepModel is the model's step: a lapse may come first, then the operation.
func stepModel(state any, in, out any) []any {
	s, i, o := state.(keyState), in.(input), out.(output)
	var next []any
	for _, c := range lapses(s, i.Phantom) {
		for _, n := range apply(c, i, o) {
			next = append(next, n)
		}
		if o.Unknown {
			next = append(next, c)
		}
	}
	return next
}

// Model is the per-key model of the queue for porcupine, partitioned by
// (queue, key).
func Model() porcupine.Model {
	nm := porcupine.NondeterministicModel{
		Partition: func(history []porcupine.Operation) [][]porcupine.Operation {
			idx := map[string]int{}
			var out [][]porcupine.Operation
			for _, op := range history {
				in := op.Input.(input)
				k := in.Queue + "\x00" + in.Key
				i, ok := idx[k]
				if !ok {
					i = len(out)
					idx[k] = i
					out = append(out, nil)
				}
				out[i] = append(out[i], op)
			}
			return out
		},
		Init:  func() []any { return []any{keyState{State: StateAbsent}} },
		Step:  stepModel,
		Equal: func(a, b any) bool { return a.(keyState) == b.(keyState) },
		Hash: func(s any) uint64 {
			h := fnv.New64a()
			fmt.Fprint(h, s.(keyState))
			return h.Sum64()
		},
		DescribeOperation: describe,
		DescribeState:     func(s any) string { return s.(keyState).String() },
	}
	return nm.ToModel()
}

func describe(in, out any) string {
	i, o := in.(input), out.(output)
	var b strings.Builder
	fmt.Fprintf(&b, "%s(%s", i.Kind, i.Key)
	if i.Delay {
		b.WriteString(", delay")
	}
	if i.Token != 0 {
		fmt.Fprintf(&b, ", %x", i.Token)
	}
	if i.AckKind != "" {
		b.WriteString(", " + i.AckKind)
	}
	b.WriteString(") -> ")
	switch {
	case o.Unknown:
		b.WriteString("?")
	case i.Kind == KindAdd && o.Queued:
		b.WriteString("queued")
	case i.Kind == KindAdd:
		b.WriteString("collapsed")
	case i.Kind == KindLease, i.Kind == KindWorkLease:
		fmt.Fprintf(&b, "%x", i.Token)
	case i.Kind == KindForget:
		fmt.Fprint(&b, o.Forgotten)
	case i.Kind == KindInspect:
		b.WriteString(o.State)
		if o.Dirty {
			b.WriteString(",dirty")
		}
	default:
		b.WriteString(o.Status)
	}
	return b.String()
}

// Operations turns a history into porcupine's key-level operations:
//
//   - A refused call changed nothing and is left out.
//   - An ambiguous call returns at "infinity" (after every other call) and
//     its output is unknown, so the model keeps both the state where it
//     took effect and the one where it did not. An ambiguous Inspect says
//     nothing and is left out.
//   - A Lease is split by key: each granted key is an operation of its
//     key's partition. A Lease that granted nothing cannot be partitioned
//     and is left out; so is the fact that it found nothing to grant.
//   - A Lease whose answer was lost may have granted any key of its queue,
//     and so may a work stream that broke. Such a call is left out too,
//     and every operation of its queue that returns after it began is
//     marked phantom: the model lets a pending key be leased to a token no
//     one knows. This gives up a little (a phantom lease of a key is not
//     seen once such a call happened), where an operation per key of the
//     queue, open until the end, made the search exponential.
func Operations(ops []Op) []porcupine.Operation {
	var inf int64
	phantomFrom := map[string]int64{}
	for _, op := range ops {
		inf = max(inf, op.Call, op.Return)
		if (op.Kind == KindLease || op.Kind == KindWorkLease) && op.Outcome == Ambiguous {
			if t, ok := phantomFrom[op.Queue]; !ok || op.Call < t {
				phantomFrom[op.Queue] = op.Call
			}
		}
	}
	inf++
	var out []porcupine.Operation
	add := func(op Op, in input, o output) {
		ret := op.Return
		if o.Unknown {
			ret = inf
		}
		if t, ok := phantomFrom[op.Queue]; ok && ret >= t {
			in.Phantom = true
		}
		out = append(out, porcupine.Operation{ClientId: op.Client, Input: in, Call: op.Call, Output: o, Return: ret, Metadata: op.Seq})
	}
	for _, op := range ops {
		if op.Outcome == Refused {
			continue
		}
		unknown := op.Outcome == Ambiguous
		in := input{Kind: op.Kind, Queue: op.Queue, Key: op.Key, Delay: op.Delay > 0, Token: op.Token, AckKind: op.AckKind, Stream: op.Kind == KindWorkAck}
		o := output{Unknown: unknown, Queued: op.Queued, Status: op.Status, Forgotten: op.Forgotten, State: op.State, Dirty: op.Dirty}
		switch op.Kind {
		case KindInspect:
			if !unknown {
				add(op, in, o)
			}
		case KindLease, KindWorkLease:
			if unknown {
				continue
			}
			for _, g := range op.Grants {
				in.Key, in.Token = g.Key, g.Token
				add(op, in, o)
			}
		default:
			add(op, in, o)
		}
	}
	return out
}
