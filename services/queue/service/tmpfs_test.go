package service_test

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	queueclient "github.com/batonrun/baton/client/queue"
	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// mountTmpfs mounts a tmpfs of size bytes on a new directory and unmounts
// it when the test ends. It skips the test where mounting is not allowed
// (it needs root, as CI has).
func mountTmpfs(t *testing.T, size int) string {
	t.Helper()
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, fmt.Sprintf("size=%d", size)); err != nil {
		t.Skipf("cannot mount a tmpfs here (%v): this test needs root", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, syscall.MNT_DETACH) })
	return dir
}

// fill writes a file in dir until the file system is full, and returns its
// path.
func fill(t *testing.T, dir string) string {
	t.Helper()
	p := filepath.Join(dir, "filler")
	f, err := os.Create(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 4096)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("fill the tmpfs: %v", err)
			}
			return p
		}
	}
}

func readyz(t *testing.T, h *harness) int {
	t.Helper()
	r, err := http.Get("http://" + h.httpAddr + "/readyz")
	if err != nil {
		return 0
	}
	io.Copy(io.Discard, r.Body)
	r.Body.Close()
	return r.StatusCode
}

func waitReadyz(t *testing.T, h *harness, want int) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for readyz(t, h) != want {
		if time.Now().After(deadline) {
			t.Fatalf("/readyz did not answer %d within 15 s", want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestFullTmpfs runs the queue on a real tmpfs and fills it: an Add and an
// Ack get RESOURCE_EXHAUSTED and leave no trace, /readyz says so, and once
// space is back /readyz recovers, the retried Ack finds its lease, and a
// restart shows exactly the calls that succeeded.
func TestFullTmpfs(t *testing.T) {
	dir := mountTmpfs(t, 4<<20)
	h := startIn(t, dir)
	ctx := ctxT(t)
	q := "tmpfs"
	if _, err := h.raw.Add(ctx, &queuev1.AddRequest{Queue: q, Keys: []string{"a", "b"}}); err != nil {
		t.Fatal(err)
	}
	lr, err := h.raw.Lease(ctx, &queuev1.LeaseRequest{Queue: q, Worker: "w", MaxItems: 1})
	if err != nil || len(lr.GetLeases()) != 1 {
		t.Fatalf("lease: %v %v", lr, err)
	}
	lease := lr.GetLeases()[0]
	waitReadyz(t, h, http.StatusOK)
	before := snap(t, h, q)

	filler := fill(t, dir)
	// More than the page the segment's end may still have free.
	refused := keysOf(500, 100)
	_, err = h.raw.Add(ctx, &queuev1.AddRequest{Queue: q, Keys: refused})
	if status.Code(err) != codes.ResourceExhausted || !strings.Contains(err.Error(), "nothing was stored") {
		t.Fatalf("Add on a full tmpfs = %v, want RESOURCE_EXHAUSTED saying nothing was stored", err)
	}
	ack := &queuev1.AckRequest{Queue: q, Acks: []*queuev1.Ack{{Key: lease.GetKey(), Token: lease.GetToken(),
		Outcome: &queuev1.Ack_Failure{Failure: &queuev1.AckFailure{Error: strings.Repeat("e", 4000)}}}}}
	if _, err := h.raw.Ack(ctx, ack); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("Ack on a full tmpfs = %v, want RESOURCE_EXHAUSTED", err)
	}
	// The Go client says why, as an error to test with errors.Is.
	if _, err := h.c.Add(ctx, q, refused, queueclient.AddOptions{}); !errors.Is(err, queueclient.ErrNoSpace) {
		t.Fatalf("the Go client's Add on a full tmpfs = %v, want ErrNoSpace", err)
	}
	if after := snap(t, h, q); !after.equal(before) {
		t.Fatalf("refused calls changed the queue:\n before %v\n after  %v", before, after)
	}
	waitReadyz(t, h, http.StatusServiceUnavailable)

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	waitReadyz(t, h, http.StatusOK)
	ar, err := h.raw.Ack(ctx, ack)
	if err != nil || ar.GetResults()[0].GetStatus() != queuev1.AckStatus_ACK_STATUS_OK {
		t.Fatalf("the retried Ack once space is back: %v %v, want OK", ar, err)
	}
	kept := refused[:100]
	if _, err := h.raw.Add(ctx, &queuev1.AddRequest{Queue: q, Keys: kept}); err != nil {
		t.Fatalf("Add once space is back: %v", err)
	}
	want := snap(t, h, q)

	if _, err := h.stop(); err != nil {
		t.Fatal(err)
	}
	h = startIn(t, dir)
	got := snap(t, h, q)
	if len(got.items) != len(want.items) || len(got.items) != 2+len(kept) {
		t.Fatalf("after a restart %d keys, before it %d, want %d", len(got.items), len(want.items), 2+len(kept))
	}
	it, err := h.c.Inspect(ctx, q, lease.GetKey())
	if err != nil || it.GetAttempts() != 1 || len(it.GetLastError()) != 4000 {
		t.Fatalf("the failed key after a restart: %v %v", it, err)
	}
	if it, err := h.c.Inspect(ctx, q, refused[len(refused)-1]); err != nil || it.GetState() != queuev1.ItemState_ITEM_STATE_ABSENT {
		t.Fatalf("a key whose Add was refused, after a restart: %v %v", it, err)
	}
}
