package queue_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	queueclient "github.com/batonrun/baton/client/queue"
	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
)

// segments returns the data directory's log segments, oldest first.
func segments(t *testing.T, dir string) []string {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "wal-*.log"))
	if err != nil || len(m) == 0 {
		t.Fatalf("no segment in %s: %v", dir, err)
	}
	slices.Sort(m)
	return m
}

// waitExit waits for a process that must stop on its own, and returns its
// log.
func (p *proc) waitExit(limit time.Duration) string {
	p.t.Helper()
	select {
	case <-p.exited:
	case <-time.After(limit):
		p.t.Fatalf("baton-queue still running after %v", limit)
	}
	b, _ := os.ReadFile(filepath.Join(p.logDir, fmt.Sprintf("run-%03d.log", p.n)))
	return string(b)
}

// TestDamagedLogRefusedAndRepaired damages the log of a real baton-queue
// in the two ways recovery once dropped silently: a bit flipped in the last
// complete record (after a clean stop and after kill -9), and the log cut to
// half its size after a clean stop.
// The queue must refuse to start, naming the file and offset, and keep
// refusing; `baton-queue repair` then names the lost keys, and the queue
// starts with every other key.
func TestDamagedLogRefusedAndRepaired(t *testing.T) {
	for _, damage := range []string{"flipped bit in the last record", "flipped bit in the last record after kill -9", "cut to half its size"} {
		t.Run(damage, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
			defer cancel()
			p := newProc(t)
			p.start()
			conn := dial(t, p.grpcAddr)
			p.waitServing(ctx, conn)
			c := queueclient.New(conn, queueclient.WithBackoff(queueclient.Backoff{Attempts: 1}))
			var all []string
			for batch := range 40 {
				keys := make([]string, 100)
				for i := range keys {
					keys[i] = fmt.Sprintf("ns/b%02d-k%03d", batch, i)
				}
				if _, err := c.Add(ctx, "damaged", keys, queueclient.AddOptions{}); err != nil {
					t.Fatal(err)
				}
				all = append(all, keys...)
			}
			if strings.HasSuffix(damage, "kill -9") {
				// No clean shutdown is recorded: only the frame itself can
				// tell damage from a torn write.
				if _, err := p.signal(syscall.SIGKILL, 15*time.Second); err == nil {
					t.Fatal("baton-queue exited cleanly on SIGKILL")
				}
			} else if _, err := p.signal(syscall.SIGTERM, 15*time.Second); err != nil {
				t.Fatalf("SIGTERM: %v", err)
			}

			seg := segments(t, p.dir)[len(segments(t, p.dir))-1]
			b, err := os.ReadFile(seg)
			if err != nil {
				t.Fatal(err)
			}
			var off int
			if damage == "cut to half its size" {
				b = b[:len(b)/2]
				off = -1 // where the last whole frame ends
			} else {
				off = len(b) - 20 // inside the last frame's records
				b[off] ^= 0x01
			}
			if err := os.WriteFile(seg, b, 0o600); err != nil {
				t.Fatal(err)
			}
			for range 2 { // refusing changes nothing: it refuses again
				p.start()
				log := p.waitExit(30 * time.Second)
				if !strings.Contains(log, "corrupt") || !strings.Contains(log, seg+" at offset") {
					t.Fatalf("baton-queue on a damaged log did not refuse naming %s:\n%s", seg, log)
				}
			}

			out, err := exec.Command(binary, "repair", "--data-dir", p.dir).CombinedOutput()
			if err != nil {
				t.Fatalf("baton-queue repair: %v\n%s", err, out)
			}
			report := string(out)
			t.Logf("baton-queue repair:\n%s", report)
			if !strings.Contains(report, seg+" at offset") || !strings.Contains(report, "key lost by the repair") {
				t.Fatalf("the repair's report names no damage or no lost key:\n%s", report)
			}
			p.start()
			p.waitServing(ctx, conn)
			st, err := c.Stats(ctx, "damaged")
			if err != nil {
				t.Fatal(err)
			}
			// Each Add of 100 keys is one frame: the damaged one is lost
			// whole; the report names what can still be read of it.
			kept := int(st[0].GetPending())
			lost := strings.Count(report, "now absent")
			whole := damage != "cut to half its size"
			if kept%100 != 0 || kept == 0 || (whole && kept != len(all)-100) || kept >= len(all) || lost == 0 || lost > len(all)-kept {
				t.Fatalf("after the repair %d keys pending and %d named lost, of %d:\n%s", kept, lost, len(all), report)
			}
			it, err := c.Inspect(ctx, "damaged", all[0])
			if err != nil || it.GetState() != queuev1.ItemState_ITEM_STATE_PENDING {
				t.Fatalf("the first key after the repair: %v %v", it, err)
			}
		})
	}
}
