package record

import (
	"encoding/binary"
	"errors"
	"github.com/batonrun/baton/client/queue/limits"
	"github.com/batonrun/baton/services/queue/internal/format"
	"strings"
	"testing"
	"time"
)

func TestRoundTrip(t *testing.T) {
	recs := []Record{
		{Kind: KindPut, Queue: "pods", Key: "default/web", State: StatePending, Priority: 1, PendingSince: 1700000000000000000},
		{Kind: KindPut, Queue: "jobs", Key: "ns/j", State: StateDelayed, Priority: 2, Attempts: 7, NotBefore: 42, PendingSince: -1, LastError: "boom"},
		{Kind: KindPut, Queue: "q", Key: "k", State: StateParked, Priority: 3, Attempts: 1<<32 - 1},
		{Kind: KindDelete, Queue: "pods", Key: "default/web"},
		{Kind: KindQueue, Queue: "replicasets"},
	}
	var buf []byte
	for i := range recs {
		buf = Append(buf, &recs[i], 1)
	}
	for i, want := range recs {
		got, n, err := Decode(buf, 1)
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		if got != want {
			t.Fatalf("record %d: got %+v, want %+v", i, got, want)
		}
		buf = buf[n:]
	}
	if len(buf) != 0 {
		t.Fatalf("%d bytes left over", len(buf))
	}
}

func TestDecodeRejects(t *testing.T) {
	good := Append(nil, &Record{Kind: KindPut, Queue: "q", Key: "k", State: StatePending, Priority: 1}, 1)
	tests := map[string][]byte{
		"empty":          {},
		"unknown kind":   {'X', 1, 'q'},
		"truncated":      good[:len(good)-1],
		"bad state":      Append(nil, &Record{Kind: KindPut, Queue: "q", Key: "k", State: 4, Priority: 1}, 1),
		"bad priority":   Append(nil, &Record{Kind: KindPut, Queue: "q", Key: "k", State: StatePending, Priority: 0}, 1),
		"empty queue":    Append(nil, &Record{Kind: KindDelete, Key: "k"}, 1),
		"empty key":      Append(nil, &Record{Kind: KindDelete, Queue: "q"}, 1),
		"huge length":    {'D', 0xff, 0xff, 0xff, 0xff, 0x0f},
		"invalid utf8":   {'Q', 2, 0xff, 0xfe},
		"bad varint":     {'Q', 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff},
		"long queue":     Append(nil, &Record{Kind: KindQueue, Queue: string(make([]byte, 64))}, 1),
		"attempts range": {'P', 1, 'q', 1, 'k', 2, 1, 0x80, 0x80, 0x80, 0x80, 0x10, 0, 0, 0},
	}
	for name, b := range tests {
		t.Run(name, func(t *testing.T) {
			if _, _, err := Decode(b, 1); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("err = %v, want ErrCorrupt", err)
			}
		})
	}
}

// FuzzDecode checks that no input makes Decode panic, and that whatever it
// accepts survives a round trip unchanged.
func FuzzDecode(f *testing.F) {
	f.Add(Append(nil, &Record{Kind: KindPut, Queue: "q", Key: "k", State: StateDelayed, Priority: 2, Attempts: 3, NotBefore: 5, LastError: "e"}, 1))
	f.Add(Append(nil, &Record{Kind: KindDelete, Queue: "q", Key: "k"}, 1))
	f.Add(Append(nil, &Record{Kind: KindQueue, Queue: "q"}, 1))
	f.Add([]byte{'P'})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, n, err := Decode(b, 1)
		if err != nil {
			return
		}
		if n <= 0 || n > len(b) {
			t.Fatalf("used %d of %d bytes", n, len(b))
		}
		again, _, err := Decode(Append(nil, &r, 1), 1)
		if err != nil || again != r {
			t.Fatalf("round trip: %+v -> %+v, %v", r, again, err)
		}
	})
}

