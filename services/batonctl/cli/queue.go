package cli

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	queueclient "github.com/batonrun/baton/client/queue"
	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
	"github.com/batonrun/baton/services/batonctl/internal/printer"
)

// outputJSON defines -o for a command that prints a table or JSON, and
// returns a check of its value.
func outputJSON(fs *flag.FlagSet) (*string, func() error) {
	output := fs.String("o", "", "output format: json (default: a table)")
	return output, func() error {
		if *output != "" && *output != "json" {
			return usagef("unknown output format %q (json)", *output)
		}
		return nil
	}
}

// queueCall runs f with the queue's client within --timeout, its error
// worded for the command line.
func (a *app) queueCall(ctx context.Context, f func(ctx context.Context, q *queueclient.Client) error) error {
	q, err := a.queue()
	if err != nil {
		return err
	}
	octx, cancel := a.opCtx(ctx)
	defer cancel()
	if err := f(octx, q); err != nil {
		return a.unreachable("the queue", a.queueAddr, "--queue-addr", err)
	}
	return nil
}

func setupQueueStats(fs *flag.FlagSet, a *app) runFunc {
	output, checkOutput := outputJSON(fs)
	return func(ctx context.Context, pos []string) error {
		if len(pos) > 1 {
			return usagef("usage: batonctl queue stats [queue] [-o json]")
		}
		if err := checkOutput(); err != nil {
			return err
		}
		name := ""
		if len(pos) == 1 {
			name = pos[0]
		}
		var stats []*queuev1.QueueStats
		if err := a.queueCall(ctx, func(ctx context.Context, q *queueclient.Client) (err error) {
			stats, err = q.Stats(ctx, name)
			return err
		}); err != nil {
			return err
		}
		if *output == "json" {
			return writeProto(a.Stdout, &queuev1.StatsResponse{Queues: stats})
		}
		tbl := printer.NewTable(a.Stdout, "QUEUE", "PENDING", "DELAYED", "LEASED", "DIRTY", "PARKED",
			"ADDS", "COLLAPSED", "LEASES", "ACKS", "FAILURES", "EXPIRED", "OLDEST", "LONGEST-LEASE")
		for _, s := range stats {
			tbl.Row(s.GetQueue(), n(s.GetPending()), n(s.GetDelayed()), n(s.GetLeased()), n(s.GetDirty()), n(s.GetParked()),
				n(s.GetAddsTotal()), n(s.GetCollapsedTotal()), n(s.GetLeasesTotal()), n(s.GetAcksTotal()),
				n(s.GetFailuresTotal()), n(s.GetLeaseExpirationsTotal()), dur(s.GetOldestPendingAge()), dur(s.GetLongestLeaseAge()))
		}
		return tbl.Flush()
	}
}

// queueListLimit is how many keys queue list asks for.
const queueListLimit = 1000

func setupQueueList(fs *flag.FlagSet, a *app) runFunc {
	output, checkOutput := outputJSON(fs)
	state := fs.String("state", "", "list only keys in this state: pending, delayed, leased or parked")
	return func(ctx context.Context, pos []string) error {
		if len(pos) != 1 {
			return usagef("usage: batonctl queue list <queue> [--state pending|delayed|leased|parked] [-o json]")
		}
		if err := checkOutput(); err != nil {
			return err
		}
		st := queuev1.ItemState_ITEM_STATE_UNSPECIFIED
		if *state != "" {
			v, ok := queuev1.ItemState_value["ITEM_STATE_"+strings.ToUpper(*state)]
			if !ok || v == 0 {
				return usagef("unknown state %q (pending, delayed, leased or parked)", *state)
			}
			st = queuev1.ItemState(v)
		}
		var items []*queuev1.Item
		if err := a.queueCall(ctx, func(ctx context.Context, q *queueclient.Client) (err error) {
			items, err = q.List(ctx, pos[0], st, queueListLimit)
			return err
		}); err != nil {
			return err
		}
		if *output == "json" {
			return writeProto(a.Stdout, &queuev1.ListResponse{Items: items})
		}
		if len(items) == 0 {
			fmt.Fprintf(a.Stderr, "No keys in queue %s.\n", printer.Escape(pos[0]))
			return nil
		}
		now := a.now()
		tbl := printer.NewTable(a.Stdout, "KEY", "STATE", "ATTEMPTS", "DIRTY", "WORKER", "WAITING", "READY-IN", "LAST-ERROR")
		for _, it := range items {
			tbl.Row(it.GetKey(), stateName(it.GetState()), n(uint64(it.GetAttempts())), fmt.Sprint(it.GetDirty()),
				orDash(it.GetWorker()), since(it.GetPendingSince(), now), until(it.GetNotBefore(), now), orDash(short(it.GetLastError())))
		}
		return tbl.Flush()
	}
}

