package objects

// ObjectReference: one object named by kind, namespace, name and uid.

// ObjectReference names one object by kind, namespace, name and uid: what
// an Event is about (its involvedObject, as in Kubernetes' core/v1
// ObjectReference). The uid tells an object from an earlier one of the
// same name; it may be empty when it is not known.
type ObjectReference struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
	UID       string `json:"uid,omitempty"`
}

// Reference returns r itself, so that a reference stands for the object it
// names wherever an object is asked for (events.Recorder.Event).
func (r ObjectReference) Reference() ObjectReference { return r }

// Reference returns a reference to o: its kind field and its metadata's
// namespace, name and uid.
func (o *Object[S, T]) Reference() ObjectReference {
	return ObjectReference{Kind: o.Kind, Namespace: o.Metadata.Namespace, Name: o.Metadata.Name, UID: o.Metadata.UID}
}
