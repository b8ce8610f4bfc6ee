package kubernetes_test

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// binary is one of Baton's binaries as docs/design.md ("Binaries and flags")
// defines it: the environment prefix flagenv mirrors its flags under, and its
// flags with their defaults.
type binary struct {
	prefix string
	flags  map[string]string
}

// trustFlags are every service's TLS flags and --insecure, with their
// defaults (docs/design.md, "Trust").
var trustFlags = map[string]string{
	"tls-cert-file": "", "tls-key-file": "", "tls-ca-file": "", "insecure": "false", "authz-policy": "",
}

// etcdFlags are the etcd client's TLS flags of the binaries that dial etcd
// (docs/design.md, "Trust").
var etcdFlags = map[string]string{"etcd-cacert": "", "etcd-cert": "", "etcd-key": ""}

// binaries is keyed by binary name; the image baton/<svc> ships baton-<svc>.
// Each also has trustFlags.
var binaries = map[string]binary{
	"baton-queue": {prefix: "BATON_QUEUE", flags: map[string]string{
		"grpc-addr": ":7070", "http-addr": ":9090", "data-dir": "./data/queue",
		"backoff-base": "5ms", "backoff-max": "1000s", "max-attempts": "0", "default-lease": "30s",
		"peer-addr": ":7072", "initial-cluster": "", "initial-cluster-state": "new", "observer-addr": "",
	}},
	"baton-observer": {prefix: "BATON_OBSERVER", flags: map[string]string{
		"grpc-addr": ":7071", "http-addr": ":9091", "etcd-endpoints": "http://127.0.0.1:2379",
		"queue-addr": "127.0.0.1:7070", "rules": "", "resync": "0",
	}},
	"baton-worker": {prefix: "BATON_WORKER", flags: map[string]string{
		"http-addr": ":9092", "queue-addr": "127.0.0.1:7070", "observer-addr": "127.0.0.1:7071",
		"etcd-endpoints": "http://127.0.0.1:2379", "controllers": "replicasets,deployments,jobs,statefulsets,pods",
		"concurrency": "",
	}},
}

func init() {
	for _, b := range binaries {
		for f, def := range trustFlags {
			b.flags[f] = def
		}
		if _, ok := b.flags["etcd-endpoints"]; ok {
			for f, def := range etcdFlags {
				b.flags[f] = def
			}
		}
	}
}

// dialFlags names, for each flag that dials another service, the binary and
// listen flag it must reach.
var dialFlags = map[string]struct{ binary, listenFlag string }{
	"queue-addr":    {"baton-queue", "grpc-addr"},
	"observer-addr": {"baton-observer", "grpc-addr"},
}

// envName is flagenv.EnvName: BATON_QUEUE + data-dir = BATON_QUEUE_DATA_DIR.
func envName(prefix, flag string) string {
	return prefix + "_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// kinds lists every apiVersion and kind the manifests may use, with the
// k8s.io/api type each decodes into.
var kinds = map[string]func() any{
	"v1/Namespace":                           func() any { return &corev1.Namespace{} },
	"v1/Service":                             func() any { return &corev1.Service{} },
	"apps/v1/StatefulSet":                    func() any { return &appsv1.StatefulSet{} },
	"apps/v1/Deployment":                     func() any { return &appsv1.Deployment{} },
	"autoscaling/v2/HorizontalPodAutoscaler": func() any { return &autoscalingv2.HorizontalPodAutoscaler{} },
	"policy/v1/PodDisruptionBudget":          func() any { return &policyv1.PodDisruptionBudget{} },
	"networking.k8s.io/v1/NetworkPolicy":     func() any { return &networkingv1.NetworkPolicy{} },
}

// object is one decoded document and where it came from.
type object struct {
	where string // file:document index, for messages
	obj   any
}

// decode splits a multi-document YAML stream and decodes each document
// strictly (unknown or duplicate fields are errors) into its k8s.io/api type.
func decode(name string, r io.Reader) ([]object, error) {
	var out []object
	yr := utilyaml.NewYAMLReader(bufio.NewReader(r))
	for i := 0; ; i++ {
		doc, err := yr.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("%s: read document %d: %w", name, i, err)
		}
		where := fmt.Sprintf("%s#%d", name, i)
		var tm metav1.TypeMeta
		if err := yaml.Unmarshal(doc, &tm); err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		if tm.APIVersion == "" && tm.Kind == "" {
			if len(bytes.TrimSpace(stripComments(doc))) == 0 {
				continue // an empty document: comments only
			}
			return nil, fmt.Errorf("%s: no apiVersion and kind", where)
		}
		newObj, ok := kinds[tm.APIVersion+"/"+tm.Kind]
		if !ok {
			return nil, fmt.Errorf("%s: unexpected %s %s", where, tm.APIVersion, tm.Kind)
		}
		obj := newObj()
		if err := yaml.UnmarshalStrict(doc, obj); err != nil {
			return nil, fmt.Errorf("%s: %w", where, err)
		}
		out = append(out, object{where: where + " " + tm.Kind, obj: obj})
	}
}

// strictYAML decodes one YAML document into v as the API server decodes a
// strict request: duplicate keys, unknown fields, and fields spelled in
// another case (which encoding/json, and so yaml.UnmarshalStrict, would
// accept: "renewbefore" for "renewBefore") are errors. It converts the YAML
// to JSON without knowing the target type, so YAML 1.1's bare y and n are
// booleans there: the documents it reads quote such strings. decode keeps
// yaml.UnmarshalStrict, which converts by the target type.
func strictYAML(doc []byte, v any) error {
	j, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return err
	}
	strict, err := kjson.UnmarshalStrict(j, v, kjson.DisallowDuplicateFields, kjson.DisallowUnknownFields)
	if err != nil {
		return err
	}
	return errors.Join(strict...)
}