func setupQueueInspect(fs *flag.FlagSet, a *app) runFunc {
	output, checkOutput := outputJSON(fs)
	return func(ctx context.Context, pos []string) error {
		if len(pos) != 2 {
			return usagef("usage: batonctl queue inspect <queue> <key> [-o json]")
		}
		if err := checkOutput(); err != nil {
			return err
		}
		var item *queuev1.Item
		if err := a.queueCall(ctx, func(ctx context.Context, q *queueclient.Client) (err error) {
			item, err = q.Inspect(ctx, pos[0], pos[1])
			return err
		}); err != nil {
			return err
		}
		if *output == "json" {
			return writeProto(a.Stdout, item)
		}
		fmt.Fprintf(a.Stdout, "%-14s%s\n%-14s%s\n", "Queue:", printer.Escape(pos[0]), "Key:", printer.Escape(pos[1]))
		printItem(a.Stdout, "", item, a.now())
		return nil
	}
}

func setupQueueForget(_ *flag.FlagSet, a *app) runFunc {
	return func(ctx context.Context, pos []string) error {
		if len(pos) < 2 {
			return usagef("usage: batonctl queue forget <queue> <key>...")
		}
		var got int
		if err := a.queueCall(ctx, func(ctx context.Context, q *queueclient.Client) (err error) {
			got, err = q.Forget(ctx, pos[0], pos[1:])
			return err
		}); err != nil {
			return err
		}
		fmt.Fprintf(a.Stdout, "forgot %d of %d keys in queue %s\n", got, len(pos)-1, printer.Escape(pos[0]))
		return nil
	}
}

// setupQueueMembers shows the queue's members (ClusterService
// MemberList); its subcommands add and remove change them (MemberAdd,
// MemberRemove).
func setupQueueMembers(fs *flag.FlagSet, a *app) runFunc {
	output, checkOutput := outputJSON(fs)
	return func(ctx context.Context, pos []string) error {
		if len(pos) != 0 {
			return unknownCommand(a.pathOf("queue", "members"), pos[0])
		}
		if err := checkOutput(); err != nil {
			return err
		}
		// The leader's list, whichever member answers first: only the
		// leader knows which members it no longer hears from.
		members, note, err := a.leaderList(ctx)
		if err != nil {
			return err
		}
		if note != "" {
			fmt.Fprintln(a.Stderr, printer.Escape(note))
		}
		return a.printMembers(members, *output)
	}
}

func setupQueueMembersAdd(fs *flag.FlagSet, a *app) runFunc {
	output, checkOutput := outputJSON(fs)
	peerAddr := fs.String("peer-addr", "", "host:port the new member's peers reach it at (its --peer-addr); required")
	clientAddr := fs.String("client-addr", "", "host:port clients reach it at (its --advertise-addr); empty: learned when it starts")
	return func(ctx context.Context, pos []string) error {
		if len(pos) != 1 {
			return usagef("usage: batonctl queue members add NAME --peer-addr H:P [--client-addr H:P] [-o json]")
		}
		if err := checkOutput(); err != nil {
			return err
		}
		if *peerAddr == "" {
			return usagef("queue members add needs --peer-addr H:P, the address the new member's peers reach it at")
		}
		if err := a.changeMembers(ctx, *output, func(ctx context.Context, q *queueclient.Client) ([]*queuev1.Member, error) {
			return q.Cluster().MemberAdd(ctx, pos[0], *peerAddr, *clientAddr)
		}); err != nil {
			return err
		}
		// The step that follows, which the queue cannot take for the
		// operator: a member added and started with the default
		// --initial-cluster-state new refuses to start.
		fmt.Fprintf(a.Stderr, "now start %s on an empty --data-dir with --name %s, --peer-addr %s, --initial-cluster-state existing and an --initial-cluster that names every member, itself included: it joins, and votes once caught up\n",
			printer.Escape(pos[0]), printer.Escape(pos[0]), printer.Escape(*peerAddr))
		return nil
	}
}

