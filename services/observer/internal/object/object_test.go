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
		{"/apps/thing", "/apps/", "thing", true},
		// Paths that do not fit the layout map to nothing.
		{"/registry/pods/default/web/extra", "/registry/pods/", "", false},
		{"/registry/pods/default/", "/registry/pods/", "", false},
		{"/registry/pods//web", "/registry/pods/", "", false},
		{"/registry/pods/default//web", "/registry/pods/", "", false},
		{"/apps/a/b/c", "/apps/", "", false},
		{"/apps/", "/apps/", "", false},
	} {
		got, ok := QueueKey(tc.key, tc.prefix)
		if got != tc.want || ok != tc.ok {
			t.Errorf("QueueKey(%q, %q) = %q, %v; want %q, %v", tc.key, tc.prefix, got, ok, tc.want, tc.ok)
		}
		if _, _, err := SplitKey(tc.key, tc.prefix); !tc.ok {
			if r, is := ReasonOf(err); !is || r != BadPath {
				t.Errorf("SplitKey(%q) = %v, want a bad_path error", tc.key, err)
			}
		}
	}
}

func TestDecode(t *testing.T) {
	got, err := Decode([]byte(`{"kind":"Pod","metadata":{"name":"web-1","namespace":"ns","uid":"u1",
		"ownerReferences":[{"kind":"ReplicaSet","name":"web","uid":"u0"},{"kind":"","name":"x"}]}}`))
	want := Meta{Kind: "Pod", Namespace: "ns", Name: "web-1", UID: "u1", Owners: []OwnerRef{{Kind: "ReplicaSet", Name: "web", UID: "u0"}}}
	if got.Fingerprint == 0 {
		t.Error("Decode gave no fingerprint")
	}
	got.Fingerprint = 0 // TestFingerprint* test it
	if err != nil || !reflect.DeepEqual(got, want) {
		t.Errorf("Decode = %+v, %v; want %+v", got, err, want)
	}
	if got := Namespace(Meta{}, "/registry/pods/other/p", "/registry/pods/"); got != "other" {
		t.Errorf("Namespace from key = %q, want other", got)
	}
	for _, tc := range []struct {
		name, value string
		want        Reason
	}{
		{"empty", "", Empty},
		{"protobuf", "k8s\x00\n\x0b\n\x02v1\x12\x03Pod", Protobuf},
		{"not json", "not json", InvalidJSON},
		{"truncated", `{"kind":"Pod","metadata":{`, InvalidJSON},
		{"wrong types", `{"metadata":{"ownerReferences":"web"}}`, InvalidJSON},
		{"trailing bytes", `{"kind":"Pod"}x`, InvalidJSON},
		{"array", `[{"kind":"Pod"}]`, NotObject},
		{"null", `null`, NotObject},
		{"string", ` "pod"`, NotObject},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := Decode([]byte(tc.value))
			r, ok := ReasonOf(err)
			if !ok || r != tc.want {
				t.Errorf("Decode(%q) = %v, want reason %v", tc.value, err, tc.want)
			}
			if !reflect.DeepEqual(m, Meta{}) {
				t.Errorf("Decode(%q) = %+v, want an empty Meta", tc.value, m)
			}
		})
	}
}

func TestCheck(t *testing.T) {
	for _, tc := range []struct {
		key, ns string
		ok      bool
	}{
		{"/registry/pods/a/p", "a", true},
		{"/registry/pods/a/p", "", true}, // taken from the key
		{"/registry/pods/a/p", "b", false},
		{"/registry/nodes/n1", "", true},
		{"/registry/nodes/n1", "a", false},
	} {
		err := Check(Meta{Namespace: tc.ns}, tc.key, "/registry/pods/")
		if tc.ok != (err == nil) {
			t.Errorf("Check(namespace %q, %s) = %v, want ok %v", tc.ns, tc.key, err, tc.ok)
		}
		if r, is := ReasonOf(err); err != nil && (!is || r != NamespaceMismatch) {
			t.Errorf("Check(namespace %q, %s) = %v, want namespace_mismatch", tc.ns, tc.key, err)
		}
	}
	if err := Check(Meta{}, "/registry/pods/a/b/c", "/registry/pods/"); err == nil {
		t.Error("Check of a bad path succeeded")
	}
}

func TestReasonNames(t *testing.T) {
	seen := map[string]bool{}
	for _, r := range Reasons {
		s := r.String()
		if s == "" || seen[s] {
			t.Errorf("reason %d has name %q (empty or repeated)", r, s)
		}
		seen[s] = true
	}
	if len(Reasons) != int(NumReasons) {
		t.Errorf("Reasons lists %d of %d reasons", len(Reasons), NumReasons)
	}
}
