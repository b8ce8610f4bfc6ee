package faultfs

import (
	"bytes"
	"errors"
	"slices"
	"syscall"
	"testing"
	"time"
)

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// write creates dir/name holding data, syncing the file if sync.
func write(t *testing.T, m *FS, name string, data []byte, sync bool) {
	t.Helper()
	f, err := m.Create(name)
	must(t, err)
	_, err = f.Write(data)
	must(t, err)
	if sync {
		must(t, f.Sync())
	}
	must(t, f.Close())
}

// A power loss keeps each file's bytes up to its last Sync and each
// directory's entries as of its last SyncDir, and nothing else.
func TestCrashKeepsWhatWasSynced(t *testing.T) {
	d := New(1)
	m := d.Mount()
	must(t, m.MkdirAll("/data"))
	write(t, m, "/data/a", []byte("synced"), true)
	must(t, m.SyncDir("/data"))
	f, err := m.OpenAppend("/data/a")
	must(t, err)
	_, err = f.Write([]byte(" and not"))
	must(t, err)
	write(t, m, "/data/b", []byte("entry never synced"), true)
	if got := string(d.Contents("/data/a")); got != "synced and not" {
		t.Fatalf("before the crash, a reads %q", got)
	}
	if n := d.Unsynced("/data/a"); n != int64(len(" and not")) {
		t.Errorf("Unsynced(a) = %d before the crash, want %d", n, len(" and not"))
	}

	d.Crash()
	if got := string(d.Contents("/data/a")); got != "synced" {
		t.Errorf("after the crash, a holds %q, want the synced bytes alone", got)
	}
	if got := d.Names("/data"); !slices.Equal(got, []string{"a"}) {
		t.Errorf("after the crash, /data holds %v, want [a]: b's entry was never synced", got)
	}
}

// Renames and removals are the directory's: undone by a power loss until
// SyncDir.
func TestCrashUndoesUnsyncedEntries(t *testing.T) {
	d := New(1)
	m := d.Mount()
	must(t, m.MkdirAll("/data"))
	write(t, m, "/data/old", []byte("x"), true)
	write(t, m, "/data/gone", []byte("y"), true)
	must(t, m.SyncDir("/data"))
	must(t, m.Rename("/data/old", "/data/new"))
	must(t, m.Remove("/data/gone"))
	d.Crash()
	if got := d.Names("/data"); !slices.Equal(got, []string{"gone", "old"}) {
		t.Fatalf("unsynced rename and removal: /data holds %v after the crash, want [gone old]", got)
	}
	m = d.Mount()
	must(t, m.Rename("/data/old", "/data/new"))
	must(t, m.Remove("/data/gone"))
	must(t, m.SyncDir("/data"))
	d.Crash()
	if got := d.Names("/data"); !slices.Equal(got, []string{"new"}) {
		t.Fatalf("synced rename and removal: /data holds %v after the crash, want [new]", got)
	}
}

// What ran before a power loss can neither read nor change what survives
// it: every call through an old mount or file fails with EIO.
func TestCrashEndsTheGeneration(t *testing.T) {
	d := New(1)
	m := d.Mount()
	must(t, m.MkdirAll("/data"))
	f, err := m.Create("/data/a")
	must(t, err)
	must(t, m.SyncDir("/data"))
	d.Crash()
	if _, err := f.Write([]byte("late")); !errors.Is(err, syscall.EIO) {
		t.Errorf("write through a file of the old generation: %v, want EIO", err)
	}
	if _, err := m.ReadFile("/data/a"); !errors.Is(err, syscall.EIO) {
		t.Errorf("read through the old mount: %v, want EIO", err)
	}
	if b, err := d.Mount().ReadFile("/data/a"); err != nil || len(b) != 0 {
		t.Errorf("the new mount reads %q, %v; want an empty file", b, err)
	}
}

// A torn crash keeps the synced bytes and at most what followed them,
// sometimes zeroed: never bytes that were not written.
func TestCrashTornKeepsAPrefix(t *testing.T) {
	kept := map[int]bool{}
	for seed := range uint64(40) {
		d := New(seed)
		m := d.Mount()
		must(t, m.MkdirAll("/data"))
		write(t, m, "/data/a", []byte("head"), true)
		must(t, m.SyncDir("/data"))
		f, err := m.OpenAppend("/data/a")
		must(t, err)
		_, err = f.Write([]byte("-tail"))
		must(t, err)
		d.CrashTorn()
		got := d.Contents("/data/a")
		if !bytes.HasPrefix(got, []byte("head")) || len(got) > len("head-tail") {
			t.Fatalf("seed %d: a holds %q after a torn crash", seed, got)
		}
		extra := got[len("head"):]
		if !bytes.HasPrefix([]byte("-tail"), extra) && !bytes.Equal(extra, make([]byte, len(extra))) {
			t.Fatalf("seed %d: a holds %q: the unsynced part is neither what was written nor zeros", seed, got)
		}
		kept[len(extra)] = true
	}
	if len(kept) < 2 {
		t.Errorf("40 torn crashes all kept %v bytes of the unsynced tail: they are not torn", kept)
	}
}