func setupQueueMembersRemove(fs *flag.FlagSet, a *app) runFunc {
	output, checkOutput := outputJSON(fs)
	return func(ctx context.Context, pos []string) error {
		if len(pos) != 1 {
			return usagef("usage: batonctl queue members remove NAME [-o json]")
		}
		if err := checkOutput(); err != nil {
			return err
		}
		return a.changeMembers(ctx, *output, func(ctx context.Context, q *queueclient.Client) ([]*queuev1.Member, error) {
			return q.Cluster().MemberRemove(ctx, pos[0])
		})
	}
}

// changeMembers makes a membership change and prints the members after
// it; a refusal is printed as the queue worded it.
func (a *app) changeMembers(ctx context.Context, output string, change func(context.Context, *queueclient.Client) ([]*queuev1.Member, error)) error {
	q, err := a.queue()
	if err != nil {
		return err
	}
	octx, cancel := a.opCtx(ctx)
	defer cancel()
	members, err := change(octx, q)
	if err != nil {
		return serverError(a.unreachable("the queue", a.queueAddr, "--queue-addr", err))
	}
	return a.printMembers(members, output)
}

// printMembers prints the members as a table, or as JSON.
func (a *app) printMembers(members []*queuev1.Member, output string) error {
	if output == "json" {
		return writeProto(a.Stdout, &queuev1.MemberListResponse{Members: members})
	}
	// VOTER is false for a learner: a member added that has not joined yet.
	// TERM and APPLIED are known for the member that answers (the leader,
	// as a rule), LEVEL for every member the leader has heard from: each
	// is - where it is not known. STATE is last, so that scripts reading
	// the columns before it by position read what they did.
	tbl := printer.NewTable(a.Stdout, "NAME", "CLIENT-ADDR", "PEER-ADDR", "LEADER", "TERM", "APPLIED", "VOTER", "LEVEL", "STATE")
	for _, m := range members {
		level := "-"
		if m.GetFormatLevel() != 0 {
			level = fmt.Sprint(m.GetFormatLevel())
		}
		// A term is never 0 for a member that said it: every term,
		// a single member's epoch too, starts at 1.
		term, applied := "-", "-"
		if m.GetTerm() != 0 {
			term, applied = n(m.GetTerm()), n(m.GetAppliedIndex())
		}
		tbl.Row(m.GetName(), orDash(m.GetClientAddr()), orDash(m.GetPeerAddr()), fmt.Sprint(m.GetLeader()), term, applied, fmt.Sprint(!m.GetLearner()), level, memberState(m))
	}
	return tbl.Flush()
}

// setupQueueMoveLeader hands the queue's leadership to another member
// (ClusterService MoveLeader), etcd's move-leader: before a leader is
// restarted on purpose, so that the queue is never without one.
func setupQueueMoveLeader(fs *flag.FlagSet, a *app) runFunc {
	to := fs.String("to", "", "the member to hand leadership to (default: the one whose log is furthest along)")
	return func(ctx context.Context, pos []string) error {
		if len(pos) != 0 {
			return usagef("usage: batonctl queue move-leader [--to NAME]")
		}
		q, err := a.queue()
		if err != nil {
			return err
		}
		octx, cancel := a.opCtx(ctx)
		defer cancel()
		resp, err := q.Cluster().MoveLeader(octx, *to)
		if err != nil {
			return serverError(a.unreachable("the queue", a.queueAddr, "--queue-addr", err))
		}
		leader := resp.GetLeaderName()
		if resp.GetUnchanged() {
			// The member named leads: what was asked for holds, so it is
			// a success that did nothing, as kubectl's apply of an
			// unchanged object is.
			fmt.Fprintf(a.Stdout, "%s already leads the queue; nothing changed\n", printer.Escape(leader))
			return nil
		}
		if leader == "" {
			fmt.Fprintln(a.Stdout, "leadership moved; the new leader is not known yet (batonctl queue members shows it)")
			return nil
		}
		fmt.Fprintf(a.Stdout, "%s leads the queue\n", printer.Escape(leader))
		return nil
	}
}