func stripComments(doc []byte) []byte {
	var b bytes.Buffer
	for line := range bytes.Lines(doc) {
		if t := bytes.TrimSpace(line); len(t) > 0 && t[0] != '#' {
			b.Write(line)
		}
	}
	return b.Bytes()
}

// manifests decodes every *.yaml file of this directory.
func manifests(t *testing.T) []object {
	t.Helper()
	files, err := filepath.Glob("*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests: %v", err)
	}
	var all []object
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		objs, err := decode(f, bytes.NewReader(data))
		if err != nil {
			t.Fatalf("decode: %v", err)
		}
		all = append(all, objs...)
	}
	return all
}

// workload is a StatefulSet or Deployment, reduced to what the checks read.
type workload struct {
	where, name, namespace string
	replicas               int32
	template               corev1.PodTemplateSpec
	claims                 []corev1.PersistentVolumeClaim
	serviceName            string // StatefulSet only
	selector               *metav1.LabelSelector
}

type cluster struct {
	services  map[string]*corev1.Service // by namespace/name
	workloads []workload
	hpas      []*autoscalingv2.HorizontalPodAutoscaler
	pdbs      []*policyv1.PodDisruptionBudget
	netpols   []*networkingv1.NetworkPolicy
	ns        map[string]bool
	nsLabels  map[string]map[string]string // by namespace name
}

func index(t *testing.T, objs []object) cluster {
	t.Helper()
	c := cluster{services: map[string]*corev1.Service{}, ns: map[string]bool{}, nsLabels: map[string]map[string]string{}}
	for _, o := range objs {
		switch v := o.obj.(type) {
		case *corev1.Namespace:
			c.ns[v.Name] = true
			c.nsLabels[v.Name] = v.Labels
		case *corev1.Service:
			c.services[v.Namespace+"/"+v.Name] = v
		case *appsv1.StatefulSet:
			c.workloads = append(c.workloads, workload{o.where, v.Name, v.Namespace, deref(v.Spec.Replicas, 1),
				v.Spec.Template, v.Spec.VolumeClaimTemplates, v.Spec.ServiceName, v.Spec.Selector})
		case *appsv1.Deployment:
			c.workloads = append(c.workloads, workload{o.where, v.Name, v.Namespace, deref(v.Spec.Replicas, 1),
				v.Spec.Template, nil, "", v.Spec.Selector})
		case *autoscalingv2.HorizontalPodAutoscaler:
			c.hpas = append(c.hpas, v)
		case *policyv1.PodDisruptionBudget:
			c.pdbs = append(c.pdbs, v)
		case *networkingv1.NetworkPolicy:
			c.netpols = append(c.netpols, v)
		}
	}
	return c
}

func deref[T any](p *T, def T) T {
	if p == nil {
		return def
	}
	return *p
}

// binaryOf returns the Baton binary a container runs, from its image
// baton/<svc>:<tag>, or "" for other images (etcd).
func binaryOf(c corev1.Container) string {
	repo, _, _ := strings.Cut(c.Image, ":")
	name := "baton-" + strings.TrimPrefix(repo, "baton/")
	if _, ok := binaries[name]; ok && strings.HasPrefix(repo, "baton/") {
		return name
	}
	return ""
}

// flagValues returns the value each flag of bin takes in container c: its
// BATON_* variable if set, else its default. Unknown BATON_* variables fail.
func flagValues(t *testing.T, where string, c corev1.Container, bin string) map[string]string {
	t.Helper()
	b := binaries[bin]
	byEnv := map[string]string{}
	for f := range b.flags {
		byEnv[envName(b.prefix, f)] = f
	}
	vals := map[string]string{}
	for f, def := range b.flags {
		vals[f] = def
	}
	for _, e := range c.Env {
		f, ok := byEnv[e.Name]
		if !ok {
			t.Errorf("%s: container %s: env %s is no flag of %s (want one of %v)", where, c.Name, e.Name, bin, slices.Sorted(mapKeys(byEnv)))
			continue
		}
		if e.ValueFrom != nil {
			t.Errorf("%s: container %s: env %s: want a literal value", where, c.Name, e.Name)
		}
		vals[f] = e.Value
	}
	if len(c.Args) > 0 || len(c.Command) > 0 {
		t.Errorf("%s: container %s: configure by environment only, not command or args", where, c.Name)
	}
	return vals
}

