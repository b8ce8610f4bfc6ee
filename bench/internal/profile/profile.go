// Package profile takes CPU profiles of a benchmark's processes while a
// workload runs: of a child process serving net/http/pprof (its
// --enable-pprof), and of the bench process itself. Then it merges each
// process's profile, writes it for `go tool pprof`, and names its top
// functions.
//
// net/http/pprof's profile handler profiles for a whole number of seconds
// fixed by the request, and a request cancelled early loses its profile, so
// a child is profiled in back-to-back one-second chunks until Stop, which
// waits for the chunk in flight: the profile covers the workload and at
// most a second after it.
package profile

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"time"

	gpprof "github.com/google/pprof/profile"
)

// Collector profiles one process until Stop.
type Collector struct {
	name  string
	start time.Time
	stop  chan struct{}
	done  chan struct{}
	// self: the bench process's profile is being written to buf.
	self bool
	buf  bytes.Buffer

	mu     sync.Mutex
	chunks []*gpprof.Profile
	err    error
}

// StartHTTP profiles the process serving net/http/pprof on httpAddr
// (host:port), in chunks of chunk (rounded to whole seconds, at least one),
// until Stop.
func StartHTTP(ctx context.Context, name, httpAddr string, chunk time.Duration) *Collector {
	c := &Collector{name: name, start: time.Now(), stop: make(chan struct{}), done: make(chan struct{})}
	secs := max(1, int(chunk.Round(time.Second)/time.Second))
	url := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", httpAddr, secs)
	go func() {
		defer close(c.done)
		// At least one chunk, however soon Stop comes.
		for {
			p, err := fetch(ctx, url, time.Duration(secs)*time.Second+30*time.Second)
			c.mu.Lock()
			if err != nil {
				c.err = err
			} else {
				c.chunks = append(c.chunks, p)
			}
			c.mu.Unlock()
			if err != nil {
				return
			}
			select {
			case <-c.stop:
				return
			default:
			}
		}
	}()
	return c
}

func fetch(ctx context.Context, url string, timeout time.Duration) (*gpprof.Profile, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s: %s", url, resp.Status, strings.TrimSpace(string(body)))
	}
	return gpprof.ParseData(body)
}

// StartSelf profiles this process (runtime/pprof) until Stop. Only one CPU
// profile of a process can run at a time.
func StartSelf(name string) (*Collector, error) {
	c := &Collector{name: name, start: time.Now(), self: true, done: make(chan struct{})}
	close(c.done)
	if err := pprof.StartCPUProfile(&c.buf); err != nil {
		return nil, fmt.Errorf("profile %s: %w", name, err)
	}
	return c, nil
}

// Result is one process's profile over a workload.
type Result struct {
	Name    string
	Profile *gpprof.Profile
	Wall    time.Duration // from Start to Stop
	CPU     time.Duration // the CPU time the samples add up to
}

// Stop ends the profiling (for a child, once the chunk in flight is in)
// and returns the merged profile. A chunk that failed after others
// succeeded (the process exited) leaves the profile of those.
func (c *Collector) Stop() (Result, error) {
	if c.self {
		pprof.StopCPUProfile()
		p, err := gpprof.Parse(&c.buf)
		if err != nil {
			return Result{}, fmt.Errorf("profile %s: %w", c.name, err)
		}
		c.chunks = []*gpprof.Profile{p}
	} else {
		close(c.stop)
		<-c.done
	}
	r := Result{Name: c.name, Wall: time.Since(c.start)}
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.chunks) == 0 {
		err := c.err
		if err == nil {
			err = errors.New("no profile taken")
		}
		return r, fmt.Errorf("profile %s: %w", c.name, err)
	}
	p, err := gpprof.Merge(c.chunks)
	if err != nil {
		return r, fmt.Errorf("profile %s: merge: %w", c.name, err)
	}
	r.Profile = p
	if i := cpuIndex(p); i >= 0 {
		for _, s := range p.Sample {
			r.CPU += time.Duration(s.Value[i])
		}
	}
	return r, nil
}

// cpuIndex is the index of the sample value that is CPU time in
// nanoseconds, -1 if there is none.
func cpuIndex(p *gpprof.Profile) int {
	for i, st := range p.SampleType {
		if st.Type == "cpu" && st.Unit == "nanoseconds" {
			return i
		}
	}
	return -1
}

// Func is a function's share of a profile: Flat in the function itself,
// Cum in it and what it calls.
type Func struct {
	Name      string
	Flat, Cum time.Duration
}

