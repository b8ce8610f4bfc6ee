package objects

import (
	"encoding/json"
	"testing"
)

// The Client against a real etcd is tested in the module test/sdk
// (objects/client_test.go); these tests need nothing running.

func TestIntOrPercent(t *testing.T) {
	tests := []struct {
		json    string
		total   int
		roundUp bool
		want    int
	}{
		{`1`, 10, true, 1},
		{`"2"`, 10, true, 2},
		{`"25%"`, 10, true, 3},
		{`"25%"`, 10, false, 2},
		{`"100%"`, 3, false, 3},
	}
	for _, tt := range tests {
		var v IntOrPercent
		if err := json.Unmarshal([]byte(tt.json), &v); err != nil {
			t.Fatalf("%s: %v", tt.json, err)
		}
		if got := v.Resolve(tt.total, -1, tt.roundUp); got != tt.want {
			t.Errorf("%s of %d (roundUp %v) = %d, want %d", tt.json, tt.total, tt.roundUp, got, tt.want)
		}
	}
	var nilV *IntOrPercent
	if got := nilV.Resolve(10, 7, true); got != 7 {
		t.Errorf("unset = %d, want the default 7", got)
	}
}

func TestSplitKey(t *testing.T) {
	for _, k := range []string{"", "a", "/a", "a/", "a/b/c"} {
		if _, _, err := SplitKey(k); err == nil {
			t.Errorf("SplitKey(%q) accepted", k)
		}
	}
	if ns, n, err := SplitKey("default/web"); err != nil || ns != "default" || n != "web" {
		t.Errorf("SplitKey(default/web) = %q, %q, %v", ns, n, err)
	}
}

// decodeKnown tells an object T fully describes from one with fields T
// would drop, at any level; only the first may be written from T alone.
func TestDecodeKnown(t *testing.T) {
	for _, tc := range []struct {
		name, stored   string
		known, wantErr bool
	}{
		{"every field known", `{"kind":"Pod","metadata":{"name":"p","namespace":"d","labels":{"a":"b"}},"spec":{"image":"x"},"status":{"phase":"Running"}}`, true, false},
		{"unknown top-level field", `{"kind":"Pod","extra":1,"metadata":{"name":"p","namespace":"d"}}`, false, false},
		{"unknown nested field", `{"kind":"Pod","metadata":{"name":"p","namespace":"d","resourceVersion":"7"}}`, false, false},
		{"trailing value", `{"kind":"Pod"} {"kind":"Pod"}`, false, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, known, err := decodeKnown[Pod]([]byte(tc.stored))
			if tc.wantErr {
				if err == nil {
					t.Errorf("decodeKnown(%s) = %+v, nil error; want the decode error", tc.stored, v)
				}
				return
			}
			if err != nil || known != tc.known {
				t.Fatalf("decodeKnown(%s): known %t, err %v; want known %t", tc.stored, known, err, tc.known)
			}
			if v.Metadata.Name != "p" {
				t.Errorf("decodeKnown(%s) decoded %+v", tc.stored, v)
			}
			if !known {
				return
			}
			b, _ := json.Marshal(v)
			if !jsonEqual(b, []byte(tc.stored)) {
				t.Errorf("encoding the decoded object lost something: %s, stored %s", b, tc.stored)
			}
		})
	}
}

// BenchmarkModifyEncode compares the two ways Modify turns a changed pod
// into the bytes it writes: from the T alone when T knows every stored
// field, and merged over the stored top-level fields otherwise.
func BenchmarkModifyEncode(b *testing.B) {
	stored := []byte(`{"kind":"Pod","metadata":{"name":"rs-abcde","namespace":"default","uid":"0b9f6c8e-4d0a-4f4e-9a53-5f0e0c1d2e3f","labels":{"app":"web"},"ownerReferences":[{"kind":"ReplicaSet","name":"rs","uid":"1c2d3e4f-0000-4000-8000-000000000001"}],"creationTimestamp":"2026-12-05T07:00:00Z"},"spec":{"image":"nginx"},"status":{}}`)
	change := func(p *Pod) { p.Status.Phase = PodRunning }
	b.Run("known", func(b *testing.B) {
		for b.Loop() {
			v, known, err := decodeKnown[Pod](stored)
			if err != nil || !known {
				b.Fatal(known, err)
			}
			change(&v)
			if _, err := json.Marshal(v); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("merge", func(b *testing.B) {
		for b.Loop() {
			var v Pod
			if err := json.Unmarshal(stored, &v); err != nil {
				b.Fatal(err)
			}
			change(&v)
			if _, err := mergeTop(stored, v); err != nil {
				b.Fatal(err)
			}
		}
	})
}
