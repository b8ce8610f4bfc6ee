// Package object decodes the part of a stored object the observer needs:
// its identity and its owner references. Values are decoded once, when the
// observer first sees them, and the rest of the JSON is kept as bytes.
package object

import (
	"encoding/json"
	"strings"
)

// OwnerRef is one entry of metadata.ownerReferences.
type OwnerRef struct {
	Kind string `json:"kind"`
	Name string `json:"name"`
	UID  string `json:"uid"`
}

// Meta is an object's identity and owners. Fields missing from the value
// are empty; a value that is not JSON has an empty Meta.
type Meta struct {
	Kind      string
	Namespace string
	Name      string
	UID       string
	Owners    []OwnerRef
}

type wire struct {
	Kind     string `json:"kind"`
	Metadata struct {
		Name            string     `json:"name"`
		Namespace       string     `json:"namespace"`
		UID             string     `json:"uid"`
		OwnerReferences []OwnerRef `json:"ownerReferences"`
	} `json:"metadata"`
}

// Decode reads the metadata of value. It never fails: an undecodable value
// is still an object (its key still maps to a queue key), just one without
// owners.
func Decode(value []byte) Meta {
	var w wire
	if json.Unmarshal(value, &w) != nil {
		return Meta{}
	}
	m := Meta{Kind: w.Kind, Namespace: w.Metadata.Namespace, Name: w.Metadata.Name, UID: w.Metadata.UID}
	for _, o := range w.Metadata.OwnerReferences {
		if o.Kind != "" && o.Name != "" {
			m.Owners = append(m.Owners, o)
		}
	}
	return m
}

// registry is the root of Kubernetes' etcd layout.
const registry = "/registry/"

// QueueKey maps an etcd key to the queue key of the object itself:
// /registry/<resource>/<namespace>/<name> becomes <namespace>/<name>. A key
// outside /registry/<resource>/ loses watchPrefix instead. ok is false when
// nothing is left.
func QueueKey(etcdKey, watchPrefix string) (string, bool) {
	rest := ""
	if r, found := strings.CutPrefix(etcdKey, registry); found {
		if _, after, ok := strings.Cut(r, "/"); ok {
			rest = after
		}
	} else {
		rest = strings.TrimPrefix(etcdKey, watchPrefix)
	}
	rest = strings.Trim(rest, "/")
	return rest, rest != ""
}

// Namespace returns the namespace of the object stored at etcdKey: its
// metadata.namespace, or else the first path segment of its queue key when
// that key has two segments (namespace/name).
func Namespace(m Meta, etcdKey, watchPrefix string) string {
	if m.Namespace != "" {
		return m.Namespace
	}
	qk, ok := QueueKey(etcdKey, watchPrefix)
	if !ok {
		return ""
	}
	if ns, _, found := strings.Cut(qk, "/"); found {
		return ns
	}
	return ""
}
