package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/batonrun/baton/client/kinds"
	"github.com/batonrun/baton/client/schema"
	"github.com/batonrun/baton/sdk/events"
	"github.com/batonrun/baton/sdk/manager"
	"github.com/batonrun/baton/sdk/objects"
	"github.com/batonrun/baton/sdk/reconcile"
)

// FooKind is the Foo's kind, its resource in etcd keys
// (/registry/foos/<namespace>/<name>) and the names batonctl accepts for
// it.
var FooKind = kinds.Kind{Kind: "Foo", Resource: "foos", Aliases: []string{"foo"}}

// Queue is the controller's queue, named like its resource.
const Queue = "foos"

// FooSpec is what the user asks for: a Deployment of that name, with that
// many replicas.
type FooSpec struct {
	DeploymentName string `json:"deploymentName"`
	Replicas       int    `json:"replicas"`
}

// FooStatus is what the controller reports: how many of the Deployment's
// pods are running, as of the Foo's generation it acted on.
type FooStatus struct {
	AvailableReplicas  int   `json:"availableReplicas"`
	ObservedGeneration int64 `json:"observedGeneration"`
}

// Foo is one object: kind, metadata, spec, status.
type Foo = objects.Object[FooSpec, FooStatus]

// Bounds of spec.replicas, as sample-controller's CustomResourceDefinition
// has them.
const (
	minReplicas = 1
	maxReplicas = 10
)

// Image is what the Deployment's pods run.
const Image = "nginx:latest"

// Reasons of the events the controller records about a Foo, for batonctl
// get events and describe.
const (
	// ReasonCreated: the Foo's Deployment was created.
	ReasonCreated = "DeploymentCreated"
	// ReasonScaled: the Deployment's replicas were set to the Foo's.
	ReasonScaled = "DeploymentScaled"
	// ReasonExists: a Deployment of the name the Foo asks for is not the
	// Foo's (sample-controller's ErrResourceExists).
	ReasonExists = "ErrResourceExists"
)

// Controller is r on the queue "foos" with what it declares: the Foos it
// reconciles, the Deployments it owns (a change of one announces its
// Foo), the Foo's structural schema and the columns batonctl get prints.
// The manager publishes the declaration (sdk/declare) before it leases.
// The schema is what every writer that knows it (batonctl, the SDK's
// objects.Client) checks before it writes a Foo, so that a Foo with
// replicas "three" is refused before it is stored, instead of being
// stored and failing here.
func Controller(r *Reconciler, concurrency int) manager.Controller {
	lo, hi, zero := float64(minReplicas), float64(maxReplicas), 0.0
	nameLen := int64(63)
	return manager.Controller{
		Name:        Queue,
		Reconciler:  r,
		Concurrency: concurrency,
		For:         FooKind,
		Owns:        []kinds.Kind{kinds.MustBuiltin(kinds.Deployment)},
		// Reconcile computes the status from the spec and the Deployment
		// and reads back nothing it did not write: its own status write
		// need not bring the key back.
		IgnoreOwnStatus: true,
		Schema: &schema.Kind{
			Spec: &schema.Schema{
				Type:        schema.TypeObject,
				Description: "The Deployment the Foo wants.",
				Required:    []string{"deploymentName", "replicas"},
				Properties: map[string]*schema.Schema{
					"deploymentName": {
						Type: schema.TypeString, MaxLength: &nameLen,
						// An object name Baton accepts, that the
						// Deployment's ReplicaSets and pods can extend.
						Pattern:     `^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`,
						Description: "The name of the Deployment the controller makes, in the Foo's namespace.",
					},
					"replicas": {
						Type: schema.TypeInteger, Minimum: &lo, Maximum: &hi,
						Description: "How many pods the Deployment keeps.",
					},
				},
			},
			Status: &schema.Schema{
				Type:        schema.TypeObject,
				Description: "What the controller last saw of the Deployment.",
				Properties: map[string]*schema.Schema{
					"availableReplicas":  {Type: schema.TypeInteger, Minimum: &zero, Description: "The Deployment's running pods."},
					"observedGeneration": {Type: schema.TypeInteger, Minimum: &zero, Description: "The metadata.generation the controller last acted on."},
				},
			},
		},
		PrinterColumns: []schema.Column{
			{Name: "Deployment", Type: "string", JSONPath: ".spec.deploymentName", Description: "The Deployment the Foo owns."},
			{Name: "Desired", Type: "integer", JSONPath: ".spec.replicas", Description: "The pods asked for."},
			{Name: "Available", Type: "integer", JSONPath: ".status.availableReplicas", Description: "The pods running."},
		},
	}
}