func setupQueueSnapshotSave(_ *flag.FlagSet, a *app) runFunc {
	return func(ctx context.Context, pos []string) error {
		if len(pos) != 1 {
			return usagef("usage: batonctl queue snapshot save FILE")
		}
		return a.snapshotSave(ctx, pos[0])
	}
}

// snapshotSave saves a backup of every queue (ClusterService Snapshot) to
// a file, which `baton-queue restore` seeds a new queue from. The file is
// written beside its name, synced, checked whole (its checksum,
// checkBackup), and only then renamed to its name: a save cut short leaves
// no file that looks whole.
//
// FILE "-" is the standard output, as kubectl takes it: the backup is
// received and checked in a temporary file first, and only a whole one is
// written out (the count goes to the standard error).
func (a *app) snapshotSave(ctx context.Context, path string) error {
	addrs, err := a.queueAddrs()
	if err != nil {
		return err
	}
	toStdout := path == "-"
	dir, base := filepath.Dir(path), filepath.Base(path)
	if toStdout {
		dir, base = "", "batonctl-backup"
	} else if st, err := os.Stat(path); err == nil && st.IsDir() {
		return fmt.Errorf("queue snapshot save: %s is a directory: name the file to write (for example %s)", printer.Escape(path), printer.Escape(filepath.Join(path, "queue.bak")))
	}
	f, err := os.CreateTemp(dir, base+".*.part")
	if err != nil {
		return fmt.Errorf("queue snapshot save: %w", err)
	}
	tmp := f.Name()
	defer os.Remove(tmp) // gone once renamed
	// A backup of a large queue takes longer than a call's usual
	// deadline: the command's own context bounds it. Each member is
	// asked in turn until one that is up hands it on to the leader, the
	// file begun again for each (a stream cut after its first byte is
	// not retried by the client).
	var n int64
	for _, addr := range addrs {
		var q *queueclient.Client
		if q, err = a.memberClient(addr); err != nil {
			break
		}
		if err = f.Truncate(0); err != nil {
			break
		}
		if _, err = f.Seek(0, io.SeekStart); err != nil {
			break
		}
		n, err = q.Cluster().Snapshot(ctx, f)
		if err == nil || status.Code(err) != codes.Unavailable || ctx.Err() != nil {
			break
		}
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return serverError(a.unreachable("the queue", a.queueAddr, "--queue-addr", err))
	}
	records, err := checkBackup(tmp)
	if err != nil {
		return fmt.Errorf("queue snapshot save: the file received does not check out, and was not kept: %w", err)
	}
	if toStdout {
		in, err := os.Open(tmp)
		if err != nil {
			return fmt.Errorf("queue snapshot save: %w", err)
		}
		defer in.Close()
		if _, err := io.Copy(a.Stdout, in); err != nil {
			return fmt.Errorf("queue snapshot save: write the standard output: %w", err)
		}
		fmt.Fprintf(a.Stderr, "saved %d records (%d bytes) to the standard output\n", records, n)
		return nil
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("queue snapshot save: %w", err)
	}
	fmt.Fprintf(a.Stdout, "saved %d records (%d bytes) to %s\n", records, n, printer.Escape(path))
	return nil
}

// checkBackup checks a backup file whole, as its format (the queue's
// backup package) defines it: the header "BTNBAK" and two digits, then,
// at the end, the footer "BTNBAKEN", the record count and the CRC-32C of
// every byte before the footer. It returns the record count. The records
// themselves are the queue's to decode: restore checks every frame again.
func checkBackup(path string) (uint64, error) {
	const (
		magic  = "BTNBAK"
		footer = "BTNBAKEN"
		tail   = len(footer) + 8 + 4
	)
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	if len(b) < 8+tail || string(b[:len(magic)]) != magic || string(b[len(b)-tail:len(b)-tail+len(footer)]) != footer {
		return 0, fmt.Errorf("%s is not a whole backup file (%d bytes)", path, len(b))
	}
	foot := b[len(b)-tail+len(footer):]
	want := binary.BigEndian.Uint32(foot[8:])
	if got := crc32.Checksum(b[:len(b)-tail], crc32.MakeTable(crc32.Castagnoli)); got != want {
		return 0, fmt.Errorf("%s: checksum %08x, its footer says %08x", path, got, want)
	}
	return binary.BigEndian.Uint64(foot), nil
}

