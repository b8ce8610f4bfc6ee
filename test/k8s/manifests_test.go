package k8s

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

const (
	// manifestsDir is applied whole, as the README tells a user to.
	manifestsDir = "../../deploy/kubernetes"
	// namespace is the one the manifests create and fill.
	namespace = "baton"
	// fieldManager is the manager the applies write as.
	fieldManager = "baton-manifests"
	// wait bounds each wait for the controllers.
	wait = 90 * time.Second
)

// The parts of the API's objects the test reads, decoded from kubectl's JSON.
type (
	meta struct {
		Name, Namespace, UID string
		Labels               map[string]string
		OwnerReferences      []ownerRef
		ManagedFields        []struct {
			Manager, Operation, Subresource string
			FieldsV1                        map[string]any
		}
	}
	ownerRef struct {
		Kind, Name, UID string
		Controller      bool
	}
	object struct {
		Kind     string
		Metadata meta
		Spec     json.RawMessage
	}
	workload struct {
		Kind     string
		Metadata meta
		Spec     struct {
			Replicas             *int32
			VolumeClaimTemplates []struct{ Metadata meta }
		}
	}
	pod struct {
		Metadata meta
		Spec     struct{ NodeName string }
		Status   struct {
			Phase      string
			Conditions []struct{ Type, Status, Reason, Message string }
		}
	}
	claim struct {
		Metadata meta
		Status   struct{ Phase string }
	}
	autoscaler struct {
		Metadata meta
		Spec     struct {
			ScaleTargetRef struct{ APIVersion, Kind, Name string }
			MinReplicas    *int32
			MaxReplicas    int32
		}
	}
)

// list runs kubectl get -o json in the namespace and decodes the items.
func list[T any](t *testing.T, cp *controlPlane, resources string) []T {
	t.Helper()
	out := cp.mustKubectl(t, "get", resources, "--namespace="+namespace, "-o", "json")
	var l struct{ Items []T }
	if err := json.Unmarshal([]byte(out), &l); err != nil {
		t.Fatalf("kubectl get %s: %v\n%s", resources, err, out)
	}
	return l.Items
}

// controlledBy reports whether owner is m's controller.
func controlledBy(m meta, owner meta) bool {
	return slices.ContainsFunc(m.OwnerReferences, func(r ownerRef) bool { return r.Controller && r.UID == owner.UID })
}

