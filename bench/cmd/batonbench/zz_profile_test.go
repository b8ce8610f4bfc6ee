package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime/pprof"
	"testing"
	"time"

	"github.com/batonrun/baton/bench/internal/baton"
	"github.com/batonrun/baton/bench/internal/peers"
)

func TestZZProfileStream(t *testing.T) {
	if os.Getenv("PROFILE_STREAM") == "" {
		t.Skip()
	}
	ctx := context.Background()
	bin, _ := filepath.Abs("../../../bin/baton-queue")
	s, err := baton.StartWith(ctx, bin, t.TempDir(), baton.Options{Args: []string{"--enable-pprof"}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var q peers.Queue = &peers.BatonStream{Client: s.Client, Name: "side"}
	if os.Getenv("PROFILE_STREAM") == "unary" {
		q = peers.Baton{Client: s.Client, Name: "side"}
	}
	done := make(chan struct{})
	go func() {
		time.Sleep(2 * time.Second)
		f, _ := os.Create("/tmp/prof-bench.pb.gz")
		pprof.StartCPUProfile(f)
		resp, err := http.Get(fmt.Sprintf("http://%s/debug/pprof/profile?seconds=5", s.HTTPAddr))
		pprof.StopCPUProfile()
		f.Close()
		if err == nil {
			g, _ := os.Create("/tmp/prof-queue.pb.gz")
			io.Copy(g, resp.Body)
			resp.Body.Close()
			g.Close()
		}
		close(done)
	}()
	res, err := peers.Cycle(ctx, q, "k", 1, 64, 9*time.Second)
	<-done
	t.Logf("rate %.0f keys/s p50 %.2f ms, err %v", res.Rate(), res.P50, err)
}
