package profile

import (
	"net/http"
	"net/http/httptest"
	"net/http/pprof"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	gpprof "github.com/google/pprof/profile"
)

// TestTop: flat time goes to the innermost function of a sample (an
// inlined call's lines run from the innermost out), cumulative time once to
// every function on its stack, recursion included once.
func TestTop(t *testing.T) {
	fn := map[string]*gpprof.Function{}
	for i, n := range []string{"main", "work", "hash", "inlined"} {
		fn[n] = &gpprof.Function{ID: uint64(i + 1), Name: n}
	}
	loc := func(id uint64, names ...string) *gpprof.Location {
		l := &gpprof.Location{ID: id}
		for _, n := range names {
			l.Line = append(l.Line, gpprof.Line{Function: fn[n]})
		}
		return l
	}
	lMain, lWork, lHash, lInl := loc(1, "main"), loc(2, "work"), loc(3, "hash"), loc(4, "inlined", "work")
	ms := func(n int64) []int64 { return []int64{n, n * int64(time.Millisecond)} }
	p := &gpprof.Profile{
		SampleType: []*gpprof.ValueType{{Type: "samples", Unit: "count"}, {Type: "cpu", Unit: "nanoseconds"}},
		Sample: []*gpprof.Sample{
			{Location: []*gpprof.Location{lHash, lWork, lMain}, Value: ms(50)},
			{Location: []*gpprof.Location{lWork, lWork, lMain}, Value: ms(30)}, // recursion
			{Location: []*gpprof.Location{lInl, lMain}, Value: ms(20)},
		},
		Location: []*gpprof.Location{lMain, lWork, lHash, lInl},
		Function: []*gpprof.Function{fn["main"], fn["work"], fn["hash"], fn["inlined"]},
	}
	r := Result{Name: "x", Profile: p, CPU: 100 * time.Millisecond, Wall: time.Second}
	got := r.Top(10)
	want := []Func{
		{"hash", 50 * time.Millisecond, 50 * time.Millisecond},
		{"work", 30 * time.Millisecond, 100 * time.Millisecond},
		{"inlined", 20 * time.Millisecond, 20 * time.Millisecond},
		{"main", 0, 100 * time.Millisecond},
	}
	if len(got) != len(want) {
		t.Fatalf("top %+v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("top[%d] = %+v, want %+v", i, got[i], want[i])
		}
	}
	if top2 := r.Top(2); len(top2) != 2 || top2[1].Name != "work" {
		t.Errorf("top 2: %+v", top2)
	}
	// By cumulative time: main and work (100 ms each, work first by its
	// flat time), then hash.
	if cum := r.TopCum(3); len(cum) != 3 || cum[0].Name != "work" || cum[1].Name != "main" || cum[2].Name != "hash" {
		t.Errorf("top 3 by cumulative time: %+v", cum)
	}
	var b strings.Builder
	if err := WriteTop(&b, []Result{r}, 2); err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{"x: 0.1 s of CPU over 1.0 s (0.10 cores)", "  by flat CPU:", "   50.0%  50.0%  hash", "   30.0% 100.0%  work", "  by cumulative CPU:"} {
		if !strings.Contains(b.String(), line+"\n") {
			t.Errorf("WriteTop lacks %q:\n%s", line, b.String())
		}
	}
	if FileName("bench (etcd)") != "bench__etcd_.pprof" {
		t.Errorf("file name %q", FileName("bench (etcd)"))
	}
}

//go:noinline
func burn(stop *atomic.Bool) (x uint64) {
	for !stop.Load() {
		for i := range 100000 {
			x = x*31 + uint64(i)
		}
	}
	return x
}

// TestStartHTTP profiles a server of net/http/pprof (this process, as a
// child's --enable-pprof serves it) in one-second chunks while a goroutine
// burns CPU: the merged profile has at least two chunks' CPU, the burner
// on top, and is written for go tool pprof.
func TestStartHTTP(t *testing.T) {
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	srv := httptest.NewServer(mux)
	defer srv.Close()

	var stop atomic.Bool
	done := make(chan struct{})
	go func() { burn(&stop); close(done) }()
	c := StartHTTP(t.Context(), "burner", strings.TrimPrefix(srv.URL, "http://"), time.Second)
	time.Sleep(1500 * time.Millisecond)
	r, err := c.Stop()
	stop.Store(true)
	<-done
	if err != nil {
		t.Fatal(err)
	}
	if r.Wall < 2*time.Second || r.CPU < 200*time.Millisecond {
		t.Fatalf("stopped after %v with %v of CPU: want the chunk in flight waited for", r.Wall, r.CPU)
	}
	if top := r.Top(1); len(top) != 1 || !strings.HasSuffix(top[0].Name, ".burn") {
		t.Fatalf("top %+v, want burn", top)
	}
	path, err := r.Write(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := gpprof.Parse(f); err != nil || filepath.Base(path) != "burner.pprof" {
		t.Fatalf("%s: %v", path, err)
	}
}

// TestStartSelf profiles this process between Start and Stop.
func TestStartSelf(t *testing.T) {
	c, err := StartSelf("self")
	if err != nil {
		t.Fatal(err)
	}
	var stop atomic.Bool
	time.AfterFunc(300*time.Millisecond, func() { stop.Store(true) })
	burn(&stop)
	r, err := c.Stop()
	if err != nil {
		t.Fatal(err)
	}
	if r.CPU <= 0 || r.Profile == nil {
		t.Fatalf("%+v", r)
	}
}

// TestStopWithoutProfile: a process that never answered leaves an error,
// not an empty profile.
func TestStopWithoutProfile(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	defer srv.Close()
	c := StartHTTP(t.Context(), "gone", strings.TrimPrefix(srv.URL, "http://"), time.Second)
	if _, err := c.Stop(); err == nil || !strings.Contains(err.Error(), "404") {
		t.Fatalf("stop: %v", err)
	}
}
