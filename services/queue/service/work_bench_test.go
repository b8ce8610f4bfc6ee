package service_test

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	queueclient "github.com/batonrun/baton/client/queue"
)

// BenchmarkSingleKeyCycle is one caller's Add of one key, then its lease
// and ack, through a real server over loopback gRPC: through the work
// stream, and with unary Lease and Ack for comparison.
func BenchmarkSingleKeyCycle(b *testing.B) {
	b.Run("stream", func(b *testing.B) {
		h := startBench(b)
		ctx := b.Context()
		s, err := h.c.Work(ctx, "c", queueclient.WorkOptions{Worker: "w", MaxInFlight: 1})
		if err != nil {
			b.Fatal(err)
		}
		defer s.Close()
		for i := 0; b.Loop(); i++ {
			if _, err := h.c.Add(ctx, "c", []string{fmt.Sprint("k", i)}, queueclient.AddOptions{}); err != nil {
				b.Fatal(err)
			}
			ev, err := s.Recv()
			if err != nil || ev.Lease == nil {
				b.Fatal(ev, err)
			}
			if err := s.Ack(queueclient.Ack{Key: ev.Lease.Key, Token: ev.Lease.Token, Outcome: queueclient.Success()}); err != nil {
				b.Fatal(err)
			}
			if ev, err := s.Recv(); err != nil || ev.Ack == nil {
				b.Fatal(ev, err)
			}
		}
	})
	b.Run("stream-parallel", func(b *testing.B) {
		// Many callers, each with a stream of its own (b.SetParallelism
		// callers per core), as make bench's 64-caller shape: what the
		// queue spends per key when calls overlap.
		h := startBench(b)
		ctx := b.Context()
		var next atomic.Int64
		b.SetParallelism(32)
		b.RunParallel(func(pb *testing.PB) {
			s, err := h.c.Work(ctx, "c", queueclient.WorkOptions{Worker: "w", MaxInFlight: 1})
			if err != nil {
				b.Error(err)
				return
			}
			defer s.Close()
			var lease *queueclient.Lease
			for pb.Next() {
				key := fmt.Sprint("k", next.Add(1))
				if _, err := h.c.Add(ctx, "c", []string{key}, queueclient.AddOptions{}); err != nil {
					b.Error(err)
					return
				}
				// The lease pushed may be another caller's key (the
				// streams share the queue), and may come before the
				// answer to the last ack.
				for lease == nil {
					ev, err := s.Recv()
					if err != nil {
						b.Error(err)
						return
					}
					lease = ev.Lease
				}
				if err := s.Ack(queueclient.Ack{Key: lease.Key, Token: lease.Token, Outcome: queueclient.Success()}); err != nil {
					b.Error(err)
					return
				}
				lease = nil
			}
		})
	})
	b.Run("unary", func(b *testing.B) {
		h := startBench(b)
		ctx := b.Context()
		for i := 0; b.Loop(); i++ {
			if _, err := h.c.Add(ctx, "c", []string{fmt.Sprint("k", i)}, queueclient.AddOptions{}); err != nil {
				b.Fatal(err)
			}
			ls, err := h.c.Lease(ctx, "c", queueclient.LeaseOptions{Worker: "w", Wait: time.Second})
			if err != nil || len(ls) != 1 {
				b.Fatal(ls, err)
			}
			if _, err := h.c.Ack(ctx, "c", []queueclient.Ack{{Key: ls[0].Key, Token: ls[0].Token, Outcome: queueclient.Success()}}); err != nil {
				b.Fatal(err)
			}
		}
	})
}
