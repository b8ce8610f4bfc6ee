// Package object decodes the part of a stored object the observer needs:
// its identity and its owner references. Values are decoded once, when the
// observer first sees them, and the rest of the JSON is kept as bytes.
//
// It also says when a key or a value does not fit Kubernetes' layout, and
// why (a Reason from a small fixed set, so it can label a metric).
package object

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// OwnerRef is one entry of metadata.ownerReferences.
type OwnerRef struct {
	Kind string `json:"kind"`
	Name string `json:"name"`
	UID  string `json:"uid"`
}

// Meta is an object's identity and owners. Fields missing from the value
// are empty; a malformed value has an empty Meta.
type Meta struct {
	Kind      string
	Namespace string
	Name      string
	UID       string
	Owners    []OwnerRef
	// Fingerprint is a hash of the value without its top-level "status"
	// member (see StatusOnly); 0 for a malformed value, which has none.
	Fingerprint uint64
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

// Reason says why a key or value is malformed.
type Reason uint8

// The reasons, in the order of Reasons.
const (
	// BadPath: the key is not <prefix>[<namespace>/]<name> as the layout
	// below says (deeper, or an empty segment).
	BadPath Reason = iota
	// Empty: the value has no bytes.
	Empty
	// Protobuf: the value starts with Kubernetes' protobuf magic "k8s\x00"
	// (the observer reads JSON only).
	Protobuf
	// InvalidJSON: the value is not JSON, or its metadata has the wrong
	// types (e.g. a string for ownerReferences).
	InvalidJSON
	// NotObject: the value is JSON but not an object (an array, a string,
	// a number, null).
	NotObject
	// NamespaceMismatch: metadata.namespace is set and differs from the
	// namespace the key says (none, for a one-segment key).
	NamespaceMismatch

	// NumReasons is the number of reasons, for arrays indexed by Reason.
	NumReasons = iota
)

// Reasons lists every Reason, for metrics that show each one.
var Reasons = []Reason{BadPath, Empty, Protobuf, InvalidJSON, NotObject, NamespaceMismatch}

var reasonNames = [NumReasons]string{"bad_path", "empty", "protobuf", "invalid_json", "not_object", "namespace_mismatch"}

// String returns the reason's metric label, e.g. "invalid_json".
func (r Reason) String() string {
	if r < NumReasons {
		return reasonNames[r]
	}
	return fmt.Sprintf("reason(%d)", uint8(r))
}

// MalformedError is what Decode, Check and SplitKey return for a key or
// value that does not fit.
type MalformedError struct {
	Reason Reason
	Detail string
}

func (e *MalformedError) Error() string { return e.Reason.String() + ": " + e.Detail }

// ReasonOf returns the Reason of a *MalformedError in err's chain.
func ReasonOf(err error) (Reason, bool) {
	var me *MalformedError
	if errors.As(err, &me) {
		return me.Reason, true
	}
	return 0, false
}

func malformed(r Reason, format string, args ...any) error {
	return &MalformedError{Reason: r, Detail: fmt.Sprintf(format, args...)}
}

// protobufMagic starts every value Kubernetes stores as protobuf
// (k8s.io/apimachinery/pkg/runtime/serializer/protobuf).
var protobufMagic = []byte("k8s\x00")

// Decode reads the metadata of value. A malformed value (empty, protobuf,
// not JSON, not a JSON object) gives an empty Meta and a *MalformedError:
// the object is still an object (its key still maps to a queue key), just
// one without owners.
func Decode(value []byte) (Meta, error) {
	switch {
	case len(value) == 0:
		return Meta{}, malformed(Empty, "the value is empty")
	case bytes.HasPrefix(value, protobufMagic):
		return Meta{}, malformed(Protobuf, "the value is Kubernetes protobuf (k8s\\x00 magic), not JSON")
	}
	if t := bytes.TrimLeft(value, " \t\r\n"); len(t) == 0 || t[0] != '{' {
		if json.Valid(value) {
			return Meta{}, malformed(NotObject, "the value is JSON but not an object")
		}
		return Meta{}, malformed(InvalidJSON, "the value is not JSON")
	}
	var w wire
	if err := json.Unmarshal(value, &w); err != nil {
		return Meta{}, malformed(InvalidJSON, "%v", err)
	}
	m := Meta{Kind: w.Kind, Namespace: w.Metadata.Namespace, Name: w.Metadata.Name, UID: w.Metadata.UID,
		Fingerprint: fingerprint(value)}
	for _, o := range w.Metadata.OwnerReferences {
		if o.Kind != "" && o.Name != "" {
			m.Owners = append(m.Owners, o)
		}
	}
	return m, nil
}

// Check reports whether m agrees with the key it is stored at: a
// metadata.namespace that is set must be the key's namespace (a
// one-segment key is cluster-scoped and has none). An empty
// metadata.namespace is taken from the key.
func Check(m Meta, etcdKey, watchPrefix string) error {
	ns, _, err := SplitKey(etcdKey, watchPrefix)
	if err != nil {
		return err
	}
	if m.Namespace != "" && m.Namespace != ns {
		if ns == "" {
			return malformed(NamespaceMismatch, "metadata.namespace is %q but the key is cluster-scoped (one segment)", m.Namespace)
		}
		return malformed(NamespaceMismatch, "metadata.namespace is %q but the key's namespace is %q", m.Namespace, ns)
	}
	return nil
}

// registry is the root of Kubernetes' etcd layout.
const registry = "/registry/"

// SplitKey returns the namespace ("" for a cluster-scoped object) and name
// of the object at etcdKey. Under /registry/ the layout is Kubernetes':
// /registry/<resource>/<namespace>/<name> or /registry/<resource>/<name>;
// a key outside /registry/ is watchPrefix followed by <namespace>/<name> or
// <name>. Anything else (more segments, an empty one) is a *MalformedError
// with Reason BadPath.
func SplitKey(etcdKey, watchPrefix string) (namespace, name string, err error) {
	var rest string
	if r, found := strings.CutPrefix(etcdKey, registry); found {
		_, after, ok := strings.Cut(r, "/")
		if !ok {
			return "", "", malformed(BadPath, "no /registry/<resource>/ in the key")
		}
		rest = after
	} else {
		r, found := strings.CutPrefix(etcdKey, watchPrefix)
		if !found {
			return "", "", malformed(BadPath, "the key is not under %s", watchPrefix)
		}
		rest = r
	}
	first, second, two := strings.Cut(rest, "/")
	switch {
	case first == "" || (two && second == ""):
		return "", "", malformed(BadPath, "an empty path segment")
	case two && strings.Contains(second, "/"):
		return "", "", malformed(BadPath, "deeper than <namespace>/<name>")
	case two:
		return first, second, nil
	default:
		return "", first, nil
	}
}

// QueueKey maps an etcd key to the queue key of the object itself:
// /registry/<resource>/<namespace>/<name> becomes <namespace>/<name>
// (/registry/<resource>/<name> becomes <name>). A key outside /registry/
// loses watchPrefix instead. ok is false for a key SplitKey refuses.
func QueueKey(etcdKey, watchPrefix string) (string, bool) {
	ns, name, err := SplitKey(etcdKey, watchPrefix)
	switch {
	case err != nil:
		return "", false
	case ns == "":
		return name, true
	default:
		return ns + "/" + name, true
	}
}

// Namespace returns the namespace of the object stored at etcdKey: its
// metadata.namespace, or else the namespace its key says.
func Namespace(m Meta, etcdKey, watchPrefix string) string {
	if m.Namespace != "" {
		return m.Namespace
	}
	ns, _, _ := SplitKey(etcdKey, watchPrefix)
	return ns
}