func mapKeys[K comparable, V any](m map[K]V) func(func(K) bool) {
	return func(yield func(K) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// isLoopback is services/runtime/trust.IsLoopback: whether a listen
// address binds loopback only.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// portOf returns the port number a listen or dial address names.
func portOf(addr string) (int32, error) {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(p, 10, 32)
	return int32(n), err
}

// containerPort resolves a port given by name or number against c's ports.
func containerPort(c corev1.Container, p intstr.IntOrString) (corev1.ContainerPort, bool) {
	for _, cp := range c.Ports {
		if (p.Type == intstr.String && cp.Name == p.StrVal) || (p.Type == intstr.Int && cp.ContainerPort == p.IntVal) {
			return cp, true
		}
	}
	return corev1.ContainerPort{}, false
}

func TestManifestsDecodeStrictly(t *testing.T) {
	c := index(t, manifests(t))
	if len(c.ns) != 1 || !c.ns["baton"] {
		t.Errorf("namespaces = %v, want exactly baton", c.ns)
	}
	for key := range c.services {
		if ns, _, _ := strings.Cut(key, "/"); !c.ns[ns] {
			t.Errorf("service %s: namespace %q is not in the manifests", key, ns)
		}
	}
	var names []string
	for _, w := range c.workloads {
		if !c.ns[w.namespace] {
			t.Errorf("%s: namespace %q is not in the manifests", w.where, w.namespace)
		}
		names = append(names, w.name)
	}
	slices.Sort(names)
	if want := []string{"etcd", "observer", "queue", "worker"}; !slices.Equal(names, want) {
		t.Errorf("workloads = %v, want %v", names, want)
	}
}

// TestDecodeRejects shows the decoder fails on the mistakes it exists to
// catch, so a passing TestManifestsDecodeStrictly means something.
func TestDecodeRejects(t *testing.T) {
	tests := []struct {
		name, doc, want string
	}{
		{"unknown field", "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec: {replica: 3}\n", "unknown field"},
		{"misplaced field", "apiVersion: v1\nkind: Service\nmetadata: {name: x}\nspec:\n  ports: [{port: 1, containerPort: 1}]\n", "unknown field"},
		{"duplicate field", "apiVersion: v1\nkind: Namespace\nmetadata: {name: x}\nmetadata: {name: y}\n", "already set"},
		{"wrong type", "apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {name: x}\nspec: {replicas: three}\n", "replicas"},
		{"old apiVersion", "apiVersion: extensions/v1beta1\nkind: Deployment\nmetadata: {name: x}\n", "unexpected"},
		{"unknown kind", "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\n", "unexpected"},
		{"no kind", "metadata: {name: x}\n", "no apiVersion and kind"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := decode("test.yaml", strings.NewReader("# a comment-only document\n---\n"+tt.doc))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("decode = %v, want an error containing %q", err, tt.want)
			}
		})
	}
	objs, err := decode("ok.yaml", strings.NewReader("# only comments\n---\napiVersion: v1\nkind: Namespace\nmetadata: {name: x}\n---\n"))
	if err != nil || len(objs) != 1 {
		t.Errorf("decode of a valid stream = %d objects, %v; want 1, nil", len(objs), err)
	}
}

func TestPodsAreLockedDown(t *testing.T) {
	c := index(t, manifests(t))
	for _, w := range c.workloads {
		pod := w.template.Spec
		psc := pod.SecurityContext
		if psc == nil || !deref(psc.RunAsNonRoot, false) {
			t.Errorf("%s: pod securityContext.runAsNonRoot is not true", w.where)
		}
		if psc == nil || psc.RunAsUser == nil || *psc.RunAsUser == 0 {
			t.Errorf("%s: pod securityContext.runAsUser must be a non-zero uid (the images are FROM scratch: no user names)", w.where)
		}
		if psc == nil || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
			t.Errorf("%s: pod seccompProfile is not RuntimeDefault", w.where)
		}
		if len(w.claims) > 0 && (psc == nil || psc.FSGroup == nil) {
			t.Errorf("%s: has volume claims but no fsGroup: the non-root user could not write them", w.where)
		}
		if !labels.SelectorFromSet(w.selector.MatchLabels).Matches(labels.Set(w.template.Labels)) {
			t.Errorf("%s: selector %v does not match the template labels %v", w.where, w.selector.MatchLabels, w.template.Labels)
		}
		for _, ctr := range pod.Containers {
			where := w.where + " container " + ctr.Name
			sc := ctr.SecurityContext
			switch {
			case sc == nil:
				t.Errorf("%s: no securityContext", where)
				continue
			case !deref(sc.ReadOnlyRootFilesystem, false):
				t.Errorf("%s: readOnlyRootFilesystem is not true", where)
			case deref(sc.AllowPrivilegeEscalation, true):
				t.Errorf("%s: allowPrivilegeEscalation is not false", where)
			case sc.Capabilities == nil || !slices.Equal(sc.Capabilities.Drop, []corev1.Capability{"ALL"}) || len(sc.Capabilities.Add) > 0:
				t.Errorf("%s: capabilities must drop ALL and add none", where)
			case sc.Privileged != nil && *sc.Privileged:
				t.Errorf("%s: privileged", where)
			}
			for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
				req, okReq := ctr.Resources.Requests[r]
				lim, okLim := ctr.Resources.Limits[r]
				if !okReq || !okLim {
					t.Errorf("%s: %s needs both a request and a limit", where, r)
				} else if req.Cmp(lim) > 0 {
					t.Errorf("%s: %s request %s above its limit %s", where, r, req.String(), lim.String())
				}
			}
			if _, tag, ok := strings.Cut(ctr.Image, ":"); !ok || tag == "" || tag == "latest" {
				t.Errorf("%s: image %q needs a pinned tag", where, ctr.Image)
			}
			if ctr.LivenessProbe == nil || ctr.ReadinessProbe == nil {
				t.Errorf("%s: needs liveness and readiness probes", where)
			}
			// Every writable path must be a volume: the root is read-only.
			for _, m := range ctr.VolumeMounts {
				if !slices.ContainsFunc(w.claims, func(c corev1.PersistentVolumeClaim) bool { return c.Name == m.Name }) &&
					!slices.ContainsFunc(pod.Volumes, func(v corev1.Volume) bool { return v.Name == m.Name }) {
					t.Errorf("%s: volumeMount %s names no volume or claim", where, m.Name)
				}
			}
		}
	}
}

