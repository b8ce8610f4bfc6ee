package cli

// scale and rollout status: kubectl's, for the kinds Baton's controllers
// scale and roll out.

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/batonrun/baton/client/schema"
	"github.com/batonrun/baton/services/batonctl/internal/apply"
	"github.com/batonrun/baton/services/batonctl/internal/printer"
)

// errPrecondition is returned by scale's change when --current-replicas
// does not match: the object is left as it is.
var errPrecondition = errors.New("scale: current replicas differ")

func setupScale(fs *flag.FlagSet, a *app) runFunc {
	var g getFlags
	g.register(fs, false)
	replicas := fs.Int64("replicas", -1, "the replicas to set (required)")
	current := fs.Int64("current-replicas", -1, "scale only an object that has this many replicas now (a precondition, kubectl's)")
	return func(ctx context.Context, pos []string) error {
		const use = "usage: batonctl scale TYPE/NAME… --replicas N [--current-replicas N] | scale <resource> <NAME>… --replicas N"
		if len(pos) == 0 {
			return usagef(use)
		}
		if *replicas < 0 {
			return usagef("scale needs --replicas N, 0 or more (%s)", use)
		}
		if *current < -1 {
			return usagef("--current-replicas %d: a count is 0 or more", *current)
		}
		_, refs, err := a.objectRefs(ctx, pos)
		if err != nil {
			return err
		}
		if len(refs) == 0 {
			return usagef("scale %s needs the names of the objects to scale (%s)", pos[0], use)
		}
		for _, r := range refs {
			if !slices.Contains(scalable, r.typ.Kind) {
				return usagef("cannot scale %s: scale takes deployments, replicasets and statefulsets", r.typ.Resource)
			}
		}
		cli, err := a.etcd(ctx)
		if err != nil {
			return err
		}
		var errs []error
		for _, r := range refs {
			if err := a.scale(ctx, cli, r, g.ns, *replicas, *current); err != nil {
				errs = append(errs, err)
				continue
			}
			fmt.Fprintf(a.Stdout, "%s scaled\n", printer.Escape(r.String()))
		}
		return errors.Join(errs...)
	}
}

// scale sets spec.replicas of one object (apply.Update: a compare-and-swap
// that bumps the generation, as apply does); current, if 0 or more, is the
// replicas the object must have now.
func (a *app) scale(ctx context.Context, cli *clientv3.Client, r objectRef, ns string, replicas, current int64) error {
	v, err := a.kinds().Validator(r.typ)
	if err != nil {
		return err
	}
	octx, cancel := a.opCtx(ctx)
	defer cancel()
	var had int64
	_, err = apply.Update(octx, cli, r.typ.Key(ns, r.name), a.now(), func(o map[string]any) error {
		had = printer.Replicas(o)
		if current >= 0 && had != current {
			return errPrecondition
		}
		spec, _ := o["spec"].(map[string]any)
		if spec == nil {
			spec = map[string]any{}
			o["spec"] = spec
		}
		spec["replicas"] = json.Number(strconv.FormatInt(replicas, 10))
		// The object written must satisfy the kind's schema, as apply's
		// do; one stored by another writer may not.
		return v.Admit(o)
	})
	switch {
	case errors.Is(err, apply.ErrNotFound):
		return notFound(r.typ, ns, r.name)
	case errors.Is(err, schema.ErrInvalid):
		return fmt.Errorf("%s: not scaled: The %w", r, err)
	case errors.Is(err, errPrecondition):
		return fmt.Errorf("%s: not scaled: it has %d replicas, not --current-replicas %d", r, had, current)
	case err != nil:
		return fmt.Errorf("%s: %w", r, a.unreachable("etcd", a.etcdEndpoints, "--etcd-endpoints", err))
	}
	return nil
}

