package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
	"github.com/batonrun/baton/services/batonctl/internal/printer"
)

func cmdQueue(ctx context.Context, a *app, args []string) error {
	const use = "usage: batonctl queue stats [queue] | list <queue> [--state S] | inspect <queue> <key> | forget <queue> <key>... | members [add NAME --peer-addr H:P [--client-addr H:P] | remove NAME]"
	if len(args) == 0 {
		return usagef(use)
	}
	if args[0] == "members" {
		return cmdQueueMembers(ctx, a, args[1:])
	}
	fs := flag.NewFlagSet("queue "+args[0], flag.ContinueOnError)
	output := fs.String("o", "", "output format: json (default: a table)")
	state := fs.String("state", "", "list only keys in this state: pending, delayed, leased or parked")
	pos, err := parse(fs, args[1:], a.Stderr)
	if err != nil {
		return err
	}
	if *output != "" && *output != "json" {
		return usagef("unknown output format %q (json)", *output)
	}
	q, err := a.queue()
	if err != nil {
		return err
	}
	octx, cancel := a.opCtx(ctx)
	defer cancel()
	wrap := func(err error) error { return a.unreachable("the queue", a.queueAddr, "--queue-addr", err) }

	switch args[0] {
	case "stats":
		if len(pos) > 1 {
			return usagef(use)
		}
		name := ""
		if len(pos) == 1 {
			name = pos[0]
		}
		stats, err := q.Stats(octx, name)
		if err != nil {
			return wrap(err)
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

	case "list":
		if len(pos) != 1 {
			return usagef("usage: batonctl queue list <queue> [--state pending|delayed|leased|parked] [-o json]")
		}
		st := queuev1.ItemState_ITEM_STATE_UNSPECIFIED
		if *state != "" {
			v, ok := queuev1.ItemState_value["ITEM_STATE_"+strings.ToUpper(*state)]
			if !ok || v == 0 {
				return usagef("unknown state %q (pending, delayed, leased or parked)", *state)
			}
			st = queuev1.ItemState(v)
		}
		items, err := q.List(octx, pos[0], st, 1000)
		if err != nil {
			return wrap(err)
		}
		if *output == "json" {
			return writeProto(a.Stdout, &queuev1.ListResponse{Items: items})
		}
		if len(items) == 0 {
			fmt.Fprintf(a.Stderr, "No keys in queue %s.\n", pos[0])
			return nil
		}
		now := a.now()
		tbl := printer.NewTable(a.Stdout, "KEY", "STATE", "ATTEMPTS", "DIRTY", "WORKER", "WAITING", "READY-IN", "LAST-ERROR")
		for _, it := range items {
			tbl.Row(it.GetKey(), stateName(it.GetState()), n(uint64(it.GetAttempts())), fmt.Sprint(it.GetDirty()),
				orDash(it.GetWorker()), since(it.GetPendingSince(), now), until(it.GetNotBefore(), now), orDash(short(it.GetLastError())))
		}
		return tbl.Flush()

	case "inspect":
		if len(pos) != 2 {
			return usagef("usage: batonctl queue inspect <queue> <key> [-o json]")
		}
		item, err := q.Inspect(octx, pos[0], pos[1])
		if err != nil {
			return wrap(err)
		}
		if *output == "json" {
			return writeProto(a.Stdout, item)
		}
		fmt.Fprintf(a.Stdout, "%-14s%s\n%-14s%s\n", "Queue:", pos[0], "Key:", pos[1])
		printItem(a.Stdout, "", item, a.now())
		return nil

	case "forget":
		if len(pos) < 2 {
			return usagef("usage: batonctl queue forget <queue> <key>...")
		}
		got, err := q.Forget(octx, pos[0], pos[1:])
		if err != nil {
			return wrap(err)
		}
		fmt.Fprintf(a.Stdout, "forgot %d of %d keys in queue %s\n", got, len(pos)-1, pos[0])
		return nil
	}
	return usagef("unknown queue command %q; %s", args[0], use)
}

// cmdQueueMembers shows the queue's members (ClusterService MemberList) or
// changes them (MemberAdd, MemberRemove). It has flags of its own, so it is
// parsed apart from the other queue commands.
func cmdQueueMembers(ctx context.Context, a *app, args []string) error {
	const use = "usage: batonctl queue members [-o json] | members add NAME --peer-addr H:P [--client-addr H:P] | members remove NAME"
	name := "queue members"
	if len(args) > 0 && (args[0] == "add" || args[0] == "remove") {
		name += " " + args[0]
		args = args[1:]
	}
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	output := fs.String("o", "", "output format: json (default: a table)")
	var peerAddr, clientAddr *string
	if name == "queue members add" {
		peerAddr = fs.String("peer-addr", "", "host:port the new member's peers reach it at (its --peer-addr); required")
		clientAddr = fs.String("client-addr", "", "host:port clients reach it at (its --advertise-addr); empty: learned when it starts")
	}
	pos, err := parse(fs, args, a.Stderr)
	if err != nil {
		return err
	}
	if *output != "" && *output != "json" {
		return usagef("unknown output format %q (json)", *output)
	}
	switch {
	case name == "queue members" && len(pos) != 0:
		return usagef("unknown queue members command %q; %s", pos[0], use)
	case name != "queue members" && len(pos) != 1:
		return usagef(use)
	case peerAddr != nil && *peerAddr == "":
		return usagef("queue members add needs --peer-addr H:P, the address the new member's peers reach it at")
	}
	q, err := a.queue()
	if err != nil {
		return err
	}
	octx, cancel := a.opCtx(ctx)
	defer cancel()

	var members []*queuev1.Member
	switch name {
	case "queue members":
		members, err = q.Cluster().MemberList(octx)
	case "queue members add":
		members, err = q.Cluster().MemberAdd(octx, pos[0], *peerAddr, *clientAddr)
	case "queue members remove":
		members, err = q.Cluster().MemberRemove(octx, pos[0])
	}
	if err != nil {
		return serverError(a.unreachable("the queue", a.queueAddr, "--queue-addr", err))
	}
	if *output == "json" {
		return writeProto(a.Stdout, &queuev1.MemberListResponse{Members: members})
	}
	// VOTER is false for a learner: a member added that has not joined yet.
	tbl := printer.NewTable(a.Stdout, "NAME", "CLIENT-ADDR", "PEER-ADDR", "LEADER", "TERM", "APPLIED", "VOTER")
	for _, m := range members {
		tbl.Row(m.GetName(), orDash(m.GetClientAddr()), orDash(m.GetPeerAddr()), fmt.Sprint(m.GetLeader()), n(m.GetTerm()), n(m.GetAppliedIndex()), fmt.Sprint(!m.GetLearner()))
	}
	return tbl.Flush()
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
	field := func(name, value string) { fmt.Fprintf(w, "%s%-14s%s\n", indent, name+":", value) }
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
	_, err = fmt.Fprintln(w, string(b))
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

// short cuts a long error for a table cell.
func short(s string) string {
	s = oneLine(s)
	if len(s) > 80 {
		s = s[:77] + "..."
	}
	return s
}