// TestBatonContainersMatchFlags checks every Baton container against its
// binary's flags: variable names, the ports it listens on, its probes, its
// data volume, and the addresses it dials.
func TestBatonContainersMatchFlags(t *testing.T) {
	c := index(t, manifests(t))
	seen := map[string]bool{}
	for _, w := range c.workloads {
		for _, ctr := range w.template.Spec.Containers {
			bin := binaryOf(ctr)
			if bin == "" {
				continue
			}
			seen[bin] = true
			where := w.where + " container " + ctr.Name
			vals := flagValues(t, where, ctr, bin)

			// Every address it listens on is a named container port.
			listen := map[string]int32{}
			for _, f := range []string{"grpc-addr", "http-addr", "peer-addr"} {
				addr, ok := vals[f]
				if !ok || f == "peer-addr" && vals["initial-cluster"] == "" {
					continue // a single queue opens no peer listener
				}
				p, err := portOf(addr)
				if err != nil {
					t.Errorf("%s: --%s %q: %v", where, f, addr, err)
					continue
				}
				listen[f] = p
				name := strings.TrimSuffix(f, "-addr")
				cp, ok := containerPort(ctr, intstr.FromString(name))
				if !ok || cp.ContainerPort != p {
					t.Errorf("%s: --%s listens on %d: want a container port named %q with that number, have %+v", where, f, p, name, ctr.Ports)
				}
			}
			if len(ctr.Ports) != len(listen) {
				t.Errorf("%s: ports %+v, but the binary listens on %v", where, ctr.Ports, listen)
			}

			// A service refuses plaintext beyond loopback without --insecure,
			// and --insecure beside TLS flags.
			tls := vals["tls-cert-file"] != "" || vals["tls-ca-file"] != ""
			insecure := vals["insecure"] == "true"
			for _, f := range []string{"grpc-addr", "http-addr"} {
				if addr, ok := vals[f]; ok && !tls && !insecure && !isLoopback(addr) {
					t.Errorf("%s: --%s %s is not loopback and the container sets no TLS flags: %s refuses to start without --insecure", where, f, addr, bin)
				}
			}
			if tls && insecure {
				t.Errorf("%s: --insecure beside TLS flags: %s refuses to start", where, bin)
			}

			// Probes: HTTP(S) on --http-addr, for every binary. A kubelet's
			// grpc probe presents no client certificate, which a gRPC
			// listener with a CA refuses at the handshake; /healthz and
			// /readyz are open without one (docs/security.md). A startup
			// probe, where there is one, waits for the listener to be up
			// (the queue recovers its store before it listens), so it asks
			// /healthz, not readiness.
			scheme := corev1.URISchemeHTTP
			if tls {
				scheme = corev1.URISchemeHTTPS
			}
			checkHTTPProbe(t, where+" liveness", ctr, ctr.LivenessProbe, scheme, "/healthz", listen["http-addr"])
			checkHTTPProbe(t, where+" readiness", ctr, ctr.ReadinessProbe, scheme, "/readyz", listen["http-addr"])
			if ctr.StartupProbe != nil {
				checkHTTPProbe(t, where+" startup", ctr, ctr.StartupProbe, scheme, "/healthz", listen["http-addr"])
			}

			// The data directory must be a persistent volume claim.
			if dir, ok := vals["data-dir"]; ok {
				if !filepath.IsAbs(dir) {
					t.Errorf("%s: --data-dir %q must be absolute (the working directory is / and read-only)", where, dir)
				}
				i := slices.IndexFunc(ctr.VolumeMounts, func(m corev1.VolumeMount) bool { return m.MountPath == dir })
				if i < 0 || !slices.ContainsFunc(w.claims, func(c corev1.PersistentVolumeClaim) bool { return c.Name == ctr.VolumeMounts[i].Name }) {
					t.Errorf("%s: --data-dir %s is not a volumeClaimTemplate's mount", where, dir)
				}
			}

			// Every address it dials reaches the service that listens there.
			for f, target := range dialFlags {
				addr, ok := vals[f]
				if !ok {
					continue
				}
				checkDial(t, c, where, w.namespace, "--"+f, addr, func(ctr corev1.Container) (int32, bool) {
					if binaryOf(ctr) != target.binary {
						return 0, false
					}
					p, err := portOf(flagValues(t, where, ctr, target.binary)[target.listenFlag])
					return p, err == nil
				})
			}
			// Every member of a replicated queue reaches the others' peer
			// listeners, under the names its own list gives them.
			if members := vals["initial-cluster"]; members != "" {
				for _, m := range strings.Split(members, ",") {
					name, addr, ok := strings.Cut(m, "=")
					if !ok || !strings.HasPrefix(addr, name+".") {
						t.Errorf("%s: --initial-cluster member %q: want name=name.<service>:port", where, m)
						continue
					}
					checkDial(t, c, where, w.namespace, "--initial-cluster", addr, func(ctr corev1.Container) (int32, bool) {
						if binaryOf(ctr) != "baton-queue" {
							return 0, false
						}
						p, err := portOf(flagValues(t, where, ctr, "baton-queue")["peer-addr"])
						return p, err == nil
					})
				}
			}
			if eps, ok := vals["etcd-endpoints"]; ok {
				for _, ep := range strings.Split(eps, ",") {
					u, err := url.Parse(ep)
					if err != nil || u.Scheme != "http" && u.Scheme != "https" || u.Port() == "" {
						t.Errorf("%s: --etcd-endpoints %q: want scheme://host:port", where, ep)
						continue
					}
					checkDial(t, c, where, w.namespace, "--etcd-endpoints", u.Host, func(ctr corev1.Container) (int32, bool) {
						cp, ok := containerPort(ctr, intstr.FromString("client"))
						return cp.ContainerPort, ok && ctr.Name == "etcd"
					})
				}
			}
		}
	}
	for bin := range binaries {
		if !seen[bin] {
			t.Errorf("no container runs %s", bin)
		}
	}
}

