package refs

import (
	"testing"
	"time"
)

func TestReferences(t *testing.T) {
	ctx := t.Context()
	if r, err := Fsync(ctx, t.TempDir(), 20*time.Millisecond); err != nil || r.Items == 0 {
		t.Fatalf("fsync: %+v %v", r, err)
	}
	if r, err := Echo(ctx, 2, 20*time.Millisecond); err != nil || r.Calls == 0 || len(r.Latencies) != int(r.Calls) {
		t.Fatalf("echo: %+v %v", r, err)
	}
	r, err := Carry(ctx, 2, 1000, 20*time.Millisecond)
	if err != nil || r.Calls == 0 || r.Items != 1000*r.Calls {
		t.Fatalf("carry: %+v %v", r, err)
	}
}

func TestKeys(t *testing.T) {
	k := Keys("c01", 5, 2)
	if len(k) != 2 || k[0] != "c01/0000005" || len(k[1]) != 11 {
		t.Fatalf("%q", k)
	}
}
