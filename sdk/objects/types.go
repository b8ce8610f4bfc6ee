package objects

// The objects' types: ObjectMeta and owner references, the reference
// kinds (Pod, ReplicaSet, Deployment, Job, StatefulSet) and their
// fields' helpers.

import (
	"strconv"
	"strings"
	"time"

	"github.com/batonrun/baton/client/kinds"
)

// Kinds of the reference objects: client/kinds' names.
const (
	KindReplicaSet  = kinds.ReplicaSet
	KindDeployment  = kinds.Deployment
	KindJob         = kinds.Job
	KindStatefulSet = kinds.StatefulSet
	KindPod         = kinds.Pod
)

// Resources of the reference objects, the second path element of a key:
// client/kinds' table.
var (
	ResourceReplicaSets  = kinds.MustBuiltin(kinds.ReplicaSet).Resource
	ResourceDeployments  = kinds.MustBuiltin(kinds.Deployment).Resource
	ResourceJobs         = kinds.MustBuiltin(kinds.Job).Resource
	ResourceStatefulSets = kinds.MustBuiltin(kinds.StatefulSet).Resource
	ResourcePods         = kinds.MustBuiltin(kinds.Pod).Resource
)

// Pod phases.
const (
	PodPending   = "Pending"
	PodRunning   = "Running"
	PodSucceeded = "Succeeded"
	PodFailed    = "Failed"
)

// LabelPodTemplateHash names the template a Deployment's ReplicaSet (and its
// pods) were made from.
const LabelPodTemplateHash = "pod-template-hash"

// OwnerReference names an object's owner (same namespace).
type OwnerReference struct {
	Kind string `json:"kind"`
	Name string `json:"name"`
	UID  string `json:"uid"`
	// BlockOwnerDeletion false says that a foreground deletion of the
	// owner need not wait for this object (the garbage collector sets it
	// to break a cycle of owners); unset or true, it waits.
	BlockOwnerDeletion *bool `json:"blockOwnerDeletion,omitempty"`
	// Controller true says that this owner manages the object, as in
	// Kubernetes: of an object's references at most one should say so.
	// Nothing in Baton requires it (the observer announces every owner
	// the declarations name); it tells a reader, and a controller that
	// finds an object of the name it wants, whose object it is.
	Controller *bool `json:"controller,omitempty"`
}

// ObjectMeta is the metadata every object carries.
type ObjectMeta struct {
	Name            string            `json:"name"`
	Namespace       string            `json:"namespace"`
	UID             string            `json:"uid,omitempty"`
	Generation      int64             `json:"generation,omitempty"`
	Labels          map[string]string `json:"labels,omitempty"`
	Annotations     map[string]string `json:"annotations,omitempty"`
	OwnerReferences []OwnerReference  `json:"ownerReferences,omitempty"`
	// CreationTimestamp is RFC 3339 UTC, set by Create (batonctl shows it
	// as AGE).
	CreationTimestamp string `json:"creationTimestamp,omitempty"`
	// DeletionTimestamp is RFC 3339 UTC, set once by a delete that
	// finalizers hold up (DeleteWith): the object is being deleted, and
	// goes when its last finalizer does.
	DeletionTimestamp string `json:"deletionTimestamp,omitempty"`
	// Finalizers name what must happen before the object may go
	// (AddFinalizer, RemoveFinalizer); foregroundDeletion and orphan are
	// the garbage collector's.
	Finalizers []string `json:"finalizers,omitempty"`
}

// OwnedBy reports whether m names an owner of kind and name (and uid, if
// uid is not empty).
func (m *ObjectMeta) OwnedBy(kind, name, uid string) bool {
	for _, o := range m.OwnerReferences {
		if o.Kind == kind && o.Name == name && (uid == "" || o.UID == uid) {
			return true
		}
	}
	return false
}

// ControllerRef returns m's owner reference that says it is the
// controller (Controller true), or nil when none does: as Kubernetes'
// metav1.GetControllerOf, how a controller tells its own children from
// objects someone else made under the name it wants.
func (m *ObjectMeta) ControllerRef() *OwnerReference {
	for i, o := range m.OwnerReferences {
		if o.Controller != nil && *o.Controller {
			return &m.OwnerReferences[i]
		}
	}
	return nil
}

// Ref returns an owner reference to the object m describes.
func (m *ObjectMeta) Ref(kind string) OwnerReference {
	return OwnerReference{Kind: kind, Name: m.Name, UID: m.UID}
}

// Object is the shape of every object in etcd: kind, metadata, spec, status.
type Object[S, T any] struct {
	Kind     string     `json:"kind"`
	Metadata ObjectMeta `json:"metadata"`
	Spec     S          `json:"spec"`
	Status   T          `json:"status"`
}

// Meta returns the object's metadata.
func (o *Object[S, T]) Meta() *ObjectMeta { return &o.Metadata }

// PodSpec is what a pod runs. The runtime is simulated: durationSeconds and
// exitCode say how a job pod ends.
type PodSpec struct {
	Image           string  `json:"image,omitempty"`
	DurationSeconds float64 `json:"durationSeconds,omitempty"`
	ExitCode        int     `json:"exitCode,omitempty"`
}

// Duration returns DurationSeconds as a time.Duration.
func (s PodSpec) Duration() time.Duration {
	return time.Duration(s.DurationSeconds * float64(time.Second))
}

// TemplateMeta is a pod template's metadata.
type TemplateMeta struct {
	Labels map[string]string `json:"labels,omitempty"`
}

// PodTemplate is what an owner's pods are made from.
type PodTemplate struct {
	Metadata TemplateMeta `json:"metadata"`
	Spec     PodSpec      `json:"spec"`
}