func checkHTTPProbe(t *testing.T, where string, ctr corev1.Container, p *corev1.Probe, scheme corev1.URIScheme, path string, port int32) {
	t.Helper()
	if p == nil || p.HTTPGet == nil {
		t.Errorf("%s: want an httpGet probe of %s", where, path)
		return
	}
	cp, ok := containerPort(ctr, p.HTTPGet.Port)
	if p.HTTPGet.Path != path || !ok || cp.ContainerPort != port {
		t.Errorf("%s: probe GET %s on port %s, want %s on --http-addr's port %d", where, p.HTTPGet.Path, p.HTTPGet.Port.String(), path, port)
	}
	// An unset scheme is HTTP: a TLS listener would answer it with 400.
	if got := cmp.Or(p.HTTPGet.Scheme, corev1.URISchemeHTTP); got != scheme {
		t.Errorf("%s: probe scheme %s, want %s: the listener serves %s", where, got, scheme, scheme)
	}
}

// checkDial resolves host:port the way cluster DNS would, for "<service>" or
// "<pod>.<service>" of a StatefulSet, and checks that the Service's port leads
// to a container that listens on it (listens reports the port a container
// listens on, false if it is not the kind of container dialled).
func checkDial(t *testing.T, c cluster, where, ns, flag, hostport string, listens func(corev1.Container) (int32, bool)) {
	t.Helper()
	host, ps, err := net.SplitHostPort(hostport)
	if err != nil {
		t.Errorf("%s: %s %q: %v", where, flag, hostport, err)
		return
	}
	port, _ := strconv.ParseInt(ps, 10, 32)
	parts := strings.Split(host, ".")
	svcName, pod := parts[len(parts)-1], ""
	if len(parts) == 2 {
		pod = parts[0]
	} else if len(parts) > 2 {
		t.Errorf("%s: %s %q: want <service> or <pod>.<service> in namespace %s", where, flag, hostport, ns)
		return
	}
	svc, ok := c.services[ns+"/"+svcName]
	if !ok {
		t.Errorf("%s: %s %q: no Service %s/%s", where, flag, hostport, ns, svcName)
		return
	}
	i := slices.IndexFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return int64(p.Port) == port })
	if i < 0 {
		t.Errorf("%s: %s %q: Service %s has no port %d", where, flag, hostport, svcName, port)
		return
	}
	sp := svc.Spec.Ports[i]
	for _, w := range c.workloads {
		if w.namespace != ns || !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(w.template.Labels)) {
			continue
		}
		if pod != "" {
			if w.serviceName != svcName {
				t.Errorf("%s: %s %q: pod DNS names need a StatefulSet whose serviceName is %s", where, flag, hostport, svcName)
				return
			}
			n, err := strconv.Atoi(strings.TrimPrefix(pod, w.name+"-"))
			if !strings.HasPrefix(pod, w.name+"-") || err != nil || n < 0 || n >= int(w.replicas) {
				t.Errorf("%s: %s %q: %s is not a pod of StatefulSet %s (%d replicas)", where, flag, hostport, pod, w.name, w.replicas)
				return
			}
		}
		for _, ctr := range w.template.Spec.Containers {
			lp, ok := listens(ctr)
			if !ok {
				continue
			}
			if cp, ok := containerPort(ctr, sp.TargetPort); !ok || cp.ContainerPort != lp {
				t.Errorf("%s: %s %q: Service port %d targets %s, but %s listens on %d", where, flag, hostport, port, sp.TargetPort.String(), w.name, lp)
			}
			return
		}
	}
	t.Errorf("%s: %s %q: Service %s selects no container that listens there", where, flag, hostport, svcName)
}

func TestServicesReachTheirPods(t *testing.T) {
	c := index(t, manifests(t))
	for key, svc := range c.services {
		var matched []workload
		for _, w := range c.workloads {
			if w.namespace == svc.Namespace && len(svc.Spec.Selector) > 0 &&
				labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(w.template.Labels)) {
				matched = append(matched, w)
			}
		}
		if len(matched) != 1 {
			t.Errorf("service %s selects %d workloads, want 1", key, len(matched))
			continue
		}
		for _, sp := range svc.Spec.Ports {
			if !slices.ContainsFunc(matched[0].template.Spec.Containers, func(ctr corev1.Container) bool {
				_, ok := containerPort(ctr, sp.TargetPort)
				return ok
			}) {
				t.Errorf("service %s port %s: targetPort %s is no container port of %s", key, sp.Name, sp.TargetPort.String(), matched[0].name)
			}
		}
	}
	for _, w := range c.workloads {
		if w.serviceName == "" {
			continue
		}
		svc, ok := c.services[w.namespace+"/"+w.serviceName]
		if !ok {
			t.Errorf("%s: serviceName %s: no such Service", w.where, w.serviceName)
		} else if w.replicas > 1 && svc.Spec.ClusterIP != corev1.ClusterIPNone {
			t.Errorf("%s: serviceName %s must be headless to give each of %d pods a DNS name", w.where, w.serviceName, w.replicas)
		}
	}
}