// Failures on demand: a full disk cuts a write short with ENOSPC, a
// failing sync returns EIO and keeps nothing.
func TestInjectedFailures(t *testing.T) {
	d := New(1)
	m := d.Mount()
	must(t, m.MkdirAll("/data"))
	f, err := m.Create("/data/a")
	must(t, err)
	must(t, m.SyncDir("/data"))
	d.SetFree(3)
	if n, err := f.Write([]byte("12345")); n != 3 || !errors.Is(err, syscall.ENOSPC) {
		t.Errorf("write of 5 bytes with 3 free: %d, %v; want 3, ENOSPC", n, err)
	}
	d.SetFree(-1)
	d.FailSyncFrom(1, true)
	if err := f.Sync(); !errors.Is(err, syscall.EIO) {
		t.Errorf("failing sync: %v, want EIO", err)
	}
	must(t, f.Sync()) // once: the next succeeds
	if syncs, writes := d.Counts(); syncs != 3 || writes != 1 {
		t.Errorf("counts: %d syncs, %d writes; want 3, 1", syncs, writes)
	}
	d.CrashAfter(1, false)
	if _, err := f.Write([]byte("x")); !errors.Is(err, syscall.EIO) {
		t.Errorf("the operation CrashAfter named: %v, want EIO", err)
	}
	if got := string(d.Contents("/data/a")); got != "123" {
		t.Errorf("after the crash a holds %q, want the synced 123", got)
	}
}

// A lagging disk answers syncs at once and keeps what they cover only
// later: a power loss before then loses it, after then keeps it.
func TestLaggingSyncs(t *testing.T) {
	d := New(1)
	m := d.Mount()
	must(t, m.MkdirAll("/data"))
	write(t, m, "/data/kept", []byte("before"), true)
	must(t, m.SyncDir("/data"))
	d.LagSyncs(time.Hour)
	write(t, m, "/data/late", []byte("x"), true)
	must(t, m.SyncDir("/data"))
	f, err := m.OpenAppend("/data/kept")
	must(t, err)
	_, err = f.Write([]byte(" and after"))
	must(t, err)
	must(t, f.Sync())
	d.Crash()
	if got := d.Names("/data"); !slices.Equal(got, []string{"kept"}) {
		t.Errorf("/data holds %v after a crash within the lag, want [kept]", got)
	}
	if got := string(d.Contents("/data/kept")); got != "before" {
		t.Errorf("kept holds %q after a crash within the lag, want what was synced before it", got)
	}

	// Once due, a lagged sync is done by the next operation; LagSyncs(0)
	// does the rest at once.
	m = d.Mount()
	d.LagSyncs(time.Nanosecond)
	write(t, m, "/data/due", []byte("y"), true)
	must(t, m.SyncDir("/data"))
	d.LagSyncs(time.Hour)
	write(t, m, "/data/flushed", []byte("z"), true)
	must(t, m.SyncDir("/data"))
	d.LagSyncs(0)
	d.Crash()
	if got := d.Names("/data"); !slices.Equal(got, []string{"due", "flushed", "kept"}) {
		t.Errorf("/data holds %v, want [due flushed kept]", got)
	}
}

// CrashAll cuts every disk's power: each keeps only what it had synced.
func TestCrashAll(t *testing.T) {
	var disks []*Disk
	for range 3 {
		d := New(1)
		m := d.Mount()
		must(t, m.MkdirAll("/data"))
		write(t, m, "/data/a", []byte("synced"), true)
		must(t, m.SyncDir("/data"))
		write(t, m, "/data/b", []byte("not"), false)
		disks = append(disks, d)
	}
	if n, e := CrashAll(disks...); n != 9 || e != 3 {
		t.Errorf("CrashAll lost %d bytes and %d entries, want 9 and 3 (b on each disk)", n, e)
	}
	for i, d := range disks {
		if got := d.Names("/data"); !slices.Equal(got, []string{"a"}) {
			t.Errorf("disk %d holds %v after CrashAll, want [a]", i, got)
		}
	}
}
