package objects

import (
	"encoding/json"
	"testing"
)

// An owner reference keeps "controller" through a typed read and write,
// and ControllerRef finds the one reference that says it.
func TestControllerRef(t *testing.T) {
	in := `{"name":"web","namespace":"default","ownerReferences":[` +
		`{"kind":"Team","name":"a","uid":"u1"},` +
		`{"kind":"Foo","name":"f","uid":"u2","controller":false},` +
		`{"kind":"Foo","name":"g","uid":"u3","controller":true}]}`
	var m ObjectMeta
	if err := json.Unmarshal([]byte(in), &m); err != nil {
		t.Fatal(err)
	}
	ref := m.ControllerRef()
	if ref == nil || ref.Name != "g" || ref.UID != "u3" {
		t.Fatalf("ControllerRef = %+v, want the reference to Foo g", ref)
	}
	out, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if string(out) != in {
		t.Errorf("round trip:\n%s\nwant\n%s", out, in)
	}
	m.OwnerReferences = m.OwnerReferences[:2]
	if ref := m.ControllerRef(); ref != nil {
		t.Errorf("ControllerRef without a controller = %+v, want nil", ref)
	}
}