func TestEtcdCluster(t *testing.T) {
	c := index(t, manifests(t))
	i := slices.IndexFunc(c.workloads, func(w workload) bool { return w.name == "etcd" })
	if i < 0 {
		t.Fatal("no etcd workload")
	}
	w := c.workloads[i]
	if w.replicas != 3 || w.serviceName == "" {
		t.Fatalf("etcd: %d replicas, serviceName %q: want a 3-member StatefulSet", w.replicas, w.serviceName)
	}
	env := map[string]string{}
	for _, e := range w.template.Spec.Containers[0].Env {
		env[e.Name] = e.Value
	}
	var want []string
	for n := range w.replicas {
		want = append(want, fmt.Sprintf("%[1]s-%[2]d=https://%[1]s-%[2]d.%[3]s:2380", w.name, n, w.serviceName))
	}
	if got := env["ETCD_INITIAL_CLUSTER"]; got != strings.Join(want, ",") {
		t.Errorf("ETCD_INITIAL_CLUSTER = %q, want %q", got, strings.Join(want, ","))
	}
	for k, v := range map[string]string{
		"ETCD_NAME":                        "$(POD_NAME)",
		"ETCD_INITIAL_ADVERTISE_PEER_URLS": "https://$(POD_NAME)." + w.serviceName + ":2380",
		"ETCD_ADVERTISE_CLIENT_URLS":       "https://$(POD_NAME)." + w.serviceName + ":2379",
	} {
		if env[k] != v {
			t.Errorf("%s = %q, want %q", k, env[k], v)
		}
	}
	if env["ETCD_DATA_DIR"] == "" || !slices.ContainsFunc(w.template.Spec.Containers[0].VolumeMounts, func(m corev1.VolumeMount) bool {
		return m.MountPath == env["ETCD_DATA_DIR"]
	}) {
		t.Errorf("ETCD_DATA_DIR %q is not a mounted volume", env["ETCD_DATA_DIR"])
	}
	if !slices.ContainsFunc(c.pdbs, func(p *policyv1.PodDisruptionBudget) bool {
		return labels.SelectorFromSet(p.Spec.Selector.MatchLabels).Matches(labels.Set(w.template.Labels)) &&
			p.Spec.MaxUnavailable != nil && p.Spec.MaxUnavailable.IntValue() == 1
	}) {
		t.Error("etcd: want a PodDisruptionBudget with maxUnavailable 1, so drains keep quorum")
	}
}

func TestWorkerAutoscaler(t *testing.T) {
	c := index(t, manifests(t))
	if len(c.hpas) == 0 {
		t.Fatal("no HorizontalPodAutoscaler")
	}
	for _, h := range c.hpas {
		ref := h.Spec.ScaleTargetRef
		if ref.APIVersion != "apps/v1" || ref.Kind != "Deployment" ||
			!slices.ContainsFunc(c.workloads, func(w workload) bool { return w.name == ref.Name && w.namespace == h.Namespace && w.serviceName == "" }) {
			t.Errorf("hpa %s: scaleTargetRef %+v is no Deployment of the manifests", h.Name, ref)
		}
		if ref.Name != "worker" {
			t.Errorf("hpa %s scales %s: only workers scale out", h.Name, ref.Name)
		}
		if deref(h.Spec.MinReplicas, 1) > h.Spec.MaxReplicas || len(h.Spec.Metrics) == 0 {
			t.Errorf("hpa %s: min %d max %d, %d metrics", h.Name, deref(h.Spec.MinReplicas, 1), h.Spec.MaxReplicas, len(h.Spec.Metrics))
		}
	}
}