// TestManifestsApplyCleanly applies deploy/kubernetes/ to a control plane
// and re-applies it after the workers were scaled; see the package comment.
func TestManifestsApplyCleanly(t *testing.T) {
	cp := startControlPlane(t)
	dir, err := filepath.Abs(manifestsDir)
	if err != nil {
		t.Fatal(err)
	}
	apply := func(step string) {
		t.Helper()
		r := cp.kubectl(t.Context(), nil, "apply", "--server-side", "--field-manager="+fieldManager, "-f", dir)
		if r.failed() {
			t.Fatalf("%s of %s failed (an error, a conflict or a warning):\n%s", step, manifestsDir, r)
		}
		t.Logf("%s, server-side, as %q: no error, no warning:\n%s", step, fieldManager, strings.TrimSpace(r.stdout))
	}

	apply("first apply")
	checkPodSecurity(t, cp)
	// The namespace's "default" ServiceAccount, which every pod needs, is the
	// service account controller's to create.
	eventually(t, wait, "the service account controller made baton's default ServiceAccount", func() (bool, string) {
		r := cp.kubectl(t.Context(), nil, "get", "serviceaccount", "default", "--namespace="+namespace, "--ignore-not-found", "-o", "name")
		return !r.failed() && strings.TrimSpace(r.stdout) != "", r.String()
	})
	checkControllersCreated(t, cp)

	// The HorizontalPodAutoscaler's target: the autoscaler moves its
	// replicas through the scale subresource.
	hpas := list[autoscaler](t, cp, "horizontalpodautoscalers")
	if len(hpas) == 0 {
		t.Fatal("the manifests have no HorizontalPodAutoscaler: nothing scales through the scale subresource")
	}
	for _, h := range hpas {
		ref := h.Spec.ScaleTargetRef
		target := strings.ToLower(ref.Kind) + "/" + ref.Name
		minReplicas := int32(1)
		if h.Spec.MinReplicas != nil {
			minReplicas = *h.Spec.MinReplicas
		}
		// With no metrics server the autoscaler can only enforce its bounds:
		// a target created with fewer replicas than minReplicas (a
		// Deployment without replicas has one) is raised to it through the
		// scale subresource.
		eventually(t, wait, fmt.Sprintf("HorizontalPodAutoscaler %s keeps %s at %d replicas or more", h.Metadata.Name, target, minReplicas), func() (bool, string) {
			w := getWorkload(t, cp, target)
			return w.Spec.Replicas != nil && *w.Spec.Replicas >= minReplicas, fmt.Sprintf("replicas %v, managers of .spec.replicas %v", deref(w.Spec.Replicas), replicaManagers(w.Metadata))
		})
		n := *getWorkload(t, cp, target).Spec.Replicas + 1
		if n > h.Spec.MaxReplicas {
			t.Fatalf("HorizontalPodAutoscaler %s: %s already has its maxReplicas %d", h.Metadata.Name, target, h.Spec.MaxReplicas)
		}
		// kubectl scale writes the scale subresource, as the autoscaler does.
		out := cp.mustKubectl(t, "scale", target, "--namespace="+namespace, "--replicas="+strconv.Itoa(int(n)))
		t.Logf("scaled through the scale subresource: %s (managers of .spec.replicas: %v)", strings.TrimSpace(out), replicaManagers(getWorkload(t, cp, target).Metadata))
		checkControllersCreated(t, cp)

		before := specs(t, cp)
		apply("re-apply after the scale")
		w := getWorkload(t, cp, target)
		if w.Spec.Replicas == nil || *w.Spec.Replicas != n {
			t.Errorf("the re-apply set %s's replicas to %v, want the scaled %d: the manifests must leave replicas to the autoscaler", target, deref(w.Spec.Replicas), n)
		}
		if slices.Contains(replicaManagers(w.Metadata), fieldManager) {
			t.Errorf("%s: %q owns .spec.replicas (managers %v): the manifests set the replicas the autoscaler moves", target, fieldManager, replicaManagers(w.Metadata))
		}
		after := specs(t, cp)
		for k, s := range before {
			if after[k] != s {
				t.Errorf("the re-apply changed the spec of %s:\nbefore %s\nafter  %s", k, s, after[k])
			}
		}
	}

	t.Log("pods stay Pending: no scheduler or kubelet runs here; that the controllers could create them shows Pod Security admitted them")
	for _, p := range list[pod](t, cp, "pods") {
		t.Logf("  pod %s: %s, node %q", p.Metadata.Name, p.Status.Phase, p.Spec.NodeName)
	}

	out := cp.mustKubectl(t, "delete", "-f", dir, "--wait=false")
	t.Logf("deleted:\n%s", strings.TrimSpace(out))
	eventually(t, wait, "the namespace controller emptied and removed namespace "+namespace, func() (bool, string) {
		r := cp.kubectl(t.Context(), nil, "get", "namespace", namespace, "--ignore-not-found", "-o", "jsonpath={.status}")
		return !r.failed() && strings.TrimSpace(r.stdout) == "", r.String()
	})
}

// checkPodSecurity checks that the namespace enforces the "restricted" Pod
// Security level, and that the API server warns about a pod template that
// level refuses: so the first apply, with no warning, admitted every template.
func checkPodSecurity(t *testing.T, cp *controlPlane) {
	t.Helper()
	var ns struct{ Metadata meta }
	if err := json.Unmarshal([]byte(cp.mustKubectl(t, "get", "namespace", namespace, "-o", "json")), &ns); err != nil {
		t.Fatal(err)
	}
	const label = "pod-security.kubernetes.io/enforce"
	if got := ns.Metadata.Labels[label]; got != "restricted" {
		t.Fatalf("namespace %s: label %s = %q, want restricted", namespace, label, got)
	}
	unrestricted := fmt.Sprintf(`{"apiVersion": "apps/v1", "kind": "Deployment",
  "metadata": {"name": "psa-probe", "namespace": %q},
  "spec": {"selector": {"matchLabels": {"app": "psa-probe"}},
    "template": {"metadata": {"labels": {"app": "psa-probe"}},
      "spec": {"containers": [{"name": "c", "image": "example/c:1"}]}}}}`, namespace)
	r := cp.kubectl(t.Context(), []byte(unrestricted), "apply", "--server-side", "--dry-run=server", "--field-manager="+fieldManager, "-f", "-")
	if !strings.Contains(r.stderr, "Warning: would violate PodSecurity \"restricted") {
		t.Fatalf("a privileged pod template in namespace %s (no securityContext) drew no Pod Security warning, so the apply's silence proves nothing:\n%s", namespace, r)
	}
	t.Logf("namespace %s enforces Pod Security \"restricted\", and warns at apply time about a template it would refuse (checked with a dry run of one with no securityContext)", namespace)
}

