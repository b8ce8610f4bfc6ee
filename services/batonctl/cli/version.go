package cli

// batonctl version: the client's build, and what the servers say of
// theirs. The servers report no build version over their APIs; what they
// do report is the queue's format levels (ClusterService Status and
// MemberList): the highest level of the formats each member's build reads,
// and the queue's, which is what an upgrade is about (docs/operations.md,
// "Upgrades").

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"runtime"
	"runtime/debug"
	"strings"

	queuev1 "github.com/batonrun/baton/proto/baton/queue/v1"
	"github.com/batonrun/baton/services/batonctl/internal/printer"
)

// versionReport is what version prints; its JSON is -o json.
type versionReport struct {
	Client   clientVersion    `json:"clientVersion"`
	Queue    *queueVersion    `json:"queue,omitempty"`
	Observer *observerVersion `json:"observer,omitempty"`
}

// clientVersion is batonctl's build, from the build information Go
// stamps into every binary.
type clientVersion struct {
	// Version is the main module's: a tag, a pseudo-version made of the
	// commit (go build in a git checkout), or "(devel)".
	Version    string `json:"version"`
	Commit     string `json:"commit,omitempty"`
	CommitTime string `json:"commitTime,omitempty"`
	// Modified: built from a checkout with uncommitted changes.
	Modified  bool   `json:"modified,omitempty"`
	GoVersion string `json:"goVersion"`
	Platform  string `json:"platform"`
}

// queueVersion is what the queue says of its members' builds.
type queueVersion struct {
	Addr string `json:"addr"`
	// FormatLevel is the queue's (StatusResponse.cluster_format_level):
	// the highest level every voting member reads; 0 when the leader
	// could not be asked.
	FormatLevel uint32          `json:"formatLevel,omitempty"`
	Leader      string          `json:"leader,omitempty"`
	Members     []memberVersion `json:"members,omitempty"`
	Note        string          `json:"note,omitempty"`
	Error       string          `json:"error,omitempty"`
}

// memberVersion is one member, as the leader lists it.
type memberVersion struct {
	Name       string `json:"name"`
	ClientAddr string `json:"clientAddr,omitempty"`
	// FormatLevel is its build's (Member.format_level); 0 while unknown.
	FormatLevel uint32 `json:"formatLevel,omitempty"`
	State       string `json:"state"`
}

// observerVersion says whether the observer answers: it reports nothing
// of its build.
type observerVersion struct {
	Addr    string `json:"addr"`
	Answers bool   `json:"answers"`
	Error   string `json:"error,omitempty"`
}

func setupVersion(fs *flag.FlagSet, a *app) runFunc {
	client := fs.Bool("client", false, "the client's version alone, without asking the servers")
	output := fs.String("o", "", "output format: json or yaml (default: text)")
	return func(ctx context.Context, pos []string) error {
		if len(pos) > 0 {
			return usagef("usage: batonctl version [--client] [-o json|yaml]")
		}
		switch *output {
		case "", "json", "yaml":
		default:
			return usagef("unknown output format %q (json or yaml)", *output)
		}
		r := versionReport{Client: buildVersion()}
		var failed []string
		if !*client {
			var err error
			if r.Queue, err = a.queueVersion(ctx); err != nil {
				failed = append(failed, "the queue")
			}
			if r.Observer, err = a.observerVersion(ctx); err != nil {
				failed = append(failed, "the observer")
			}
		}
		if err := a.printVersion(r, *output); err != nil {
			return err
		}
		if len(failed) > 0 {
			// Each error is in the report, with what was asked.
			return fmt.Errorf("no answer from %s", strings.Join(failed, " nor "))
		}
		return nil
	}
}

// buildVersion reads batonctl's build information.
func buildVersion() clientVersion {
	v := clientVersion{Version: "unknown", GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return v
	}
	if info.Main.Version != "" {
		v.Version = info.Main.Version
	}
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Commit = s.Value
		case "vcs.time":
			v.CommitTime = s.Value
		case "vcs.modified":
			v.Modified = s.Value == "true"
		}
	}
	return v
}

