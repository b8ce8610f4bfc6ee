package schema

// Metadata returns the schema of every object's metadata (docs/design.md,
// "Objects in etcd"), the same for every kind: a new copy each call.
func Metadata() *Schema {
	str := func(desc string) *Schema { return &Schema{Type: TypeString, Description: desc} }
	stringMap := func(desc string) *Schema {
		return &Schema{Type: TypeObject, Description: desc, AdditionalProperties: &Schema{Type: TypeString}}
	}
	zero := 0.0
	return &Schema{
		Type:        TypeObject,
		Description: "What identifies the object, and what every kind's objects carry.",
		Required:    []string{"name"},
		Properties: map[string]*Schema{
			"name":      str("The object's name, unique among its kind in its namespace: the last segment of its key."),
			"namespace": str("The object's namespace (default: \"default\")."),
			"uid":       str("A UUID that tells this object from an earlier one of the same name. A writer sets it when the object is created."),
			"generation": {Type: TypeInteger, Minimum: &zero,
				Description: "Counts the changes of spec: 1 when created, one more at each write that changes spec. A writer (batonctl, the SDK) raises it; a controller reports the one it acted on as status.observedGeneration."},
			"labels":      stringMap("String keys and values that select and group objects."),
			"annotations": stringMap("String keys and values for tools and controllers; not for selecting."),
			"ownerReferences": {Type: TypeArray, Description: "The objects this one belongs to, in its namespace: a change of it announces its owner to the owner's controller, which deletes it when the owner is gone.",
				Items: &Schema{Type: TypeObject, Required: []string{"kind", "name"}, Properties: map[string]*Schema{
					"apiVersion":         str("Accepted for manifests written for Kubernetes."),
					"kind":               str("The owner's kind."),
					"name":               str("The owner's name."),
					"uid":                str("The owner's uid: an owner of the same name and another uid is not this one."),
					"controller":         {Type: TypeBoolean, Description: "Whether the owner is the managing controller."},
					"blockOwnerDeletion": {Type: TypeBoolean, Description: "Accepted for manifests written for Kubernetes."},
				}}},
			"creationTimestamp": {Type: TypeString, Format: "date-time", Description: "When the object was created (RFC 3339, UTC). A writer sets it; batonctl shows it as AGE."},
			"resourceVersion":   str("Accepted for manifests written for Kubernetes; the etcd revision of the key is the object's version."),
			"finalizers":        {Type: TypeArray, Items: &Schema{Type: TypeString}, Description: "Kubernetes' metadata.finalizers: the names of the parties that must act before the object is removed."},
			"deletionTimestamp": {Type: TypeString, Format: "date-time", Description: "Kubernetes' metadata.deletionTimestamp: when the object's deletion was asked for (RFC 3339)."},
		},
	}
}