// checkControllersCreated waits until every Deployment's controller made a
// ReplicaSet with the Deployment's replicas and the ReplicaSet controller its
// pods, and every StatefulSet's controller its pods and their claims.
func checkControllersCreated(t *testing.T, cp *controlPlane) {
	t.Helper()
	for _, w := range list[workload](t, cp, "deployments,statefulsets") {
		target := strings.ToLower(w.Kind) + "/" + w.Metadata.Name
		switch w.Kind {
		case "Deployment":
			eventually(t, wait, fmt.Sprintf("the Deployment controller made %s's ReplicaSet, and the ReplicaSet controller its pods", target), func() (bool, string) {
				w := getWorkload(t, cp, target)
				want := deref(w.Spec.Replicas)
				var seen []string
				for _, rs := range list[workload](t, cp, "replicasets") {
					if !controlledBy(rs.Metadata, w.Metadata) {
						continue
					}
					pods := podsOf(t, cp, rs.Metadata)
					if deref(rs.Spec.Replicas) == want && len(pods) == int(want) {
						return true, ""
					}
					seen = append(seen, fmt.Sprintf("ReplicaSet %s: replicas %d, pods %v", rs.Metadata.Name, deref(rs.Spec.Replicas), pods))
				}
				return false, fmt.Sprintf("want a ReplicaSet controlled by %s with %d replicas and as many pods, have %v%s", target, want, seen, events(t, cp))
			})
		case "StatefulSet":
			eventually(t, wait, fmt.Sprintf("the StatefulSet controller made %s's pods and their PersistentVolumeClaims", target), func() (bool, string) {
				w := getWorkload(t, cp, target)
				pods := podsOf(t, cp, w.Metadata)
				claims := map[string]string{}
				for _, c := range list[claim](t, cp, "persistentvolumeclaims") {
					claims[c.Metadata.Name] = c.Status.Phase
				}
				for i := range deref(w.Spec.Replicas) {
					name := fmt.Sprintf("%s-%d", w.Metadata.Name, i)
					if !slices.Contains(pods, name) {
						return false, fmt.Sprintf("no pod %s (pods %v)%s", name, pods, events(t, cp))
					}
					for _, tmpl := range w.Spec.VolumeClaimTemplates {
						c := tmpl.Metadata.Name + "-" + name
						if _, ok := claims[c]; !ok {
							return false, fmt.Sprintf("no PersistentVolumeClaim %s (claims %v)%s", c, claims, events(t, cp))
						}
					}
				}
				return len(pods) == int(deref(w.Spec.Replicas)), fmt.Sprintf("pods %v, want %d", pods, deref(w.Spec.Replicas))
			})
		}
	}
}

func getWorkload(t *testing.T, cp *controlPlane, target string) workload {
	t.Helper()
	var w workload
	out := cp.mustKubectl(t, "get", target, "--namespace="+namespace, "--show-managed-fields", "-o", "json")
	if err := json.Unmarshal([]byte(out), &w); err != nil {
		t.Fatalf("kubectl get %s: %v", target, err)
	}
	return w
}

// podsOf returns the names of the pods owner controls.
func podsOf(t *testing.T, cp *controlPlane, owner meta) []string {
	t.Helper()
	var names []string
	for _, p := range list[pod](t, cp, "pods") {
		if controlledBy(p.Metadata, owner) {
			names = append(names, p.Metadata.Name)
		}
	}
	slices.Sort(names)
	return names
}

// replicaManagers returns the managers that own .spec.replicas, as
// manager[/subresource]. A write through the scale subresource is recorded
// only when it takes the field from another manager, so with nobody owning
// the replicas (as it should be) the list stays empty.
func replicaManagers(m meta) []string {
	var out []string
	for _, f := range m.ManagedFields {
		spec, _ := f.FieldsV1["f:spec"].(map[string]any)
		if _, ok := spec["f:replicas"]; !ok {
			continue
		}
		name := f.Manager
		if f.Subresource != "" {
			name += "/" + f.Subresource
		}
		out = append(out, name)
	}
	return out
}

// specs returns the spec of every object the manifests made, by kind/name.
func specs(t *testing.T, cp *controlPlane) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, o := range list[object](t, cp, "deployments,statefulsets,services,horizontalpodautoscalers,poddisruptionbudgets") {
		out[o.Kind+"/"+o.Metadata.Name] = string(o.Spec)
	}
	return out
}

// events returns the namespace's warning events, to explain a wait that
// failed (a pod Pod Security refused shows as FailedCreate).
func events(t *testing.T, cp *controlPlane) string {
	t.Helper()
	r := cp.kubectl(t.Context(), nil, "get", "events", "--namespace="+namespace, "--field-selector=type=Warning",
		"-o", "custom-columns=OBJECT:.involvedObject.name,REASON:.reason,MESSAGE:.message", "--no-headers")
	if s := strings.TrimSpace(r.stdout); s != "" {
		return "\nwarning events:\n" + s
	}
	return ""
}

func deref(p *int32) int32 {
	if p == nil {
		return 0
	}
	return *p
}
