package checkpoint

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

func TestCodecRoundTrip(t *testing.T) {
	const p = "/registry/pods/"
	for _, keys := range [][]string{
		nil,
		{p + "a/b"},
		{p + "a/b", p + "a/bb", p + "a/c", p + "b/a"},
		{p + "ns/" + strings.Repeat("x", 4000), p + "ns/" + strings.Repeat("x", 4001), p + "ns/y"},
		{p + "ünï/cödé", p + "ünï/cödé2"},
	} {
		data, raw, err := encode(p, keys)
		if err != nil {
			t.Fatal(err)
		}
		got, err := decode(p, data, len(keys), raw)
		if err != nil || !slices.Equal(got, keys) && len(keys) > 0 {
			t.Errorf("decode(encode(%q)) = %q, %v", keys, got, err)
		}
	}
	if _, _, err := encode(p, []string{p + "b", p + "a"}); err == nil {
		t.Error("encode accepted unsorted keys")
	}
	if _, _, err := encode(p, []string{"/registry/jobs/a/b"}); err == nil {
		t.Error("encode accepted a key under another prefix")
	}
}

func TestDecodeRefusesDamage(t *testing.T) {
	const p = "/p/"
	keys := []string{p + "a/1", p + "a/2", p + "b/1"}
	data, raw, err := encode(p, keys)
	if err != nil {
		t.Fatal(err)
	}
	for name, f := range map[string]func() ([]string, error){
		"fewer keys":   func() ([]string, error) { return decode(p, data, 2, raw) },
		"more bytes":   func() ([]string, error) { return decode(p, data, 3, raw+1) },
		"fewer bytes":  func() ([]string, error) { return decode(p, data, 3, raw-1) },
		"cut":          func() ([]string, error) { return decode(p, data[:len(data)/2], 3, raw) },
		"not gzip":     func() ([]string, error) { return decode(p, []byte("hello"), 3, raw) },
		"garbage flip": func() ([]string, error) { d := bytes.Clone(data); d[len(d)/2] ^= 0xff; return decode(p, d, 3, raw) },
	} {
		if _, err := f(); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: decode = %v, want ErrCorrupt", name, err)
		}
	}
}

// podKeys returns n pod keys as a cluster names them: 100 namespaces of
// 20 deployments, pods named <deployment>-<10-character template hash>-<5
// random characters> (the worst case: one ReplicaSet each, none scaled
// down).
func podKeys(n int) []string {
	rng := rand.New(rand.NewPCG(1, 2))
	const alnum = "bcdfghjklmnpqrstvwxz2456789"
	rnd := func(k int) string {
		b := make([]byte, k)
		for i := range b {
			b[i] = alnum[rng.IntN(len(alnum))]
		}
		return string(b)
	}
	keys := make([]string, 0, n)
	seen := map[string]bool{}
	hash := map[string]string{} // a deployment's pods share its template hash
	for len(keys) < n {
		ns := fmt.Sprintf("team-%02d", rng.IntN(100))
		dep := fmt.Sprintf("service-%d", rng.IntN(20))
		if hash[ns+dep] == "" {
			hash[ns+dep] = rnd(10)
		}
		k := "/registry/pods/" + ns + "/" + dep + "-" + hash[ns+dep] + "-" + rnd(5)
		if !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

// 40,000 pods must stay cheap: one chunk, a fraction of etcd's request
// limit, a few bytes a key.
func TestRecordOf40000Pods(t *testing.T) {
	keys := podKeys(40000)
	data, raw, err := encode("/registry/pods/", keys)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("40,000 pod keys: %d bytes of keys, %d front-coded, %d gzipped (%.1f bytes a key)",
		len(strings.Join(keys, "")), raw, len(data), float64(len(data))/float64(len(keys)))
	if len(data) > 320<<10 {
		t.Errorf("record of 40,000 pods is %d bytes, want at most 320 KiB", len(data))
	}
	if got, err := decode("/registry/pods/", data, len(keys), raw); err != nil || !slices.Equal(got, keys) {
		t.Errorf("round trip of 40,000 pods: %v", err)
	}
}

func BenchmarkEncode40000Pods(b *testing.B) {
	keys := podKeys(40000)
	for b.Loop() {
		if _, _, err := encode("/registry/pods/", keys); err != nil {
			b.Fatal(err)
		}
	}
}

func TestSplit(t *testing.T) {
	if got := split(nil, 4); len(got) != 1 || len(got[0]) != 0 {
		t.Errorf("split(nil) = %q, want one empty chunk", got)
	}
	got := split([]byte("abcdefghij"), 4)
	if want := []string{"abcd", "efgh", "ij"}; fmt.Sprintf("%s", got) != fmt.Sprint(want) {
		t.Errorf("split = %s, want %v", got, want)
	}
}

// FuzzCodec: whatever decode is given it refuses or returns keys that
// encode back to the same bytes' meaning; sorted unique keys round-trip.
func FuzzCodec(f *testing.F) {
	f.Add([]byte("a/b\x00a/c\x00b/d"), []byte{})
	f.Add([]byte(""), []byte("\x1f\x8b"))
	f.Fuzz(func(t *testing.T, joined, garbage []byte) {
		const p = "/p/"
		set := map[string]bool{}
		for _, k := range strings.Split(string(joined), "\x00") {
			set[p+k] = true
		}
		var keys []string
		for k := range set {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		data, raw, err := encode(p, keys)
		if err != nil {
			t.Fatal(err)
		}
		got, err := decode(p, data, len(keys), raw)
		if err != nil || !slices.Equal(got, keys) {
			t.Fatalf("round trip of %q: %q, %v", keys, got, err)
		}
		// Garbage never panics and is refused or decodes to sorted keys.
		if out, err := decode(p, garbage, len(keys), raw); err == nil && !slices.IsSorted(out) {
			t.Fatalf("decode of garbage gave unsorted keys %q", out)
		}
	})
}