// controllerFields lists every field of the manifests that another writer
// owns once the objects exist: a field set by a controller, the scheduler or
// the API server itself. Applied server-side, each is a conflict waiting for
// the first time that writer changes it (`conflict with "kubectl" with
// subresource "scale" ... .spec.replicas` after an HPA or `kubectl scale`
// moved the replicas of a Deployment that sets them); applied client-side,
// each re-apply silently undoes that writer. Fields the API server only
// defaults have no owner and fight nobody: they are not listed.
func controllerFields(objs []object) []string {
	var bad []string
	fail := func(where, format string, args ...any) {
		bad = append(bad, where+": "+fmt.Sprintf(format, args...))
	}
	// The scale subresource's spec.replicas belongs to whoever scales: the
	// HPA, or the person running kubectl scale.
	scaled := map[string]string{} // kind/namespace/name -> HPA
	for _, o := range objs {
		if h, ok := o.obj.(*autoscalingv2.HorizontalPodAutoscaler); ok {
			ref := h.Spec.ScaleTargetRef
			scaled[ref.Kind+"/"+h.Namespace+"/"+ref.Name] = h.Name
		}
	}
	for _, o := range objs {
		meta, status := objectMeta(o.obj)
		checkServerMeta(o.where, meta, fail)
		if status.IsValid() && !status.IsZero() {
			fail(o.where, "status is set: it is the controllers' to write, and the API server drops it on apply")
		}
		var tmpl *corev1.PodTemplateSpec
		var replicas *int32
		switch v := o.obj.(type) {
		case *corev1.Namespace:
			if len(v.Spec.Finalizers) > 0 {
				fail(o.where, "spec.finalizers %v: the namespace controller's", v.Spec.Finalizers)
			}
		case *corev1.Service:
			if ip := v.Spec.ClusterIP; ip != "" && ip != corev1.ClusterIPNone {
				fail(o.where, "spec.clusterIP %s: allocated by the API server (only None, for a headless Service, is the author's)", ip)
			}
			if len(v.Spec.ClusterIPs) > 0 {
				fail(o.where, "spec.clusterIPs %v: allocated by the API server", v.Spec.ClusterIPs)
			}
			for _, p := range v.Spec.Ports {
				if p.NodePort != 0 {
					fail(o.where, "port %s: nodePort %d: allocated by the API server", p.Name, p.NodePort)
				}
			}
		case *appsv1.Deployment:
			tmpl, replicas = &v.Spec.Template, v.Spec.Replicas
			if v.Spec.Selector != nil {
				checkControllerLabels(o.where+" selector", v.Spec.Selector.MatchLabels, fail)
			}
		case *appsv1.StatefulSet:
			tmpl, replicas = &v.Spec.Template, v.Spec.Replicas
			if v.Spec.Selector != nil {
				checkControllerLabels(o.where+" selector", v.Spec.Selector.MatchLabels, fail)
			}
			for _, c := range v.Spec.VolumeClaimTemplates {
				if !reflect.ValueOf(c.Status).IsZero() {
					fail(o.where, "volumeClaimTemplate %s: status is set", c.Name)
				}
				if c.Spec.VolumeName != "" {
					fail(o.where, "volumeClaimTemplate %s: spec.volumeName %s: the volume binder's", c.Name, c.Spec.VolumeName)
				}
			}
		}
		if tmpl != nil {
			checkControllerLabels(o.where+" template", tmpl.Labels, fail)
			if _, ok := tmpl.Annotations["kubectl.kubernetes.io/restartedAt"]; ok {
				fail(o.where, "template annotation kubectl.kubernetes.io/restartedAt: kubectl rollout restart's")
			}
			if tmpl.Spec.NodeName != "" {
				fail(o.where, "template spec.nodeName %s: the scheduler's", tmpl.Spec.NodeName)
			}
			kind := strings.TrimPrefix(fmt.Sprintf("%T", o.obj), "*v1.")
			if hpa, ok := scaled[kind+"/"+meta.Namespace+"/"+meta.Name]; ok && replicas != nil {
				fail(o.where, "spec.replicas %d: HorizontalPodAutoscaler %s scales it through the scale subresource, so a re-apply conflicts on .spec.replicas (server-side) or undoes the scaling (client-side); leave replicas out, the HPA's minReplicas sets the floor", *replicas, hpa)
			}
		}
	}
	return bad
}

// objectMeta returns an object's metadata and its status, as a value whose
// IsZero says whether the manifest sets any of it (not valid for a kind
// without status, as NetworkPolicy has none).
func objectMeta(obj any) (*metav1.ObjectMeta, reflect.Value) {
	v := reflect.ValueOf(obj).Elem()
	return v.FieldByName("ObjectMeta").Addr().Interface().(*metav1.ObjectMeta), v.FieldByName("Status")
}

// checkServerMeta fails on the metadata the API server or a controller
// writes.
func checkServerMeta(where string, m *metav1.ObjectMeta, fail func(where, format string, args ...any)) {
	for name, set := range map[string]bool{
		"uid":               m.UID != "",
		"resourceVersion":   m.ResourceVersion != "",
		"generation":        m.Generation != 0,
		"creationTimestamp": !m.CreationTimestamp.IsZero(),
		"deletionTimestamp": m.DeletionTimestamp != nil,
		"managedFields":     len(m.ManagedFields) > 0,
		"ownerReferences":   len(m.OwnerReferences) > 0,
		"finalizers":        len(m.Finalizers) > 0,
	} {
		if set {
			fail(where, "metadata.%s is set: the API server's or a controller's", name)
		}
	}
	for _, a := range []string{
		"kubectl.kubernetes.io/last-applied-configuration", // client-side apply's record
		"deployment.kubernetes.io/revision",                // the Deployment controller's
	} {
		if _, ok := m.Annotations[a]; ok {
			fail(where, "annotation %s: written by kubectl or a controller", a)
		}
	}
}

// checkControllerLabels fails on the labels the workload controllers add to
// the ReplicaSets and pods they create.
func checkControllerLabels(where string, l map[string]string, fail func(where, format string, args ...any)) {
	for _, k := range []string{
		appsv1.DefaultDeploymentUniqueLabelKey, // pod-template-hash
		appsv1.ControllerRevisionHashLabelKey,  // controller-revision-hash
		appsv1.StatefulSetPodNameLabel,         // statefulset.kubernetes.io/pod-name
		appsv1.PodIndexLabel,                   // apps.kubernetes.io/pod-index
	} {
		if _, ok := l[k]; ok {
			fail(where, "label %s: added by the workload controller to what it creates", k)
		}
	}
}

// TestNoFieldOwnedByAController checks that a re-apply, server-side or not,
// fights no controller: see controllerFields.
func TestNoFieldOwnedByAController(t *testing.T) {
	for _, msg := range controllerFields(manifests(t)) {
		t.Error(msg)
	}
}

