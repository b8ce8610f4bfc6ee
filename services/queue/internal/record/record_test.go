package record

import (
	"errors"
	"testing"
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
		buf = Append(buf, &recs[i])
	}
	for i, want := range recs {
		got, n, err := Decode(buf)
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
	good := Append(nil, &Record{Kind: KindPut, Queue: "q", Key: "k", State: StatePending, Priority: 1})
	tests := map[string][]byte{
		"empty":          {},
		"unknown kind":   {'X', 1, 'q'},
		"truncated":      good[:len(good)-1],
		"bad state":      Append(nil, &Record{Kind: KindPut, Queue: "q", Key: "k", State: 4, Priority: 1}),
		"bad priority":   Append(nil, &Record{Kind: KindPut, Queue: "q", Key: "k", State: StatePending, Priority: 0}),
		"empty queue":    Append(nil, &Record{Kind: KindDelete, Key: "k"}),
		"empty key":      Append(nil, &Record{Kind: KindDelete, Queue: "q"}),
		"huge length":    {'D', 0xff, 0xff, 0xff, 0xff, 0x0f},
		"invalid utf8":   {'Q', 2, 0xff, 0xfe},
		"bad varint":     {'Q', 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff},
		"long queue":     Append(nil, &Record{Kind: KindQueue, Queue: string(make([]byte, 64))}),
		"attempts range": {'P', 1, 'q', 1, 'k', 2, 1, 0x80, 0x80, 0x80, 0x80, 0x10, 0, 0, 0},
	}
	for name, b := range tests {
		t.Run(name, func(t *testing.T) {
			if _, _, err := Decode(b); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("err = %v, want ErrCorrupt", err)
			}
		})
	}
}

// FuzzDecode checks that no input makes Decode panic, and that whatever it
// accepts survives a round trip unchanged.
func FuzzDecode(f *testing.F) {
	f.Add(Append(nil, &Record{Kind: KindPut, Queue: "q", Key: "k", State: StateDelayed, Priority: 2, Attempts: 3, NotBefore: 5, LastError: "e"}))
	f.Add(Append(nil, &Record{Kind: KindDelete, Queue: "q", Key: "k"}))
	f.Add(Append(nil, &Record{Kind: KindQueue, Queue: "q"}))
	f.Add([]byte{'P'})
	f.Fuzz(func(t *testing.T, b []byte) {
		r, n, err := Decode(b)
		if err != nil {
			return
		}
		if n <= 0 || n > len(b) {
			t.Fatalf("used %d of %d bytes", n, len(b))
		}
		again, _, err := Decode(Append(nil, &r))
		if err != nil || again != r {
			t.Fatalf("round trip: %+v -> %+v, %v", r, again, err)
		}
	})
}
