package events

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/batonrun/baton/client/kinds"
	"github.com/batonrun/baton/sdk/objects"
)

// The types of an Event, as Kubernetes has them.
const (
	// Normal says that something went as it should: a pod created, a
	// ReplicaSet scaled.
	Normal = "Normal"
	// Warning says that something went wrong, or may have.
	Warning = "Warning"
)

// Limits of one Event. A reason or a message past them is a mistake of the
// caller (a reason is a CamelCase word) or an error that quotes too much;
// the message is cut, not refused.
const (
	// MaxReasonBytes bounds a reason (Kubernetes' events.k8s.io bound).
	MaxReasonBytes = 128
	// MaxMessageBytes bounds a message; a longer one is cut at a
	// character boundary and ends with "…".
	MaxMessageBytes = 1024
)

// Resource is where Events are kept: /registry/<Resource>/<namespace>/<name>.
var Resource = kinds.EventKind().Resource

// Event is one stored Event: what happened to one object, how often, when
// first and last. Its fields are kubectl's.
type Event struct {
	// Kind is "Event".
	Kind     string             `json:"kind"`
	Metadata objects.ObjectMeta `json:"metadata"`
	// InvolvedObject is the object the event is about.
	InvolvedObject objects.ObjectReference `json:"involvedObject"`
	// Reason is a short CamelCase word a program can match:
	// "SuccessfulCreate".
	Reason string `json:"reason"`
	// Message says it for people: "Created pod: web-x7k2p".
	Message string `json:"message"`
	// Type is Normal or Warning.
	Type string `json:"type"`
	// Count is how often the event was recorded since FirstTimestamp.
	Count int `json:"count"`
	// FirstTimestamp and LastTimestamp are when it was first and last
	// recorded (RFC 3339, UTC).
	FirstTimestamp time.Time `json:"firstTimestamp"`
	LastTimestamp  time.Time `json:"lastTimestamp"`
	// Source is who recorded it.
	Source Source `json:"source"`
	// ReportingController is the component that recorded it (Source's,
	// as newer Kubernetes events name it).
	ReportingController string `json:"reportingController,omitempty"`
}

// Source is who recorded an Event.
type Source struct {
	// Component names the recording controller: "replicaset-controller".
	Component string `json:"component,omitempty"`
	// Host names the machine, when that matters (a node agent's).
	Host string `json:"host,omitempty"`
}

// Meta returns the Event's metadata.
func (e *Event) Meta() *objects.ObjectMeta { return &e.Metadata }

// Object is what an event is recorded about: a typed object of package
// objects (*objects.ReplicaSet, *objects.Pod…), or an
// objects.ObjectReference naming any object.
type Object interface {
	Reference() objects.ObjectReference
}

// record is one call of Event, on its way to etcd.
type record struct {
	ref       objects.ObjectReference
	typ       string
	reason    string
	message   string
	component string
	host      string
	at        time.Time
	// combined: the message stands for similar events (aggregate.go),
	// and is not part of the event's name.
	combined bool
}

// check names the first reason r cannot be an Event.
func (r *record) check() error {
	switch {
	case r.ref.Kind == "" || r.ref.Namespace == "" || r.ref.Name == "":
		return fmt.Errorf("events: the object %+v has no kind, namespace or name", r.ref)
	case r.typ != Normal && r.typ != Warning:
		return fmt.Errorf("events: type %q is neither %s nor %s", r.typ, Normal, Warning)
	case r.reason == "":
		return errors.New("events: empty reason")
	case len(r.reason) > MaxReasonBytes:
		return fmt.Errorf("events: reason of %d bytes, at most %d", len(r.reason), MaxReasonBytes)
	}
	return nil
}

// Name is the name of the Event that ref, typ, reason, message and
// component make: ref's name, a dot and 16 hex digits of their hash. The
// same event gets the same name from every process, so a repeat finds the
// stored one.
func Name(ref objects.ObjectReference, typ, reason, message, component string) string {
	h := sha256.New()
	for _, s := range []string{ref.Kind, ref.Namespace, ref.Name, ref.UID, typ, reason, message, component} {
		h.Write([]byte(s))
		h.Write([]byte{0})
	}
	return ref.Name + "." + hex.EncodeToString(h.Sum(nil)[:8])
}

func (r *record) name() string {
	if r.combined {
		return Name(r.ref, r.typ, r.reason, CombinedPrefix, r.component)
	}
	return Name(r.ref, r.typ, r.reason, r.message, r.component)
}

// key is the etcd key of r's Event.
func (r *record) key() string { return objects.Key(Resource, r.ref.Namespace, r.name()) }

// same reports whether e is the event r records (and not another whose
// name hashed the same).
func (r *record) same(e *Event) bool {
	sameMessage := e.Message == r.message
	if r.combined {
		sameMessage = strings.HasPrefix(e.Message, CombinedPrefix)
	}
	return e.InvolvedObject == r.ref && e.Type == r.typ && e.Reason == r.reason &&
		sameMessage && e.Source.Component == r.component
}

// truncate cuts s to at most MaxMessageBytes, at a character boundary,
// ending it with "…" when it was cut.
func truncate(s string) string {
	if len(s) <= MaxMessageBytes {
		return s
	}
	const ellipsis = "…"
	cut := MaxMessageBytes - len(ellipsis)
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + ellipsis
}