// Reconciler keeps one invariant per Foo: a Deployment named
// spec.deploymentName, controlled by the Foo, runs spec.replicas pods,
// and the Foo's status counts the running ones.
//
// It never deletes the Deployment. The Deployment names its Foo, by uid,
// in metadata.ownerReferences, and when the Foo is gone Baton's garbage
// collector (baton-worker's garbagecollector controller) deletes it; the
// Deployment controller then removes its ReplicaSets and pods.
type Reconciler struct {
	Objects *objects.Client
	// Events records what the reconciles did to each Foo; nil records
	// nothing.
	Events *events.Recorder
}

// Reconcile is level-based: whatever change announced the key (the Foo's,
// or its Deployment's), it reads both and makes the invariant true.
func (r *Reconciler) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	ns, name, err := objects.SplitKey(req.Key)
	if err != nil {
		return reconcile.Result{}, reconcile.Terminal(err) // a malformed key never heals
	}
	// Reads under the scope see at least the change that announced the
	// key and this controller's own writes for it, so a Deployment it
	// created a moment ago is never missed and created again.
	ctx = r.Objects.Scope(ctx, req.Key, req.MinRevision)
	key := FooKind.Key(ns, name)
	raw, err := r.Objects.Get(ctx, key)
	if errors.Is(err, objects.ErrNotFound) {
		return reconcile.Result{}, nil // deleted: the garbage collector removes its Deployment
	}
	if err != nil {
		return reconcile.Result{}, err // the queue retries with backoff
	}
	foo, err := objects.Decode[Foo](raw)
	if err != nil {
		return reconcile.Result{}, reconcile.Terminal(fmt.Errorf("%s: %w", key, err))
	}
	if foo.Metadata.IsDeleting() {
		return reconcile.Result{}, nil // its finalizers' owners are at work; nothing to converge
	}
	// The schema refuses such a Foo from every writer that knows it, but
	// etcdctl writes anything. Until the Foo changes, it cannot succeed.
	if foo.Spec.DeploymentName == "" || foo.Spec.Replicas < minReplicas || foo.Spec.Replicas > maxReplicas {
		return reconcile.Result{}, reconcile.Terminal(fmt.Errorf("%s: spec needs a deploymentName and %d to %d replicas, has %+v", key, minReplicas, maxReplicas, foo.Spec))
	}

	deployment, err := r.deployment(ctx, foo)
	if err != nil {
		return reconcile.Result{}, err
	}
	// Writes nothing when the status is already so.
	return reconcile.Result{}, r.Objects.UpdateStatusFrom(ctx, raw, foo.Metadata.UID, FooStatus{
		AvailableReplicas:  deployment.Status.ReadyReplicas,
		ObservedGeneration: foo.Metadata.Generation,
	})
}

