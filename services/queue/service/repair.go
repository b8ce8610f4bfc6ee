package service

import (
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/batonrun/baton/services/queue/internal/store"
)

// Repair runs `baton-queue repair`: it reads the log in dir past every
// damaged stretch, writes what it could read as the new log (unless
// dryRun), and reports to out what was damaged and which keys the damage
// named; each of those keys is also logged at ERROR. The queue must not be
// running on dir (the directory's lock enforces it).
func Repair(dir string, dryRun bool, out io.Writer, log *slog.Logger) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if _, err := os.Stat(dir); err != nil {
		return fmt.Errorf("repair: %w", err)
	}
	unlock, err := lockDataDir(dir)
	if err != nil {
		return err
	}
	defer unlock()
	if err := checkNotRestoring(dir); err != nil {
		return err
	}
	if err := refuseReplicatedLog(dir, "repair reads a single member's store; a replicated member whose log is damaged is emptied and started, and catches up from the others"); err != nil {
		return err
	}
	rep, err := store.Repair(store.Options{Dir: dir, Logger: log}, dryRun)
	if err != nil {
		return err
	}
	if len(rep.Damage) == 0 {
		fmt.Fprintf(out, "%s: no damage found; nothing to repair\n", dir)
		return nil
	}
	fmt.Fprintf(out, "%s: %d damaged stretches:\n", dir, len(rep.Damage))
	for _, d := range rep.Damage {
		fmt.Fprintf(out, "  %v (%d bytes lost)\n", d, d.Bytes)
		log.Error("damaged log", "file", d.File, "offset", d.Offset, "bytes", d.Bytes, "why", d.Why, "dry_run", dryRun)
	}
	if len(rep.Keys) > 0 {
		fmt.Fprintf(out, "keys the damaged bytes named, and their state after the repair:\n")
	}
	for _, k := range rep.Keys {
		now := store.Describe(k.Now)
		fmt.Fprintf(out, "  %s %s: was %s, now %s\n", k.Queue, k.Key, store.Describe(&k.Was), now)
		log.Error("key lost by the repair", "queue", k.Queue, "key", k.Key, "was", store.Describe(&k.Was), "now", now, "dry_run", dryRun)
	}
	fmt.Fprintf(out, "what could not be read at all is lost without a name: restart the observer (its list announces every object again)\n")
	if dryRun {
		fmt.Fprintf(out, "dry run: nothing changed; %d keys in %d queues would be kept\n", rep.KeptKeys, rep.KeptQueues)
		return nil
	}
	fmt.Fprintf(out, "kept %d keys in %d queues; the damaged files are in %s\n", rep.KeptKeys, rep.KeptQueues, rep.Moved)
	return nil
}
