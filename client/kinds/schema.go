package kinds

import (
	"fmt"
	"sync"

	"github.com/batonrun/baton/client/schema"
)

// A declaration may carry a structural schema and printer columns
// (client/schema): the schema of For's objects, which every writer that
// knows it applies before it writes (defaults filled in, then every field
// checked, an invalid object not written), and the columns batonctl get
// prints for For. The reference declarations carry the reference kinds'
// schemas the same way. Both are omitted from the JSON when unset, so a
// declaration without them is encoded as before they existed:
//
//	{"queue": "foos",
//	 "for": {"kind": "Foo", "resource": "foos"},
//	 "schema": {"spec": {"type": "object", "required": ["replicas"],
//	   "properties": {"replicas": {"type": "integer", "minimum": 0}}}},
//	 "printerColumns": [{"name": "Replicas", "type": "integer", "jsonPath": ".spec.replicas"}]}
//
// An observer built before these fields existed refuses a declaration
// that carries them (it refuses unknown fields, so that a misspelt field
// does not silently watch less): upgrade the observer before the workers
// that publish a schema.

// validateSchema names the first problem of d's schema and columns.
func (d Declaration) validateSchema() error {
	if d.Schema != nil {
		if err := d.Schema.Check(); err != nil {
			return fmt.Errorf("declaration of queue %s: %w", d.Queue, err)
		}
	}
	if err := schema.CheckColumns(d.PrinterColumns); err != nil {
		return fmt.Errorf("declaration of queue %s: %w", d.Queue, err)
	}
	return nil
}

// Validator returns the validator of d's For objects: under d's schema,
// or, without one, of their metadata alone (spec and status take any
// fields).
func (d Declaration) Validator() (*schema.Validator, error) {
	return schema.Compile(d.For.Kind, d.Schema)
}

// declared records d as the declaration of its For resource, the first
// one only (as Queue).
func (s *Set) declared(d Declaration) {
	if s.decls == nil {
		s.decls = map[string]Declaration{}
	}
	s.decls[d.For.Resource] = d
}

// Declaration returns the declaration of resource's controller, the first
// declared (a reference kind's is the reference declaration): where its
// schema and printer columns are.
func (s *Set) Declaration(resource string) (Declaration, bool) {
	d, ok := s.decls[resource]
	return d, ok
}

// builtinValidators are the reference kinds' validators, by resource,
// compiled once.
var builtinValidators = sync.OnceValue(func() map[string]*schema.Validator {
	out := map[string]*schema.Validator{}
	for _, d := range BuiltinDeclarations() {
		out[d.For.Resource] = schema.MustCompile(d.For.Kind, d.Schema)
	}
	return out
})

// BuiltinValidator returns the validator of a reference kind's objects, by
// resource; ok is false for any other resource.
func BuiltinValidator(resource string) (v *schema.Validator, ok bool) {
	v, ok = builtinValidators()[resource]
	return v, ok
}