// TestControllerFieldsRejects shows controllerFields catches what it exists
// to catch.
func TestControllerFieldsRejects(t *testing.T) {
	const hpa = "apiVersion: autoscaling/v2\nkind: HorizontalPodAutoscaler\nmetadata: {name: h, namespace: n}\n" +
		"spec: {scaleTargetRef: {apiVersion: apps/v1, kind: Deployment, name: w}, maxReplicas: 3}\n---\n"
	const deploy = "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: w, namespace: n}\n"
	tests := []struct {
		name, docs, want string
	}{
		{"replicas of an HPA's Deployment", hpa + deploy + "spec: {replicas: 2}\n", "spec.replicas 2: HorizontalPodAutoscaler h scales it"},
		{"replicas of an HPA's StatefulSet", strings.Replace(hpa, "kind: Deployment", "kind: StatefulSet", 1) +
			"apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {name: w, namespace: n}\nspec: {replicas: 1}\n", "HorizontalPodAutoscaler h scales it"},
		{"status", deploy + "status: {replicas: 2}\n", "status is set"},
		{"claim status", "apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {name: s}\nspec:\n  volumeClaimTemplates: [{metadata: {name: d}, status: {phase: Pending}}]\n", "volumeClaimTemplate d: status"},
		{"server metadata", "apiVersion: v1\nkind: Namespace\nmetadata: {name: n, resourceVersion: \"7\"}\n", "metadata.resourceVersion"},
		{"last-applied", "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: n\n  annotations: {kubectl.kubernetes.io/last-applied-configuration: \"{}\"}\n", "last-applied-configuration"},
		{"namespace finalizers", "apiVersion: v1\nkind: Namespace\nmetadata: {name: n}\nspec: {finalizers: [kubernetes]}\n", "namespace controller's"},
		{"clusterIP", "apiVersion: v1\nkind: Service\nmetadata: {name: s}\nspec: {clusterIP: 10.0.0.1}\n", "spec.clusterIP 10.0.0.1"},
		{"nodePort", "apiVersion: v1\nkind: Service\nmetadata: {name: s}\nspec: {type: NodePort, ports: [{name: p, port: 1, nodePort: 30001}]}\n", "nodePort 30001"},
		{"pod-template-hash", deploy + "spec: {selector: {matchLabels: {pod-template-hash: abc}}}\n", "label pod-template-hash"},
		{"nodeName", deploy + "spec: {template: {spec: {nodeName: node-1}}}\n", "the scheduler's"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objs, err := decode("test.yaml", strings.NewReader(tt.docs))
			if err != nil {
				t.Fatal(err)
			}
			bad := controllerFields(objs)
			if !slices.ContainsFunc(bad, func(m string) bool { return strings.Contains(m, tt.want) }) {
				t.Errorf("controllerFields = %q, want a message containing %q", bad, tt.want)
			}
		})
	}
	// The same HPA and Deployment without replicas: nothing to report.
	objs, err := decode("ok.yaml", strings.NewReader(hpa+deploy+"spec: {template: {metadata: {labels: {app: w}}}}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if bad := controllerFields(objs); len(bad) > 0 {
		t.Errorf("controllerFields of a clean HPA target = %q, want none", bad)
	}
}

// flagLine matches the flag names in the usage text of Go's flag package
// ("  -data-dir string").
var flagLine = regexp.MustCompile(`(?m)^\s+-([a-z][a-z0-9-]*)`)

// TestFlagTableMatchesBinaries checks the table above against the built
// binaries (scripts/test.sh builds them into bin/ first), so the manifests
// are checked against the flags the binaries really define.
func TestFlagTableMatchesBinaries(t *testing.T) {
	for bin, b := range binaries {
		t.Run(bin, func(t *testing.T) {
			path := filepath.Join("..", "..", "bin", bin)
			if _, err := os.Stat(path); err != nil {
				t.Skipf("%s is not built (make build): %v", path, err)
			}
			ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
			defer cancel()
			out, _ := exec.CommandContext(ctx, path, "-h").CombinedOutput() // -h exits non-zero
			var have []string
			for _, m := range flagLine.FindAllStringSubmatch(string(out), -1) {
				have = append(have, m[1])
			}
			if len(have) == 0 {
				t.Fatalf("%s -h printed no flags:\n%s", bin, out)
			}
			for f := range b.flags {
				if !slices.Contains(have, f) {
					t.Errorf("%s has no flag --%s (it has %v)", bin, f, have)
				}
			}
		})
	}
}

// etcdFlagLine matches a flag in `etcd --help` ("  --data-dir '${name}.etcd'").
var etcdFlagLine = regexp.MustCompile(`(?m)^\s+--([a-z][a-z0-9-]*)`)

// TestEtcdVariablesAreFlags checks every ETCD_* variable of the etcd
// container against the flags of the etcd binary that scripts/images.sh
// builds (etcd only warns about, and ignores, a variable it does not know).
func TestEtcdVariablesAreFlags(t *testing.T) {
	path := filepath.Join("..", "..", "bin", "etcd")
	if _, err := os.Stat(path); err != nil {
		t.Skipf("%s is not built (scripts/images.sh etcd): %v", path, err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("etcd --help: %v\n%s", err, out)
	}
	flags := map[string]bool{}
	for _, m := range etcdFlagLine.FindAllStringSubmatch(string(out), -1) {
		flags[envName("ETCD", m[1])] = true
	}
	c := index(t, manifests(t))
	for _, w := range c.workloads {
		for _, ctr := range w.template.Spec.Containers {
			for _, e := range ctr.Env {
				if strings.HasPrefix(e.Name, "ETCD_") && !flags[e.Name] {
					t.Errorf("%s container %s: %s is no flag of etcd", w.where, ctr.Name, e.Name)
				}
			}
		}
	}
}
