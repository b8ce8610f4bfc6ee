package resource

import "testing"

func TestLookup(t *testing.T) {
	tests := []struct{ in, want string }{
		{"deployments", "Deployment"}, {"deploy", "Deployment"}, {"Deployment", "Deployment"},
		{"rs", "ReplicaSet"}, {"sts", "StatefulSet"}, {"job", "Job"}, {"po", "Pod"}, {"PODS", "Pod"},
	}
	for _, tc := range tests {
		got, err := Lookup(tc.in)
		if err != nil || got.Kind != tc.want {
			t.Errorf("Lookup(%q) = %v, %v; want %s", tc.in, got.Kind, err, tc.want)
		}
	}
	if _, err := Lookup("services"); err == nil {
		t.Error("Lookup(services) succeeded")
	}
	d, _ := Lookup("deploy")
	if got := d.Key("ns", "web"); got != "/registry/deployments/ns/web" {
		t.Errorf("Key = %q", got)
	}
	if got := d.NamespacePrefix(""); got != "/registry/deployments/" {
		t.Errorf("NamespacePrefix = %q", got)
	}
}