// builtinSchema returns the schema of a reference kind (docs/design.md,
// "Objects in etcd"), a new copy each call.
func builtinSchema(kind string) *schema.Kind {
	zero := 0.0
	natural := func(desc string) *schema.Schema {
		return &schema.Schema{Type: schema.TypeInteger, Minimum: &zero, Description: desc}
	}
	object := func(desc string, required []string, props map[string]*schema.Schema) *schema.Schema {
		return &schema.Schema{Type: schema.TypeObject, Description: desc, Required: required, Properties: props}
	}
	stringMap := func(desc string) *schema.Schema {
		return &schema.Schema{Type: schema.TypeObject, Description: desc, AdditionalProperties: &schema.Schema{Type: schema.TypeString}}
	}
	podSpec := func() *schema.Schema {
		return object("What a pod runs. The pod runtime simulates it: a job pod ends after durationSeconds with exitCode.", nil, map[string]*schema.Schema{
			"image":           {Type: schema.TypeString, Description: "The image the pod would run."},
			"durationSeconds": {Type: schema.TypeNumber, Minimum: &zero, Description: "How long a job's pod runs before it ends, in seconds."},
			"exitCode":        {Type: schema.TypeInteger, Description: "How a job's pod ends: 0 succeeds, anything else fails."},
		})
	}
	template := func(owner string) *schema.Schema {
		return object(fmt.Sprintf("What the %s's pods are made from.", owner), []string{"spec"}, map[string]*schema.Schema{
			"metadata": object("The pods' metadata.", nil, map[string]*schema.Schema{
				"labels":      stringMap("Labels every pod carries."),
				"annotations": stringMap("Annotations every pod carries."),
			}),
			"spec": podSpec(),
		})
	}
	countOrPercent := func(desc string) *schema.Schema {
		return &schema.Schema{XIntOrString: true, Minimum: &zero, Pattern: `^[0-9]+%$`, Description: desc}
	}
	condition := object("A condition the Job has reached.", []string{"type", "status"}, map[string]*schema.Schema{
		"type":   {Type: schema.TypeString, Enum: []any{"Complete", "Failed"}, Description: "Complete: enough pods succeeded; Failed: more than backoffLimit failed."},
		"status": {Type: schema.TypeString, Description: "\"True\" once reached."},
	})
	observed := natural("The metadata.generation the controller last acted on.")
	switch kind {
	case Pod:
		return &schema.Kind{Spec: podSpec(), Status: object("What the pod runtime reports.", nil, map[string]*schema.Schema{
			"phase":              {Type: schema.TypeString, Enum: []any{"Pending", "Running", "Succeeded", "Failed"}, Description: "Pending, then Running; a job's pod ends Succeeded or Failed."},
			"startTime":          {Type: schema.TypeString, Format: "date-time", Description: "When the pod started running (RFC 3339)."},
			"observedGeneration": observed,
		})}
	case ReplicaSet:
		return &schema.Kind{
			Spec: object("The pods the ReplicaSet keeps.", []string{"template"}, map[string]*schema.Schema{
				"replicas": natural("How many live pods to keep (default 1)."),
				"template": template("ReplicaSet"),
			}),
			Status: object("What the ReplicaSet has.", nil, map[string]*schema.Schema{
				"replicas":           natural("Its live pods."),
				"readyReplicas":      natural("Its running pods."),
				"observedGeneration": observed,
			}),
		}
	case Deployment:
		return &schema.Kind{
			Spec: object("The pods the Deployment keeps, and how it rolls out a new template.", []string{"template"}, map[string]*schema.Schema{
				"replicas":             natural("How many pods to keep (default 1)."),
				"template":             template("Deployment"),
				"revisionHistoryLimit": natural("How many old ReplicaSets to keep, scaled to 0 (default 10)."),
				"strategy": object("Bounds of a rolling update.", nil, map[string]*schema.Schema{
					"maxSurge":       countOrPercent(`How many pods above replicas a rollout may run: a count or a percentage such as "25%" (default 1).`),
					"maxUnavailable": countOrPercent(`How many pods below replicas a rollout may leave: a count or a percentage such as "25%" (default 0).`),
				}),
			}),
			Status: object("What the Deployment has.", nil, map[string]*schema.Schema{
				"replicas":           natural("Its live pods."),
				"updatedReplicas":    natural("Its live pods of the current template."),
				"readyReplicas":      natural("Its running pods."),
				"observedGeneration": observed,
			}),
		}
	case Job:
		return &schema.Kind{
			Spec: object("The pods the Job runs to completion.", []string{"template"}, map[string]*schema.Schema{
				"completions":  natural("How many pods must succeed (default 1)."),
				"parallelism":  natural("How many pods may run at once (default 1)."),
				"backoffLimit": natural("How many failed pods fail the Job: one more than this (default 6)."),
				"template":     template("Job"),
			}),
			Status: object("What the Job's pods have done.", nil, map[string]*schema.Schema{
				"active":             natural("Its running pods."),
				"succeeded":          natural("Its pods that succeeded."),
				"failed":             natural("Its pods that failed."),
				"conditions":         {Type: schema.TypeArray, Items: condition, Description: "Complete or Failed, once the Job ends."},
				"observedGeneration": observed,
			}),
		}
	case StatefulSet:
		return &schema.Kind{
			Spec: object("The pods <set>-0 … <set>-(replicas-1), created in order.", []string{"template"}, map[string]*schema.Schema{
				"replicas": natural("How many pods (default 1)."),
				"template": template("StatefulSet"),
			}),
			Status: object("What the StatefulSet has.", nil, map[string]*schema.Schema{
				"replicas":           natural("Its live pods."),
				"readyReplicas":      natural("Its running pods."),
				"observedGeneration": observed,
			}),
		}
	}
	return nil
}