// queueVersion asks the members of --queue-addr for their format levels:
// the leader's list of members, and the queue's level from the leader's
// Status. Its error is also in the report.
func (a *app) queueVersion(ctx context.Context) (*queueVersion, error) {
	q := &queueVersion{Addr: a.queueAddr}
	members, note, err := a.leaderList(ctx)
	if err != nil {
		q.Error = oneLine(err.Error())
		return q, err
	}
	q.Note = note
	for _, m := range members {
		q.Members = append(q.Members, memberVersion{Name: m.GetName(), ClientAddr: m.GetClientAddr(), FormatLevel: m.GetFormatLevel(), State: memberState(m)})
	}
	addrs, err := a.queueAddrs()
	if err != nil {
		return q, err
	}
	answers, err := a.askMembers(ctx, addrs)
	if err != nil {
		return q, err
	}
	var leader *queuev1.StatusResponse
	for _, m := range answers {
		if m.status.GetMember().GetLeader() {
			leader = m.status
			break
		}
		if q.Leader == "" {
			q.Leader = m.status.GetLeaderName()
		}
	}
	if leader != nil {
		q.Leader, q.FormatLevel = leader.GetMember().GetName(), leader.GetClusterFormatLevel()
	}
	return q, nil
}

// observerVersion asks the observer for its Status: it answers, or not.
func (a *app) observerVersion(ctx context.Context) (*observerVersion, error) {
	o := &observerVersion{Addr: a.observerAddr}
	obs, err := a.observer()
	if err == nil {
		octx, cancel := a.opCtx(ctx)
		_, err = obs.Status(octx)
		cancel()
		err = a.unreachable("the observer", a.observerAddr, "--observer-addr", err)
	}
	if err != nil {
		o.Error = oneLine(err.Error())
		return o, err
	}
	o.Answers = true
	return o, nil
}

func (a *app) printVersion(r versionReport, output string) error {
	switch output {
	case "json":
		return printer.JSON(a.Stdout, r)
	case "yaml":
		// The keys of the JSON, so that both read alike.
		b, err := json.Marshal(r)
		if err != nil {
			return err
		}
		var m map[string]any
		if err := json.Unmarshal(b, &m); err != nil {
			return err
		}
		return printer.YAML(a.Stdout, m)
	}
	w := a.Stdout
	c := r.Client
	fmt.Fprintf(w, "Client Version: %s", c.Version)
	if c.Commit != "" {
		fmt.Fprintf(w, " (commit %s", c.Commit)
		if c.CommitTime != "" {
			fmt.Fprintf(w, " of %s", c.CommitTime)
		}
		if c.Modified {
			fmt.Fprint(w, ", with uncommitted changes")
		}
		fmt.Fprint(w, ")")
	}
	fmt.Fprintf(w, ", %s, %s\n", c.GoVersion, c.Platform)
	if r.Queue == nil && r.Observer == nil {
		return nil
	}
	fmt.Fprintln(w, "Server Version: not reported (the queue and the observer report no build version; the queue reports its format levels)")
	if q := r.Queue; q != nil {
		switch {
		case q.Error != "":
			fmt.Fprintf(w, "Queue: %s: error: %s\n", printer.Escape(q.Addr), printer.Escape(q.Error))
		case q.FormatLevel != 0:
			fmt.Fprintf(w, "Queue Format Level: %d (%s leads)\n", q.FormatLevel, printer.Escape(q.Leader))
		case q.Leader != "":
			fmt.Fprintf(w, "Queue Format Level: unknown (the leader, %s, is not in --queue-addr)\n", printer.Escape(q.Leader))
		default:
			fmt.Fprintln(w, "Queue Format Level: unknown (no member knows a leader)")
		}
		if len(q.Members) > 0 {
			tbl := printer.NewTable(w, "MEMBER", "CLIENT-ADDR", "LEVEL", "STATE")
			for _, m := range q.Members {
				level := "-"
				if m.FormatLevel != 0 {
					level = fmt.Sprint(m.FormatLevel)
				}
				tbl.Row(m.Name, orDash(m.ClientAddr), level, m.State)
			}
			if err := tbl.Flush(); err != nil {
				return err
			}
		}
		if q.Note != "" {
			fmt.Fprintln(a.Stderr, printer.Escape(q.Note))
		}
	}
	if o := r.Observer; o != nil {
		if o.Answers {
			fmt.Fprintf(w, "Observer: %s answers\n", printer.Escape(o.Addr))
		} else {
			fmt.Fprintf(w, "Observer: %s: error: %s\n", printer.Escape(o.Addr), printer.Escape(o.Error))
		}
	}
	return nil
}