func setupRolloutStatus(fs *flag.FlagSet, a *app) runFunc {
	var g getFlags
	g.register(fs, false)
	// kubectl's flags. This --timeout is the command's own (a --timeout
	// before the command is the global one, each server call's).
	timeout := fs.Duration("timeout", 0, "how long to wait for the rollout before exiting 1 (0: until it finishes)")
	watch := fs.Bool("w", true, "wait for the rollout to finish (-w=false: print its status once)")
	fs.BoolVar(watch, "watch", true, "the same as -w")
	return func(ctx context.Context, pos []string) error {
		const use = "usage: batonctl rollout status deploy/NAME [--timeout D] | rollout status deployment NAME"
		if len(pos) == 0 {
			return usagef(use)
		}
		_, refs, err := a.objectRefs(ctx, pos)
		if err != nil {
			return err
		}
		if len(refs) != 1 {
			return usagef("rollout status follows one deployment (%s)", use)
		}
		if !slices.Contains(rollable, refs[0].typ.Kind) {
			return usagef("rollout status follows deployments, not %s", refs[0].typ.Resource)
		}
		if *timeout < 0 {
			return usagef("--timeout %s: a duration is 0 or more", *timeout)
		}
		cli, err := a.etcd(ctx)
		if err != nil {
			return err
		}
		return a.rolloutStatus(ctx, cli, refs[0], g.ns, *timeout, *watch)
	}
}

// errRolloutTimeout is the error of a rollout that did not finish within
// rollout status's --timeout.
var errRolloutTimeout = errors.New("timed out waiting for the rollout")

// rolloutStatus prints the rollout's progress, as kubectl does, until it
// finishes (nil), the timeout passes or the deployment is deleted. It
// reads the deployment, then watches its key from the revision it read.
func (a *app) rolloutStatus(ctx context.Context, cli *clientv3.Client, r objectRef, ns string, timeout time.Duration, watch bool) error {
	obj, rev, err := a.getOneAt(ctx, cli, r.typ, ns, r.name)
	if err != nil {
		return err
	}
	last := ""
	report := func(o map[string]any) bool {
		msg, done := deploymentRollout(o)
		if msg != last {
			fmt.Fprintln(a.Stdout, printer.Escape(msg))
			last = msg
		}
		return done
	}
	if report(obj.value) || !watch {
		return nil
	}
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	if timeout > 0 {
		wctx, cancel = context.WithTimeoutCause(wctx, timeout, errRolloutTimeout)
		defer cancel()
	}
	for resp := range cli.Watch(wctx, obj.key, clientv3.WithRev(rev+1)) {
		if err := resp.Err(); err != nil {
			return fmt.Errorf("watch %s: %w", r, a.unreachable("etcd", a.etcdEndpoints, "--etcd-endpoints", err))
		}
		for _, ev := range resp.Events {
			if ev.Type == mvccpb.DELETE {
				return fmt.Errorf("%s was deleted before its rollout finished", r)
			}
			o, err := apply.Decode(ev.Kv.Value)
			if err != nil {
				return fmt.Errorf("%s: stored value is not a JSON object: %w", obj.key, err)
			}
			if report(o) {
				return nil
			}
		}
	}
	switch {
	case errors.Is(context.Cause(wctx), errRolloutTimeout):
		return fmt.Errorf("%s: %w after %s: %s", r, errRolloutTimeout, timeout, strings.TrimSuffix(last, "..."))
	case ctx.Err() != nil:
		return fmt.Errorf("%s: interrupted before the rollout finished", r)
	}
	return fmt.Errorf("watch %s: etcd ended the watch", r)
}

// deploymentRollout is kubectl's status of a Deployment's rollout: whether
// its controller has seen its latest generation and every replica is
// updated, old ones gone and the new ones ready; and the message that says
// where it stands.
func deploymentRollout(o map[string]any) (msg string, done bool) {
	name := printer.Str(o, "metadata", "name")
	if printer.Int(o, "metadata", "generation") > printer.Int(o, "status", "observedGeneration") {
		return "Waiting for deployment spec update to be observed...", false
	}
	want := printer.Replicas(o)
	updated := printer.Int(o, "status", "updatedReplicas")
	replicas := printer.Int(o, "status", "replicas")
	ready := printer.Int(o, "status", "readyReplicas")
	switch {
	case updated < want:
		return fmt.Sprintf("Waiting for deployment %q rollout to finish: %d out of %d new replicas have been updated...", name, updated, want), false
	case replicas > updated:
		return fmt.Sprintf("Waiting for deployment %q rollout to finish: %d old replicas are pending termination...", name, replicas-updated), false
	case ready < updated:
		return fmt.Sprintf("Waiting for deployment %q rollout to finish: %d of %d updated replicas are ready...", name, ready, updated), false
	}
	return fmt.Sprintf("deployment %q successfully rolled out", name), true
}
