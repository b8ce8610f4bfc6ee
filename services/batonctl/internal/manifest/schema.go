package manifest

import "github.com/batonrun/baton/client/kinds"

// field describes what a manifest may hold at one place. The schema is
// strict, as kubectl's default field validation is: an unknown field is
// almost always a typo ("replcias") that would otherwise be stored and
// silently ignored by the controller.
type field struct {
	typ      fieldType
	fields   map[string]*field // typObject: the allowed keys
	open     bool              // typObject: any keys, any values
	required []string          // typObject: keys that must be present
	elem     *field            // typList and typStringMap: the element
	min      *int64            // typInt: the least allowed value
}

type fieldType int

const (
	typAny fieldType = iota
	typString
	typInt
	typBool
	typObject
	typList
	typStringMap
	typNumber       // an integer or a decimal
	typIntOrPercent // 1 or "25%"
)

func (t fieldType) String() string {
	switch t {
	case typString:
		return "a string"
	case typInt:
		return "an integer"
	case typBool:
		return "a boolean"
	case typObject:
		return "a mapping"
	case typList:
		return "a list"
	case typStringMap:
		return "a mapping of strings to strings"
	case typNumber:
		return "a number"
	case typIntOrPercent:
		return `an integer or a percentage such as "25%"`
	default:
		return "any value"
	}
}

func ptr(v int64) *int64 { return &v }

var (
	str        = &field{typ: typString}
	anyValue   = &field{typ: typAny}
	natural    = &field{typ: typInt, min: ptr(0)}
	seconds    = &field{typ: typNumber, min: ptr(0)}
	countOrPct = &field{typ: typIntOrPercent, min: ptr(0)}
	integer    = &field{typ: typInt}
	boolean    = &field{typ: typBool}
	stringMap  = &field{typ: typStringMap, elem: str}
	ownerRefer = &field{typ: typObject, required: []string{"kind", "name"}, fields: map[string]*field{
		"apiVersion": str, "kind": str, "name": str, "uid": str, "controller": boolean, "blockOwnerDeletion": boolean,
	}}
	metadata = &field{typ: typObject, required: []string{"name"}, fields: map[string]*field{
		"name": str, "namespace": str, "uid": str, "generation": natural,
		"labels": stringMap, "annotations": stringMap,
		"ownerReferences":   {typ: typList, elem: ownerRefer},
		"creationTimestamp": str, "resourceVersion": str,
	}}
	// podSpec is what a pod runs; the pod runtime simulates it.
	podSpec = &field{typ: typObject, fields: map[string]*field{
		"image": str, "durationSeconds": seconds, "exitCode": integer,
	}}
	template = &field{typ: typObject, required: []string{"spec"}, fields: map[string]*field{
		"metadata": {typ: typObject, fields: map[string]*field{"labels": stringMap, "annotations": stringMap}},
		"spec":     podSpec,
	}}
)

// specs holds the spec schema of each reference kind (the design,
// docs/design.md, "Objects in etcd"). A kind that a controller declares
// (client/kinds, discovered under /baton/rules/) has no entry: its spec may
// be any mapping (declaredSpec), as batonctl cannot know the fields of a
// controller's own kind; that controller checks them.
var specs = map[string]*field{
	kinds.ReplicaSet: {typ: typObject, required: []string{"template"}, fields: map[string]*field{
		"replicas": natural, "template": template,
	}},
	kinds.Deployment: {typ: typObject, required: []string{"template"}, fields: map[string]*field{
		"replicas": natural, "template": template, "revisionHistoryLimit": natural,
		"strategy": {typ: typObject, fields: map[string]*field{"maxSurge": countOrPct, "maxUnavailable": countOrPct}},
	}},
	kinds.Job: {typ: typObject, required: []string{"template"}, fields: map[string]*field{
		"completions": natural, "parallelism": natural, "backoffLimit": natural, "template": template,
	}},
	kinds.StatefulSet: {typ: typObject, required: []string{"template"}, fields: map[string]*field{
		"replicas": natural, "template": template,
	}},
	kinds.Pod: podSpec,
}

// declaredSpec is the spec of a declared kind: a mapping, with any fields.
var declaredSpec = &field{typ: typObject, open: true}

// specSchema returns the spec schema of kind.
func specSchema(kind string) *field {
	if f, ok := specs[kind]; ok {
		return f
	}
	return declaredSpec
}

// objectSchema returns the schema of a whole object of kind. status is
// accepted (so `batonctl get -o yaml | batonctl apply -f -` round-trips) but
// apply ignores it: status has one writer, the controller.
func objectSchema(spec *field) *field {
	return &field{typ: typObject, required: []string{"kind", "metadata", "spec"}, fields: map[string]*field{
		"apiVersion": str, "kind": str, "metadata": metadata, "spec": spec, "status": anyValue,
	}}
}
