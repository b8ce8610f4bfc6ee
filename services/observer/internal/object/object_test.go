package object

import (
	"reflect"
	"testing"
)

func TestQueueKey(t *testing.T) {
	for _, tc := range []struct {
		key, prefix, want string
		ok                bool
	}{
		{"/registry/pods/default/web-abcde", "/registry/pods/", "default/web-abcde", true},
		{"/registry/pods/default/web-abcde", "/registry/pods/default/", "default/web-abcde", true},
		{"/registry/nodes/n1", "/registry/nodes/", "n1", true},
		{"/registry/pods/", "/registry/pods/", "", false},
		{"/apps/team/thing", "/apps/", "team/thing", true},
	} {
		got, ok := QueueKey(tc.key, tc.prefix)
		if got != tc.want || ok != tc.ok {
			t.Errorf("QueueKey(%q, %q) = %q, %v; want %q, %v", tc.key, tc.prefix, got, ok, tc.want, tc.ok)
		}
	}
}

func TestDecode(t *testing.T) {
	got := Decode([]byte(`{"kind":"Pod","metadata":{"name":"web-1","namespace":"ns","uid":"u1",
		"ownerReferences":[{"kind":"ReplicaSet","name":"web","uid":"u0"},{"kind":"","name":"x"}]}}`))
	want := Meta{Kind: "Pod", Namespace: "ns", Name: "web-1", UID: "u1", Owners: []OwnerRef{{Kind: "ReplicaSet", Name: "web", UID: "u0"}}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Decode = %+v, want %+v", got, want)
	}
	if got := Decode([]byte("not json")); !reflect.DeepEqual(got, Meta{}) {
		t.Errorf("Decode(not json) = %+v, want empty", got)
	}
	if got := Namespace(Meta{}, "/registry/pods/other/p", "/registry/pods/"); got != "other" {
		t.Errorf("Namespace from key = %q, want other", got)
	}
}