// serverError is the refusal a server gave, as it worded it: the status
// message says what was not done and why, and the client's wrapping around
// it ("member add x: queue: …: rpc error: code = … desc = …") would only say
// it twice. Other errors pass unchanged.
func serverError(err error) error {
	var ue *unreachableError
	if errors.As(err, &ue) {
		return err
	}
	// status.FromError would replace the message by err.Error(), the
	// wrapping included: the status itself has the server's words.
	var se interface{ GRPCStatus() *status.Status }
	if errors.As(err, &se) {
		if st := se.GRPCStatus(); st.Code() != codes.OK && st.Code() != codes.Unknown {
			return errors.New(st.Message())
		}
	}
	return err
}

// printItem prints one queue item as "Field: value" lines.
func printItem(w io.Writer, indent string, it *queuev1.Item, now time.Time) {
	field := func(name, value string) { fmt.Fprintf(w, "%s%-14s%s\n", indent, name+":", printer.Escape(value)) }
	field("State", stateName(it.GetState()))
	if it.GetState() == queuev1.ItemState_ITEM_STATE_ABSENT || it.GetState() == queuev1.ItemState_ITEM_STATE_UNSPECIFIED {
		field("Attempts", "0")
		return
	}
	field("Attempts", fmt.Sprint(it.GetAttempts()))
	field("Last error", orNone(oneLine(it.GetLastError())))
	field("Dirty", fmt.Sprint(it.GetDirty()))
	field("Priority", strings.TrimPrefix(it.GetPriority().String(), "PRIORITY_"))
	field("Announced", fmt.Sprintf("%d times since last leased", it.GetAnnouncements()))
	if it.GetPendingSince() != nil {
		field("Waiting", since(it.GetPendingSince(), now))
	}
	if it.GetNotBefore() != nil {
		field("Ready in", until(it.GetNotBefore(), now))
	}
	if it.GetWorker() != "" {
		field("Worker", it.GetWorker())
		field("Lease ends", until(it.GetLeaseExpiresAt(), now))
	}
}

func stateName(s queuev1.ItemState) string {
	return strings.TrimPrefix(s.String(), "ITEM_STATE_")
}

func writeProto(w io.Writer, m proto.Message) error {
	b, err := protojson.MarshalOptions{Multiline: true, Indent: "  ", EmitUnpopulated: true}.Marshal(m)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintln(w, string(printer.JSONBytes(b)))
	return err
}

func n(v uint64) string { return fmt.Sprint(v) }

func dur(d *durationpb.Duration) string {
	if d == nil || d.AsDuration() == 0 {
		return "-"
	}
	return printer.Duration(d.AsDuration())
}

func since(t *timestamppb.Timestamp, now time.Time) string {
	if t == nil || t.AsTime().IsZero() || t.AsTime().Unix() == 0 {
		return "-"
	}
	return printer.Duration(now.Sub(t.AsTime()))
}

func until(t *timestamppb.Timestamp, now time.Time) string {
	if t == nil || t.AsTime().IsZero() || t.AsTime().Unix() == 0 {
		return "-"
	}
	d := t.AsTime().Sub(now)
	if d <= 0 {
		return "now"
	}
	return printer.Duration(d)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func oneLine(s string) string { return strings.ReplaceAll(s, "\n", "; ") }

// short cuts a long error for a table cell, between two characters.
func short(s string) string {
	s = oneLine(s)
	if len(s) > 80 {
		cut := 77
		for cut > 0 && !utf8.RuneStart(s[cut]) {
			cut--
		}
		s = s[:cut] + "..."
	}
	return s
}