// deployment makes foo's Deployment exist with foo's replicas and returns
// it as read (or created).
func (r *Reconciler) deployment(ctx context.Context, foo *Foo) (*objects.Deployment, error) {
	ns := foo.Metadata.Namespace
	key := objects.Key(objects.ResourceDeployments, ns, foo.Spec.DeploymentName)
	raw, err := r.Objects.Get(ctx, key)
	if errors.Is(err, objects.ErrNotFound) {
		d := newDeployment(foo)
		if _, err := r.Objects.Create(ctx, key, d); err != nil {
			if errors.Is(err, objects.ErrInvalid) {
				return nil, reconcile.Terminal(err) // the same Deployment would be refused again
			}
			// ErrConflict: etcd has one the cache does not show yet; the
			// retry reads it.
			return nil, err
		}
		r.Events.Event(foo, events.Normal, ReasonCreated, "Created Deployment %s with %d replicas", d.Metadata.Name, foo.Spec.Replicas)
		return d, nil
	}
	if err != nil {
		return nil, err
	}
	d, err := objects.Decode[objects.Deployment](raw)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", key, err)
	}
	if !controlledBy(&d.Metadata, foo) {
		// Someone else's, or an earlier Foo's of the same name that the
		// garbage collector has yet to remove (its deletion announces this
		// Foo again). Never take over another's object: fail and retry.
		r.Events.Event(foo, events.Warning, ReasonExists, "Resource %q already exists and is not managed by Foo", foo.Spec.DeploymentName)
		return nil, fmt.Errorf("deployment %s already exists and is not controlled by Foo %s (uid %s)", foo.Spec.DeploymentName, foo.Metadata.Name, foo.Metadata.UID)
	}
	from := replicasOf(d)
	if from == foo.Spec.Replicas {
		return d, nil
	}
	// A compare-and-swap from the read: on a conflict it reads etcd and
	// applies the change again, to the Deployment as it is then.
	err = objects.ModifyFrom(ctx, r.Objects, raw, func(d *objects.Deployment) (bool, error) {
		if !controlledBy(&d.Metadata, foo) {
			return false, fmt.Errorf("deployment %s is no longer controlled by Foo %s", foo.Spec.DeploymentName, foo.Metadata.Name)
		}
		if replicasOf(d) == foo.Spec.Replicas {
			return false, nil
		}
		n := foo.Spec.Replicas
		d.Spec.Replicas = &n
		return true, nil
	})
	if err != nil {
		return nil, err
	}
	r.Events.Event(foo, events.Normal, ReasonScaled, "Scaled Deployment %s from %d to %d replicas", d.Metadata.Name, from, foo.Spec.Replicas)
	return d, nil
}

// newDeployment is the Deployment foo asks for, naming foo as its
// controlling owner by uid (sample-controller's newDeployment).
func newDeployment(foo *Foo) *objects.Deployment {
	labels := map[string]string{"app": "nginx", "controller": foo.Metadata.Name}
	replicas := foo.Spec.Replicas
	yes := true
	return &objects.Deployment{
		Kind: objects.KindDeployment,
		Metadata: objects.ObjectMeta{
			Name:      foo.Spec.DeploymentName,
			Namespace: foo.Metadata.Namespace,
			Labels:    labels,
			OwnerReferences: []objects.OwnerReference{{
				Kind: FooKind.Kind, Name: foo.Metadata.Name, UID: foo.Metadata.UID,
				Controller: &yes, BlockOwnerDeletion: &yes,
			}},
		},
		Spec: objects.DeploymentSpec{
			Replicas: &replicas,
			Template: objects.PodTemplate{
				Metadata: objects.TemplateMeta{Labels: labels},
				Spec:     objects.PodSpec{Image: Image},
			},
		},
	}
}

// controlledBy reports whether m's controlling owner is foo itself (its
// kind, name and uid).
func controlledBy(m *objects.ObjectMeta, foo *Foo) bool {
	ref := m.ControllerRef()
	return ref != nil && ref.Kind == FooKind.Kind && ref.Name == foo.Metadata.Name && ref.UID == foo.Metadata.UID
}

// replicasOf is a Deployment's spec.replicas, 1 when unset.
func replicasOf(d *objects.Deployment) int {
	if d.Spec.Replicas == nil {
		return 1
	}
	return *d.Spec.Replicas
}