// Top is the n functions with the most flat CPU time (ties by cumulative
// time, then name).
func (r Result) Top(n int) []Func {
	fs := r.funcs()
	slices.SortFunc(fs, func(a, b Func) int {
		if c := cmp.Compare(b.Flat, a.Flat); c != 0 {
			return c
		}
		if c := cmp.Compare(b.Cum, a.Cum); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	return fs[:min(n, len(fs))]
}

// TopCum is the n functions with the most cumulative CPU time (ties by
// flat time, then name).
func (r Result) TopCum(n int) []Func {
	fs := r.funcs()
	slices.SortFunc(fs, func(a, b Func) int {
		if c := cmp.Compare(b.Cum, a.Cum); c != 0 {
			return c
		}
		if c := cmp.Compare(b.Flat, a.Flat); c != 0 {
			return c
		}
		return strings.Compare(a.Name, b.Name)
	})
	return fs[:min(n, len(fs))]
}

// funcs is every function's flat and cumulative CPU time.
func (r Result) funcs() []Func {
	if r.Profile == nil {
		return nil
	}
	i := cpuIndex(r.Profile)
	if i < 0 {
		return nil
	}
	by := map[string]*Func{}
	get := func(name string) *Func {
		f := by[name]
		if f == nil {
			f = &Func{Name: name}
			by[name] = f
		}
		return f
	}
	for _, s := range r.Profile.Sample {
		v := time.Duration(s.Value[i])
		seen := map[string]bool{}
		leaf := true
		for _, loc := range s.Location {
			// A location's lines run from the innermost inlined call out.
			for _, ln := range loc.Line {
				name := "?"
				if ln.Function != nil {
					name = ln.Function.Name
				}
				if leaf {
					get(name).Flat += v
					leaf = false
				}
				if !seen[name] {
					seen[name] = true
					get(name).Cum += v
				}
			}
		}
	}
	fs := make([]Func, 0, len(by))
	for _, f := range by {
		fs = append(fs, *f)
	}
	return fs
}

// Write stores the profile in dir as NAME.pprof (gzipped, as `go tool
// pprof` reads it) and returns the path.
func (r Result) Write(dir string) (string, error) {
	if r.Profile == nil {
		return "", fmt.Errorf("profile %s: nothing to write", r.Name)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", err
	}
	path := filepath.Join(dir, FileName(r.Name))
	f, err := os.Create(path)
	if err != nil {
		return "", err
	}
	if err := r.Profile.Write(f); err != nil {
		f.Close()
		return "", err
	}
	return path, f.Close()
}

// FileName is the file Write names a process's profile: its name with
// anything but letters, digits, '-' and '.' made '_', and .pprof.
func FileName(name string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '.' {
			return r
		}
		return '_'
	}, name) + ".pprof"
}

// Summary is the result's first line: the CPU it used over its wall time.
func (r Result) Summary() string {
	cores := 0.0
	if r.Wall > 0 {
		cores = r.CPU.Seconds() / r.Wall.Seconds()
	}
	return fmt.Sprintf("%s: %.1f s of CPU over %.1f s (%.2f cores)", r.Name, r.CPU.Seconds(), r.Wall.Seconds(), cores)
}

// WriteTop writes the summary of each result and its top n functions as
// plain text, by flat CPU and by cumulative CPU (as go tool pprof's -top
// and -top -cum), each function's flat and cumulative share of its
// process's CPU.
func WriteTop(w io.Writer, rs []Result, n int) error {
	var b strings.Builder
	for i, r := range rs {
		if i > 0 {
			b.WriteByte('\n')
		}
		fmt.Fprintln(&b, r.Summary())
		for _, by := range []struct {
			name string
			fs   []Func
		}{{"flat", r.Top(n)}, {"cumulative", r.TopCum(n)}} {
			fmt.Fprintf(&b, "  by %s CPU:\n  %6s %6s  %s\n", by.name, "flat%", "cum%", "function")
			for _, f := range by.fs {
				fmt.Fprintf(&b, "  %5.1f%% %5.1f%%  %s\n", Share(f.Flat, r.CPU), Share(f.Cum, r.CPU), f.Name)
			}
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// Share is part as a percentage of whole (0 if whole is 0).
func Share(part, whole time.Duration) float64 {
	if whole <= 0 {
		return 0
	}
	return 100 * float64(part) / float64(whole)
}