// PodStatus is the runtime's report.
type PodStatus struct {
	Phase              string     `json:"phase,omitempty"`
	StartTime          *time.Time `json:"startTime,omitempty"`
	ObservedGeneration int64      `json:"observedGeneration,omitempty"`
}

// Pod is /registry/pods/<ns>/<name>.
type Pod = Object[PodSpec, PodStatus]

// Live reports whether the pod is counted as a replica: not finished.
func Live(p *Pod) bool { return p.Status.Phase != PodSucceeded && p.Status.Phase != PodFailed }

// ReplicaSetSpec is a ReplicaSet's desired state.
type ReplicaSetSpec struct {
	Replicas *int        `json:"replicas,omitempty"`
	Template PodTemplate `json:"template"`
}

// ReplicaSetStatus is a ReplicaSet's observed state.
type ReplicaSetStatus struct {
	Replicas           int   `json:"replicas"`
	ReadyReplicas      int   `json:"readyReplicas"`
	ObservedGeneration int64 `json:"observedGeneration"`
}

// ReplicaSet is /registry/replicasets/<ns>/<name>.
type ReplicaSet = Object[ReplicaSetSpec, ReplicaSetStatus]

// Strategy bounds a Deployment's rolling update. Values are counts or
// percentages of replicas ("25%").
type Strategy struct {
	MaxSurge       *IntOrPercent `json:"maxSurge,omitempty"`
	MaxUnavailable *IntOrPercent `json:"maxUnavailable,omitempty"`
}

// DeploymentSpec is a Deployment's desired state.
type DeploymentSpec struct {
	Replicas             *int        `json:"replicas,omitempty"`
	Template             PodTemplate `json:"template"`
	Strategy             Strategy    `json:"strategy"`
	RevisionHistoryLimit *int        `json:"revisionHistoryLimit,omitempty"`
}

// DeploymentStatus is a Deployment's observed state.
type DeploymentStatus struct {
	Replicas           int   `json:"replicas"`
	UpdatedReplicas    int   `json:"updatedReplicas"`
	ReadyReplicas      int   `json:"readyReplicas"`
	ObservedGeneration int64 `json:"observedGeneration"`
}

// Deployment is /registry/deployments/<ns>/<name>.
type Deployment = Object[DeploymentSpec, DeploymentStatus]

// JobSpec is a Job's desired state.
type JobSpec struct {
	Completions  *int        `json:"completions,omitempty"`
	Parallelism  *int        `json:"parallelism,omitempty"`
	BackoffLimit *int        `json:"backoffLimit,omitempty"`
	Template     PodTemplate `json:"template"`
}

// Condition is a Job's terminal condition.
type Condition struct {
	Type   string `json:"type"`
	Status string `json:"status"`
}

// Job conditions.
const (
	JobComplete = "Complete"
	JobFailed   = "Failed"
)

// JobStatus is a Job's observed state.
type JobStatus struct {
	Active             int         `json:"active"`
	Succeeded          int         `json:"succeeded"`
	Failed             int         `json:"failed"`
	Conditions         []Condition `json:"conditions,omitempty"`
	ObservedGeneration int64       `json:"observedGeneration"`
}

// Job is /registry/jobs/<ns>/<name>.
type Job = Object[JobSpec, JobStatus]

// StatefulSetSpec is a StatefulSet's desired state.
type StatefulSetSpec struct {
	Replicas *int        `json:"replicas,omitempty"`
	Template PodTemplate `json:"template"`
}

// StatefulSetStatus is a StatefulSet's observed state.
type StatefulSetStatus struct {
	Replicas           int   `json:"replicas"`
	ReadyReplicas      int   `json:"readyReplicas"`
	ObservedGeneration int64 `json:"observedGeneration"`
}

// StatefulSet is /registry/statefulsets/<ns>/<name>.
type StatefulSet = Object[StatefulSetSpec, StatefulSetStatus]

// Or returns *p, or def when p is nil.
func Or(p *int, def int) int {
	if p == nil {
		return def
	}
	return *p
}

// IntOrPercent is a count ("maxSurge": 1) or a percentage ("maxSurge": "25%").
type IntOrPercent struct {
	Int     int
	Percent int
	IsPct   bool
}

// MarshalJSON writes a number or a "N%" string.
func (v IntOrPercent) MarshalJSON() ([]byte, error) {
	if v.IsPct {
		return []byte(strconv.Quote(strconv.Itoa(v.Percent) + "%")), nil
	}
	return []byte(strconv.Itoa(v.Int)), nil
}

// UnmarshalJSON reads a number, a numeric string or a "N%" string.
func (v *IntOrPercent) UnmarshalJSON(b []byte) error {
	s := strings.TrimSpace(string(b))
	if uq, err := strconv.Unquote(s); err == nil {
		s = uq
	}
	if p, ok := strings.CutSuffix(s, "%"); ok {
		n, err := strconv.Atoi(p)
		if err != nil {
			return err
		}
		*v = IntOrPercent{Percent: n, IsPct: true}
		return nil
	}
	n, err := strconv.Atoi(s)
	if err != nil {
		return err
	}
	*v = IntOrPercent{Int: n}
	return nil
}

// Resolve returns the count v means for total replicas: percentages round up
// when roundUp (maxSurge) and down otherwise (maxUnavailable), as Kubernetes
// does.
func (v *IntOrPercent) Resolve(total, def int, roundUp bool) int {
	if v == nil {
		return def
	}
	if !v.IsPct {
		return v.Int
	}
	n := v.Percent * total
	if roundUp {
		return (n + 99) / 100
	}
	return n / 100
}