// FuzzRoundTrip holds the codec to the API's limits: every record the
// queue can write from a request the API accepts decodes to itself. Values
// the API refuses (a queue that is not a DNS label, a bad key) are skipped;
// error text is stored as the API stores it, cut by limits.ErrorText. The
// seeds sit at every limit, and one past it.
func FuzzRoundTrip(f *testing.F) {
	maxQ := strings.Repeat("q", limits.MaxQueueNameBytes)
	maxK := strings.Repeat("é", limits.MaxKeyBytes/2)
	far := time.Now().Add(limits.MaxDelay).UnixNano()
	for _, s := range []struct {
		queue, key, err string
		state, prio     uint8
		attempts        uint32
		notBefore, ps   int64
	}{
		{"q", "k", "", StatePending, 1, 0, 0, 1},
		{maxQ, maxK, strings.Repeat("e", limits.MaxErrorBytes), StateDelayed, 3, 1<<32 - 1, far, 0},
		{maxQ, maxK, strings.Repeat("e", 3<<20), StateParked, 2, 7, 0, -1 << 62},
		{"q", "k", "\xff\xfe not UTF-8", StateDelayed, 1, 1, far, 0},
		{"q", strings.Repeat("k", limits.MaxKeyBytes+1), "", StatePending, 1, 0, 0, 0},
		{strings.Repeat("q", 64), "k", "", StatePending, 1, 0, 0, 0},
	} {
		f.Add(s.queue, s.key, s.err, s.state, s.prio, s.attempts, s.notBefore, s.ps)
	}
	f.Fuzz(func(t *testing.T, queue, key, errText string, state, prio uint8, attempts uint32, notBefore, pendingSince int64) {
		if !limits.ValidQueueName(queue) || !limits.ValidKey(key) {
			return
		}
		state = []uint8{StatePending, StateDelayed, StateParked}[state%3]
		prio = 1 + prio%3
		for _, want := range []Record{
			{Kind: KindPut, Queue: queue, Key: key, State: state, Priority: prio, Attempts: attempts,
				NotBefore: notBefore, PendingSince: pendingSince, LastError: limits.ErrorText(errText)},
			{Kind: KindDelete, Queue: queue, Key: key},
			{Kind: KindQueue, Queue: queue},
		} {
			got, n, err := Decode(Append(nil, &want, 1), 1)
			if err != nil || got != want || n != len(Append(nil, &want, 1)) {
				t.Fatalf("%+v: decoded %+v (%d bytes), %v", want, got, n, err)
			}
		}
	})
}

// TestDecodeCutsLegacyErrors: a log written before error text was cut at
// the API may hold a longer text, or one that is not UTF-8. Such a log made
// the queue refuse to start; it now decodes, with the text cut as the API
// cuts it today.
func TestDecodeCutsLegacyErrors(t *testing.T) {
	for _, text := range []string{strings.Repeat("x", 3<<20), "bad \xff byte", strings.Repeat("\xff", 70<<10)} {
		// The encoding of an old writer: the text as it came.
		b := []byte{'P', 1, 'q', 1, 'k', StateDelayed, 1, 2}
		b = binary.AppendVarint(b, 42)
		b = binary.AppendVarint(b, 0)
		b = binary.AppendUvarint(b, uint64(len(text)))
		b = append(b, text...)
		r, n, err := Decode(b, 1)
		if err != nil || n != len(b) {
			t.Fatalf("legacy error of %d bytes: %v (used %d of %d bytes)", len(text), err, n, len(b))
		}
		if want := limits.ErrorText(text); r.LastError != want {
			t.Errorf("legacy error of %d bytes decoded to %d bytes, want the %d of limits.ErrorText", len(text), len(r.LastError), len(want))
		}
	}
	// The encoder never writes what the decoder would cut.
	long := Append(nil, &Record{Kind: KindPut, Queue: "q", Key: "k", State: StateParked, Priority: 1, LastError: strings.Repeat("x", 1<<20)}, 1)
	if len(long) > limits.MaxErrorBytes+64 {
		t.Errorf("a 1 MiB error was encoded in %d bytes", len(long))
	}
}

// TestVersionNotRead: a record version this build does not read is
// refused as such (format.ErrNewer), naming it, never taken for damage.
func TestVersionNotRead(t *testing.T) {
	b := Append(nil, &Record{Kind: KindQueue, Queue: "q"}, 1)
	_, _, err := Decode(b, format.Records.Current+1)
	if !errors.Is(err, format.ErrNewer) || errors.Is(err, ErrCorrupt) {
		t.Fatalf("a record of the next version: %v, want format.ErrNewer", err)
	}
}
