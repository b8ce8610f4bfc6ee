package kubernetes_test

import (
	"bytes"
	"fmt"
	"io/fs"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
)

// The manifests run every link with mutual TLS (docs/security.md): these
// tests check that each process is given its certificate from a Secret it
// mounts, that nothing runs plaintext, that the NetworkPolicies allow the
// architecture's links and nothing else, and that both ways of making the
// Secrets (secrets.sh from batonctl certs init, and cert-manager) make the
// ones the pods mount, for the names they are dialed by.

// identity is the certificate a Secret must hold: its subject CN and its
// roles (subject O values baton:<role>), as batonctl certs init names and
// makes them (docs/security.md, "Certificates").
type identity struct {
	cn    string
	roles []string
}

// serverSecrets is the Secret each binary serves and dials with, and the
// identity in it: the role is what the binary's calls need (the observer
// adds keys, a worker leases them, the queue is a queue-peer).
var serverSecrets = map[string]struct {
	secret string
	id     identity
}{
	"baton-queue":    {"baton-queue-tls", identity{"queue", []string{"queue-peer"}}},
	"baton-observer": {"baton-observer-tls", identity{"observer", []string{"observer"}}},
	"baton-worker":   {"baton-worker-tls", identity{"worker", []string{"worker"}}},
	"etcd":           {"baton-etcd-server-tls", identity{"etcd-server", nil}},
}

// etcdClientSecret is what the observer and the workers present to etcd.
var etcdClientSecret = struct {
	secret string
	id     identity
}{"baton-etcd-client-tls", identity{"etcd-client", nil}}

// secretKeys are the files of a Secret in cert-manager's layout.
var secretKeys = []string{"tls.crt", "tls.key", "ca.crt"}

// mountedSecretFile resolves a file path in container ctr of pod to the
// Secret volume mounted at its directory, checking that the mount is
// read-only, whole (no subPath, which would not follow a rotation) and has
// the file. It returns the Secret's name, or reports why not.
func mountedSecretFile(pod corev1.PodSpec, ctr corev1.Container, file string) (string, error) {
	if file == "" {
		return "", fmt.Errorf("not set")
	}
	dir, base := path.Split(file)
	dir = path.Clean(dir)
	i := slices.IndexFunc(ctr.VolumeMounts, func(m corev1.VolumeMount) bool { return path.Clean(m.MountPath) == dir })
	if i < 0 {
		return "", fmt.Errorf("%s: no volume is mounted at %s", file, dir)
	}
	m := ctr.VolumeMounts[i]
	if !m.ReadOnly {
		return "", fmt.Errorf("%s: the mount of %s is not readOnly", file, m.Name)
	}
	if m.SubPath != "" || m.SubPathExpr != "" {
		return "", fmt.Errorf("%s: the mount of %s has a subPath, which does not follow the Secret when it is rotated", file, m.Name)
	}
	j := slices.IndexFunc(pod.Volumes, func(v corev1.Volume) bool { return v.Name == m.Name })
	if j < 0 || pod.Volumes[j].Secret == nil {
		return "", fmt.Errorf("%s: volume %s is not a Secret", file, m.Name)
	}
	sv := pod.Volumes[j].Secret
	if len(sv.Items) > 0 {
		return "", fmt.Errorf("%s: volume %s lists items: mount the Secret's tls.crt, tls.key and ca.crt as they are", file, m.Name)
	}
	if !slices.Contains(secretKeys, base) {
		return "", fmt.Errorf("%s: %s is no key of a Secret in cert-manager's layout (%v)", file, base, secretKeys)
	}
	if sv.Optional != nil && *sv.Optional {
		return "", fmt.Errorf("%s: Secret %s is optional: the pod would start without its certificate and fail", file, sv.SecretName)
	}
	return sv.SecretName, nil
}

// checkTrio checks that cert, key and CA files are the tls.crt, tls.key and
// ca.crt of one mounted Secret, and that it is want.
func checkTrio(t *testing.T, where string, pod corev1.PodSpec, ctr corev1.Container, names [3]string, files [3]string, want string) {
	t.Helper()
	for i, f := range files {
		secret, err := mountedSecretFile(pod, ctr, f)
		if err != nil {
			t.Errorf("%s: %s: %v", where, names[i], err)
			continue
		}
		if secret != want {
			t.Errorf("%s: %s %s is Secret %s's, want %s's", where, names[i], f, secret, want)
		}
		if path.Base(f) != secretKeys[i] {
			t.Errorf("%s: %s %s, want the Secret's %s", where, names[i], f, secretKeys[i])
		}
	}
}

// TestTLSFromMountedSecrets checks that every process has its certificate,
// key and CA from a mounted Secret, and that nothing is plaintext.
func TestTLSFromMountedSecrets(t *testing.T) {
	c := index(t, manifests(t))
	seen := map[string]bool{}
	for _, w := range c.workloads {
		pod := w.template.Spec
		for _, ctr := range pod.Containers {
			where := w.where + " container " + ctr.Name
			for _, e := range ctr.Env {
				if strings.HasSuffix(e.Name, "_INSECURE") {
					t.Errorf("%s: %s=%q: nothing runs plaintext", where, e.Name, e.Value)
				}
			}
			bin := binaryOf(ctr)
			if bin == "" {
				if ctr.Name != "etcd" {
					continue
				}
				seen["etcd"] = true
				checkEtcdTLS(t, where, pod, ctr)
				continue
			}
			seen[bin] = true
			vals := flagValues(t, where, ctr, bin)
			if vals["insecure"] != "false" {
				t.Errorf("%s: --insecure is %q", where, vals["insecure"])
			}
			checkTrio(t, where, pod, ctr, [3]string{"--tls-cert-file", "--tls-key-file", "--tls-ca-file"},
				[3]string{vals["tls-cert-file"], vals["tls-key-file"], vals["tls-ca-file"]}, serverSecrets[bin].secret)
			eps, dialsEtcd := vals["etcd-endpoints"]
			if !dialsEtcd {
				continue
			}
			checkTrio(t, where, pod, ctr, [3]string{"--etcd-cert", "--etcd-key", "--etcd-cacert"},
				[3]string{vals["etcd-cert"], vals["etcd-key"], vals["etcd-cacert"]}, etcdClientSecret.secret)
			for _, ep := range strings.Split(eps, ",") {
				if !strings.HasPrefix(ep, "https://") {
					t.Errorf("%s: --etcd-endpoints %s: want https:// (etcd requires client certificates)", where, ep)
				}
			}
		}
		checkSecretVolumes(t, w)
	}
	for _, b := range []string{"baton-queue", "baton-observer", "baton-worker", "etcd"} {
		if !seen[b] {
			t.Errorf("no container runs %s", b)
		}
	}
}

// checkEtcdTLS checks etcd's client and peer TLS: https listeners that
// require a client certificate, with the files of baton-etcd-server-tls,
// and a plaintext listener only for the health endpoints the probes use.
func checkEtcdTLS(t *testing.T, where string, pod corev1.PodSpec, ctr corev1.Container) {
	t.Helper()
	env := map[string]string{}
	for _, e := range ctr.Env {
		env[e.Name] = e.Value
	}
	want := serverSecrets["etcd"].secret
	checkTrio(t, where, pod, ctr, [3]string{"ETCD_CERT_FILE", "ETCD_KEY_FILE", "ETCD_TRUSTED_CA_FILE"},
		[3]string{env["ETCD_CERT_FILE"], env["ETCD_KEY_FILE"], env["ETCD_TRUSTED_CA_FILE"]}, want)
	checkTrio(t, where, pod, ctr, [3]string{"ETCD_PEER_CERT_FILE", "ETCD_PEER_KEY_FILE", "ETCD_PEER_TRUSTED_CA_FILE"},
		[3]string{env["ETCD_PEER_CERT_FILE"], env["ETCD_PEER_KEY_FILE"], env["ETCD_PEER_TRUSTED_CA_FILE"]}, want)
	for _, k := range []string{"ETCD_CLIENT_CERT_AUTH", "ETCD_PEER_CLIENT_CERT_AUTH"} {
		if env[k] != "true" {
			t.Errorf("%s: %s = %q, want true", where, k, env[k])
		}
	}
	for _, k := range []string{"ETCD_LISTEN_CLIENT_URLS", "ETCD_ADVERTISE_CLIENT_URLS", "ETCD_LISTEN_PEER_URLS", "ETCD_INITIAL_ADVERTISE_PEER_URLS", "ETCD_INITIAL_CLUSTER"} {
		v := env[k]
		if k == "ETCD_INITIAL_CLUSTER" {
			var urls []string
			for _, m := range strings.Split(v, ",") {
				_, u, _ := strings.Cut(m, "=")
				urls = append(urls, u)
			}
			v = strings.Join(urls, ",")
		}
		for _, u := range strings.Split(v, ",") {
			if !strings.HasPrefix(u, "https://") {
				t.Errorf("%s: %s has %q: want https://", where, k, u)
			}
		}
	}
	// The probes go to the metrics listener, plaintext, since a kubelet
	// presents no client certificate: its port must be the one they use.
	m, err := url.Parse(env["ETCD_LISTEN_METRICS_URLS"])
	if err != nil || m.Scheme != "http" || m.Port() == "" {
		t.Errorf("%s: ETCD_LISTEN_METRICS_URLS %q: want one http:// URL with a port, for the probes", where, env["ETCD_LISTEN_METRICS_URLS"])
		return
	}
	for kind, p := range map[string]*corev1.Probe{"liveness": ctr.LivenessProbe, "readiness": ctr.ReadinessProbe, "startup": ctr.StartupProbe} {
		if p == nil || p.HTTPGet == nil {
			t.Errorf("%s: %s probe: want httpGet", where, kind)
			continue
		}
		cp, ok := containerPort(ctr, p.HTTPGet.Port)
		if !ok || strconv.Itoa(int(cp.ContainerPort)) != m.Port() || p.HTTPGet.Scheme == corev1.URISchemeHTTPS {
			t.Errorf("%s: %s probe on port %s (%s): want the metrics listener's %s, plain HTTP", where, kind, p.HTTPGet.Port.String(), p.HTTPGet.Scheme, m.Port())
		}
	}
}

// checkSecretVolumes checks the mode of w's Secret volumes: no world
// access, and readable by the pod's user through fsGroup (the kubelet makes
// fsGroup the files' group; they are owned by root).
func checkSecretVolumes(t *testing.T, w workload) {
	t.Helper()
	pod := w.template.Spec
	for _, v := range pod.Volumes {
		if v.Secret == nil {
			continue
		}
		mode := fs.FileMode(deref(v.Secret.DefaultMode, 0o644))
		if mode&0o007 != 0 {
			t.Errorf("%s: Secret volume %s: defaultMode %#o lets any user read the key", w.where, v.Name, mode)
		}
		if mode&0o040 == 0 || pod.SecurityContext == nil || pod.SecurityContext.FSGroup == nil {
			t.Errorf("%s: Secret volume %s: defaultMode %#o: want group read and a pod fsGroup, or the non-root user cannot read the files (owned by root)", w.where, v.Name, mode)
		}
	}
}

// link is one connection: from an endpoint to a port of another.
type link struct {
	from, to string
	port     int32
	protocol corev1.Protocol
}

func (l link) String() string { return fmt.Sprintf("%s -> %s:%d/%s", l.from, l.to, l.port, l.protocol) }

// endpoint is a pod (or, external, an address outside the cluster) the
// policies are evaluated for.
type endpoint struct {
	name, namespace string
	nsLabels, pod   map[string]string
	ports           []corev1.ContainerPort
	external        bool
}

// Endpoints outside the manifests the policies must treat right: a
// scraper in a namespace labelled for it, cluster DNS, a pod of baton's
// namespace that is none of Baton's, a pod elsewhere that carries the
// observer's labels (a podSelector alone must not reach it), and the
// internet.
var (
	scrapeLabel = map[string]string{"baton.run/scrape": "true"}
	others      = []endpoint{
		{name: "monitoring", namespace: "monitoring", nsLabels: scrapeLabel,
			pod: map[string]string{"app.kubernetes.io/name": "prometheus"}, ports: []corev1.ContainerPort{{Name: "web", ContainerPort: 9090}}},
		{name: "kube-dns", namespace: "kube-system", pod: map[string]string{"k8s-app": "kube-dns"},
			ports: []corev1.ContainerPort{{Name: "dns", ContainerPort: 53, Protocol: corev1.ProtocolUDP}, {Name: "dns-tcp", ContainerPort: 53}, {Name: "metrics", ContainerPort: 9153}}},
		{name: "stranger", namespace: "baton", pod: map[string]string{"run": "debug"}, ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}}},
		{name: "lookalike", namespace: "default", pod: map[string]string{"app.kubernetes.io/name": "observer"},
			ports: []corev1.ContainerPort{{Name: "grpc", ContainerPort: 7071}}},
		{name: "internet", external: true, ports: []corev1.ContainerPort{{Name: "https", ContainerPort: 443}}},
	}
)

// wantLinks is docs/design.md's diagram, link by link (the observer and the
// workers dial etcd, the observer adds to the queue, workers lease from it
// and read the observer's cache, the queue's dashboard asks the observer
// its status, etcd's members talk to each other), plus
// DNS for the pods that dial by name and the scrapers' access to every HTTP
// port. A pod of the same workload stands for "another replica of it", as
// the queue's members, which dial each other on the peer port.
var wantLinks = []link{
	{"observer", "etcd", 2379, "TCP"},
	{"worker", "etcd", 2379, "TCP"},
	{"etcd", "etcd", 2380, "TCP"},
	{"queue", "queue", 7072, "TCP"},
	{"observer", "queue", 7070, "TCP"},
	{"worker", "queue", 7070, "TCP"},
	{"worker", "observer", 7071, "TCP"},
	{"queue", "observer", 7071, "TCP"},
	{"monitoring", "etcd", 2381, "TCP"},
	{"monitoring", "queue", 9090, "TCP"},
	{"monitoring", "observer", 9091, "TCP"},
	{"monitoring", "worker", 9092, "TCP"},
	{"etcd", "kube-dns", 53, "UDP"}, {"etcd", "kube-dns", 53, "TCP"},
	{"queue", "kube-dns", 53, "UDP"}, {"queue", "kube-dns", 53, "TCP"},
	{"observer", "kube-dns", 53, "UDP"}, {"observer", "kube-dns", 53, "TCP"},
	{"worker", "kube-dns", 53, "UDP"}, {"worker", "kube-dns", 53, "TCP"},
}

// endpoints returns the manifests' workloads as endpoints, then others.
func endpoints(c cluster) []endpoint {
	var out []endpoint
	for _, w := range c.workloads {
		var ports []corev1.ContainerPort
		for _, ctr := range w.template.Spec.Containers {
			ports = append(ports, ctr.Ports...)
		}
		out = append(out, endpoint{name: w.name, namespace: w.namespace, nsLabels: c.nsLabels[w.namespace], pod: w.template.Labels, ports: ports})
	}
	return append(out, others...)
}

// allowedLinks evaluates the policies as the NetworkPolicy API defines
// them: a pod selected by no policy of a direction is open in it; one that
// is selected allows what some rule of those policies allows. A connection
// is allowed when the source's egress and the destination's ingress both
// allow it. Only links that touch a namespace of the manifests are kept;
// the rest are other namespaces' business.
func allowedLinks(pols []*networkingv1.NetworkPolicy, eps []endpoint, ours map[string]bool) []link {
	var out []link
	for _, src := range eps {
		for _, dst := range eps {
			if !ours[src.namespace] && !ours[dst.namespace] {
				continue
			}
			for _, p := range dst.ports {
				if allows(pols, networkingv1.PolicyTypeEgress, src, dst, p) && allows(pols, networkingv1.PolicyTypeIngress, dst, src, p) {
					out = append(out, link{src.name, dst.name, p.ContainerPort, protocolOf(p.Protocol)})
				}
			}
		}
	}
	return out
}

// protocolOf is a port's protocol, TCP when unset as the API defaults it.
func protocolOf(p corev1.Protocol) corev1.Protocol {
	if p == "" {
		return corev1.ProtocolTCP
	}
	return p
}

// policyTypes is a policy's spec.policyTypes, defaulted as the API server
// does: Ingress always, Egress when it has egress rules.
func policyTypes(p *networkingv1.NetworkPolicy) []networkingv1.PolicyType {
	if len(p.Spec.PolicyTypes) > 0 {
		return p.Spec.PolicyTypes
	}
	types := []networkingv1.PolicyType{networkingv1.PolicyTypeIngress}
	if len(p.Spec.Egress) > 0 {
		types = append(types, networkingv1.PolicyTypeEgress)
	}
	return types
}

func selects(sel *metav1.LabelSelector, l map[string]string) bool {
	s, err := metav1.LabelSelectorAsSelector(sel)
	return err == nil && s.Matches(labels.Set(l))
}

// allows reports whether the policies of pod's namespace let pod exchange
// traffic with peer in direction dir, on port (a port of the destination:
// of pod for ingress, of peer for egress).
func allows(pols []*networkingv1.NetworkPolicy, dir networkingv1.PolicyType, pod, peer endpoint, port corev1.ContainerPort) bool {
	if pod.external {
		return true // nobody's policy: anything may leave or arrive
	}
	isolated := false
	for _, pol := range pols {
		if pol.Namespace != pod.namespace || !slices.Contains(policyTypes(pol), dir) || !selects(&pol.Spec.PodSelector, pod.pod) {
			continue
		}
		isolated = true
		if dir == networkingv1.PolicyTypeIngress {
			for _, r := range pol.Spec.Ingress {
				if peersMatch(pol.Namespace, r.From, peer) && portsMatch(r.Ports, port) {
					return true
				}
			}
		} else {
			for _, r := range pol.Spec.Egress {
				if peersMatch(pol.Namespace, r.To, peer) && portsMatch(r.Ports, port) {
					return true
				}
			}
		}
	}
	return !isolated
}

// peersMatch: no peers is everyone; a podSelector alone is pods of the
// policy's namespace; a namespaceSelector is pods of the namespaces it
// selects (those its podSelector, if any, selects); an ipBlock is taken as
// addresses outside the cluster (the test forbids ipBlocks anyway).
func peersMatch(ns string, peers []networkingv1.NetworkPolicyPeer, e endpoint) bool {
	if len(peers) == 0 {
		return true
	}
	for _, p := range peers {
		switch {
		case p.IPBlock != nil:
			if e.external {
				return true
			}
		case e.external:
		case p.NamespaceSelector != nil:
			nsl := map[string]string{"kubernetes.io/metadata.name": e.namespace} // set on every namespace
			for k, v := range e.nsLabels {
				nsl[k] = v
			}
			if selects(p.NamespaceSelector, nsl) && (p.PodSelector == nil || selects(p.PodSelector, e.pod)) {
				return true
			}
		case p.PodSelector != nil:
			if e.namespace == ns && selects(p.PodSelector, e.pod) {
				return true
			}
		}
	}
	return false
}

// portsMatch: no ports is every port; a number (with endPort, a range)
// matches the container port; a name matches the container port of that
// name, looked up on the destination.
func portsMatch(ports []networkingv1.NetworkPolicyPort, cp corev1.ContainerPort) bool {
	if len(ports) == 0 {
		return true
	}
	for _, p := range ports {
		proto := corev1.ProtocolTCP
		if p.Protocol != nil {
			proto = *p.Protocol
		}
		if proto != protocolOf(cp.Protocol) {
			continue
		}
		switch {
		case p.Port == nil:
			return true
		case p.Port.Type == intstr.String:
			if p.Port.StrVal == cp.Name {
				return true
			}
		case p.EndPort != nil:
			if cp.ContainerPort >= p.Port.IntVal && cp.ContainerPort <= *p.EndPort {
				return true
			}
		case p.Port.IntVal == cp.ContainerPort:
			return true
		}
	}
	return false
}

// TestNetworkPolicies checks that a default-deny policy covers the
// namespace, that every workload has a policy of its own for both
// directions, and that together they allow exactly wantLinks.
func TestNetworkPolicies(t *testing.T) {
	c := index(t, manifests(t))
	if len(c.netpols) == 0 {
		t.Fatal("no NetworkPolicy")
	}
	var deny bool
	for _, p := range c.netpols {
		if !c.ns[p.Namespace] {
			t.Errorf("NetworkPolicy %s: namespace %q is not in the manifests", p.Name, p.Namespace)
		}
		types := policyTypes(p)
		if len(p.Spec.PodSelector.MatchLabels) == 0 && len(p.Spec.PodSelector.MatchExpressions) == 0 &&
			slices.Contains(types, networkingv1.PolicyTypeIngress) && slices.Contains(types, networkingv1.PolicyTypeEgress) &&
			len(p.Spec.Ingress) == 0 && len(p.Spec.Egress) == 0 {
			deny = true
		}
		for _, r := range p.Spec.Ingress {
			checkPeers(t, p.Name, r.From)
		}
		for _, r := range p.Spec.Egress {
			checkPeers(t, p.Name, r.To)
		}
	}
	if !deny {
		t.Error("no default-deny NetworkPolicy: want one selecting every pod (podSelector {}), policyTypes Ingress and Egress, no rules")
	}
	for _, w := range c.workloads {
		for _, dir := range []networkingv1.PolicyType{networkingv1.PolicyTypeIngress, networkingv1.PolicyTypeEgress} {
			if !slices.ContainsFunc(c.netpols, func(p *networkingv1.NetworkPolicy) bool {
				return p.Namespace == w.namespace && slices.Contains(policyTypes(p), dir) &&
					(len(p.Spec.PodSelector.MatchLabels) > 0 || len(p.Spec.PodSelector.MatchExpressions) > 0) &&
					selects(&p.Spec.PodSelector, w.template.Labels)
			}) {
				t.Errorf("%s: no NetworkPolicy of its own selects its pods for %s (only the default-deny, if any)", w.where, dir)
			}
		}
	}

	got := allowedLinks(c.netpols, endpoints(c), c.ns)
	for _, l := range got {
		if !slices.Contains(wantLinks, l) {
			t.Errorf("the NetworkPolicies allow %s, which is no link of the architecture", l)
		}
	}
	for _, l := range wantLinks {
		if !slices.Contains(got, l) {
			t.Errorf("the NetworkPolicies do not allow %s", l)
		}
	}

	// Every address the manifests dial is one of the links, so the
	// policies and the flags cannot drift apart.
	for _, d := range dialedAddrs(t, c) {
		l := link{d.from, d.to, d.port, corev1.ProtocolTCP}
		if !slices.Contains(wantLinks, l) {
			t.Errorf("%s dials %s (%s), which the NetworkPolicies do not allow", d.where, d.hostport, l)
		}
	}
}

// checkPeers fails on ipBlocks, whose meaning for pod addresses differs
// between network plugins, and on a namespaceSelector that selects every
// namespace.
func checkPeers(t *testing.T, pol string, peers []networkingv1.NetworkPolicyPeer) {
	t.Helper()
	if len(peers) == 0 {
		t.Errorf("NetworkPolicy %s: a rule with no peers allows everyone", pol)
	}
	for _, p := range peers {
		if p.IPBlock != nil {
			t.Errorf("NetworkPolicy %s: ipBlock %s: select pods and namespaces by label instead", pol, p.IPBlock.CIDR)
		}
		if p.NamespaceSelector != nil && len(p.NamespaceSelector.MatchLabels) == 0 && len(p.NamespaceSelector.MatchExpressions) == 0 {
			t.Errorf("NetworkPolicy %s: an empty namespaceSelector selects every namespace", pol)
		}
	}
}

// dialed is an address one workload dials, resolved to the workload and
// container port it reaches.
type dialed struct {
	where, from, to, ns, host, hostport string
	port                                int32
	secret                              string // the Secret the server serves with
}

// dialedAddrs returns every address the manifests dial: the Baton
// binaries' --queue-addr, --observer-addr and --etcd-endpoints, and the
// etcd members' peer URLs. Each is resolved as cluster DNS would
// ("<service>" or "<pod>.<service>" of the namespace), through the
// Service's port to the container port.
func dialedAddrs(t *testing.T, c cluster) []dialed {
	t.Helper()
	var out []dialed
	for _, w := range c.workloads {
		for _, ctr := range w.template.Spec.Containers {
			where := w.where + " container " + ctr.Name
			var addrs []string
			if bin := binaryOf(ctr); bin != "" {
				vals := flagValues(t, where, ctr, bin)
				for f := range dialFlags {
					if v, ok := vals[f]; ok && v != "" {
						addrs = append(addrs, v)
					}
				}
				if eps, ok := vals["etcd-endpoints"]; ok {
					for _, ep := range strings.Split(eps, ",") {
						if u, err := url.Parse(ep); err == nil {
							addrs = append(addrs, u.Host)
						}
					}
				}
			}
			for _, e := range ctr.Env {
				if e.Name == "BATON_QUEUE_INITIAL_CLUSTER" {
					for _, m := range strings.Split(e.Value, ",") {
						_, addr, _ := strings.Cut(m, "=")
						addrs = append(addrs, addr)
					}
				}
				if e.Name != "ETCD_INITIAL_CLUSTER" {
					continue
				}
				for _, m := range strings.Split(e.Value, ",") {
					_, raw, _ := strings.Cut(m, "=")
					if u, err := url.Parse(raw); err == nil {
						addrs = append(addrs, u.Host)
					}
				}
			}
			for _, a := range addrs {
				d, err := resolve(c, w.namespace, a)
				if err != nil {
					t.Errorf("%s: %s: %v", where, a, err)
					continue
				}
				d.where, d.from = where, w.name
				out = append(out, d)
			}
		}
	}
	return out
}

// resolve maps host:port in namespace ns to the workload and container
// port behind it, and the Secret that workload serves with there.
func resolve(c cluster, ns, hostport string) (dialed, error) {
	host, ps, err := net.SplitHostPort(hostport)
	if err != nil {
		return dialed{}, err
	}
	port, err := strconv.ParseInt(ps, 10, 32)
	if err != nil {
		return dialed{}, err
	}
	parts := strings.Split(host, ".")
	svc, ok := c.services[ns+"/"+parts[len(parts)-1]]
	if !ok || len(parts) > 2 {
		return dialed{}, fmt.Errorf("no Service of namespace %s is named by %s", ns, host)
	}
	i := slices.IndexFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return int64(p.Port) == port })
	if i < 0 {
		return dialed{}, fmt.Errorf("Service %s has no port %d", svc.Name, port)
	}
	for _, w := range c.workloads {
		if w.namespace != ns || !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(w.template.Labels)) {
			continue
		}
		for _, ctr := range w.template.Spec.Containers {
			cp, ok := containerPort(ctr, svc.Spec.Ports[i].TargetPort)
			if !ok {
				continue
			}
			name := binaryOf(ctr)
			if name == "" {
				name = ctr.Name
			}
			return dialed{to: w.name, ns: ns, host: host, hostport: hostport, port: cp.ContainerPort, secret: serverSecrets[name].secret}, nil
		}
	}
	return dialed{}, fmt.Errorf("Service %s port %d reaches no container", svc.Name, port)
}

// TestNetworkPolicyEvaluator shows allowedLinks finds the mistakes it is
// there for, so TestNetworkPolicies passing means something.
func TestNetworkPolicyEvaluator(t *testing.T) {
	c := index(t, manifests(t))
	eps := endpoints(c)
	base := allowedLinks(c.netpols, eps, c.ns)
	without := func(names ...string) []*networkingv1.NetworkPolicy {
		return slices.DeleteFunc(slices.Clone(c.netpols), func(p *networkingv1.NetworkPolicy) bool { return slices.Contains(names, p.Name) })
	}
	decodePol := func(doc string) *networkingv1.NetworkPolicy {
		var p networkingv1.NetworkPolicy
		if err := strictYAML([]byte(doc), &p); err != nil {
			t.Fatal(err)
		}
		return &p
	}
	tests := []struct {
		name    string
		pols    []*networkingv1.NetworkPolicy
		link    link
		allowed bool
	}{
		{"the manifests: the internet reaches nothing", c.netpols, link{"internet", "queue", 7070, "TCP"}, false},
		{"the manifests: a stranger in the namespace gets nothing", c.netpols, link{"stranger", "etcd", 2379, "TCP"}, false},
		{"the manifests: the observer leases nothing from etcd's peers", c.netpols, link{"observer", "etcd", 2380, "TCP"}, false},
		{"no default-deny: a stranger in the namespace is open", without("default-deny"), link{"internet", "stranger", 8080, "TCP"}, true},
		{"no default-deny nor queue policy: the queue is open to anyone", without("default-deny", "queue"), link{"lookalike", "queue", 7070, "TCP"}, true},
		{"no dns policy: no name resolves", without("dns"), link{"worker", "kube-dns", 53, "UDP"}, false},
		// The dns policy selects workers for egress too: it alone keeps them
		// from the internet once the others are gone.
		{"no default-deny nor worker policy: the dns policy still isolates workers", without("default-deny", "worker"), link{"worker", "internet", 443, "TCP"}, false},
		{"no default-deny, worker nor dns policy: workers reach the internet", without("default-deny", "worker", "dns"), link{"worker", "internet", 443, "TCP"}, true},
		{"an allow-all ingress rule", append(slices.Clone(c.netpols), decodePol(`
metadata: {name: open, namespace: baton}
spec: {podSelector: {}, ingress: [{}]}`)), link{"internet", "etcd", 2379, "TCP"}, true},
		{"a podSelector without namespaceSelector stays in its namespace", append(slices.Clone(c.netpols), decodePol(`
metadata: {name: peers, namespace: baton}
spec: {podSelector: {matchLabels: {app.kubernetes.io/name: observer}}, policyTypes: [Egress], egress: [{to: [{podSelector: {matchLabels: {app.kubernetes.io/name: observer}}}]}]}`)),
			link{"observer", "lookalike", 7071, "TCP"}, false},
		{"a namespaceSelector reaches the other namespace", append(slices.Clone(c.netpols), decodePol(`
metadata: {name: out, namespace: baton}
spec: {podSelector: {matchLabels: {app.kubernetes.io/name: observer}}, policyTypes: [Egress], egress: [{to: [{namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: default}}}], ports: [{port: grpc}]}]}`)),
			link{"observer", "lookalike", 7071, "TCP"}, true},
	}
	if !slices.Contains(base, link{"worker", "kube-dns", 53, "UDP"}) {
		t.Fatal("the manifests' policies do not allow workers DNS: the cases below assume they do")
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := allowedLinks(tt.pols, eps, c.ns)
			if has := slices.Contains(got, tt.link); has != tt.allowed {
				t.Errorf("allowed %s = %v, want %v", tt.link, has, tt.allowed)
			}
		})
	}
}

// certManagerObject is what the test reads of a cert-manager.io/v1 Certificate
// or Issuer. The field names are cert-manager's (its API reference); the
// strict decode catches a field misspelled or misplaced against this
// subset, not against cert-manager's own schema, which is not vendored
// here: a field cert-manager has but this struct lacks fails too, so the
// struct lists every field the file uses. Field names are matched
// case-sensitively (strictYAML), as the API server matches them.
type certManagerObject struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   metav1.ObjectMeta `json:"metadata"`
	Spec       struct {
		// Certificate
		SecretName  string `json:"secretName,omitempty"`
		CommonName  string `json:"commonName,omitempty"`
		IsCA        bool   `json:"isCA,omitempty"`
		Duration    string `json:"duration,omitempty"`
		RenewBefore string `json:"renewBefore,omitempty"`
		Subject     *struct {
			Organizations []string `json:"organizations,omitempty"`
		} `json:"subject,omitempty"`
		DNSNames    []string `json:"dnsNames,omitempty"`
		IPAddresses []string `json:"ipAddresses,omitempty"`
		Usages      []string `json:"usages,omitempty"`
		PrivateKey  *struct {
			Algorithm      string `json:"algorithm,omitempty"`
			Size           int    `json:"size,omitempty"`
			RotationPolicy string `json:"rotationPolicy,omitempty"`
		} `json:"privateKey,omitempty"`
		IssuerRef *struct {
			Group string `json:"group,omitempty"`
			Kind  string `json:"kind,omitempty"`
			Name  string `json:"name"`
		} `json:"issuerRef,omitempty"`
		// Issuer
		SelfSigned *struct{} `json:"selfSigned,omitempty"`
		CA         *struct {
			SecretName string `json:"secretName"`
		} `json:"ca,omitempty"`
	} `json:"spec"`
}

// TestCertManagerCertificates decodes cert-manager/certificates.yaml and
// checks it makes every Secret the pods mount: a CA issuer bootstrapped by
// a self-signed one, and for each Secret one Certificate of that CA with
// the identity the process needs, server and client usages, and the names
// every client dials it by.
func TestCertManagerCertificates(t *testing.T) {
	const file = "cert-manager/certificates.yaml"
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var objs []certManagerObject
	for i, doc := range bytes.Split(data, []byte("\n---\n")) {
		if len(bytes.TrimSpace(stripComments(doc))) == 0 {
			continue
		}
		var o certManagerObject
		if err := strictYAML(doc, &o); err != nil {
			t.Fatalf("%s#%d: %v", file, i, err)
		}
		if o.APIVersion != "cert-manager.io/v1" || (o.Kind != "Certificate" && o.Kind != "Issuer") {
			t.Fatalf("%s#%d: %s %s: want cert-manager.io/v1 Certificate or Issuer", file, i, o.APIVersion, o.Kind)
		}
		if o.Metadata.Namespace != "baton" {
			t.Errorf("%s %s: namespace %q, want baton (an Issuer is namespaced, and so are the Secrets)", o.Kind, o.Metadata.Name, o.Metadata.Namespace)
		}
		objs = append(objs, o)
	}
	issuers := map[string]certManagerObject{}
	certs := map[string]certManagerObject{} // by secretName
	for _, o := range objs {
		if o.Kind == "Issuer" {
			issuers[o.Metadata.Name] = o
			continue
		}
		if _, dup := certs[o.Spec.SecretName]; dup {
			t.Errorf("two Certificates write Secret %s", o.Spec.SecretName)
		}
		certs[o.Spec.SecretName] = o
	}

	// The CA: an Issuer of kind ca whose Secret a self-signed isCA
	// Certificate writes.
	var caIssuer string
	for name, is := range issuers {
		if is.Spec.CA == nil {
			continue
		}
		ca, ok := certs[is.Spec.CA.SecretName]
		if !ok || !ca.Spec.IsCA || ca.Spec.IssuerRef == nil || issuers[ca.Spec.IssuerRef.Name].Spec.SelfSigned == nil {
			t.Errorf("Issuer %s: its CA Secret %s is not written by an isCA Certificate of a selfSigned Issuer", name, is.Spec.CA.SecretName)
		}
		caIssuer = name
	}
	if caIssuer == "" {
		t.Fatal("no CA Issuer (spec.ca)")
	}

	// Every Secret a pod mounts, with the identity and names it needs.
	c := index(t, manifests(t))
	mounted := map[string]identity{}
	for _, s := range serverSecrets {
		mounted[s.secret] = s.id
	}
	mounted[etcdClientSecret.secret] = etcdClientSecret.id
	for _, w := range c.workloads {
		for _, v := range w.template.Spec.Volumes {
			if v.Secret != nil {
				if _, ok := mounted[v.Secret.SecretName]; !ok {
					t.Errorf("%s mounts Secret %s, which neither the test nor cert-manager/certificates.yaml knows", w.where, v.Secret.SecretName)
				}
			}
		}
	}
	names := hostsBySecret(t, c)
	for secret, id := range mounted {
		cert, ok := certs[secret]
		if !ok {
			t.Errorf("no Certificate writes Secret %s", secret)
			continue
		}
		where := "Certificate " + cert.Metadata.Name
		if cert.Spec.IssuerRef == nil || cert.Spec.IssuerRef.Name != caIssuer || cmpOr(cert.Spec.IssuerRef.Kind, "Issuer") != "Issuer" {
			t.Errorf("%s: issuerRef %+v, want Issuer %s", where, cert.Spec.IssuerRef, caIssuer)
		}
		if cert.Spec.CommonName != id.cn {
			t.Errorf("%s: commonName %q, want %q", where, cert.Spec.CommonName, id.cn)
		}
		var orgs []string
		if cert.Spec.Subject != nil {
			orgs = cert.Spec.Subject.Organizations
		}
		var wantOrgs []string
		for _, r := range id.roles {
			wantOrgs = append(wantOrgs, "baton:"+r)
		}
		if !slices.Equal(orgs, wantOrgs) {
			t.Errorf("%s: subject.organizations %q, want %q (the roles, docs/security.md)", where, orgs, wantOrgs)
		}
		wantUsages := []string{"digital signature", "client auth"}
		if secret != etcdClientSecret.secret {
			// A Baton process serves with the certificate it dials with.
			wantUsages = []string{"digital signature", "server auth", "client auth"}
		}
		for _, u := range wantUsages {
			if !slices.Contains(cert.Spec.Usages, u) {
				t.Errorf("%s: usages %q lack %q", where, cert.Spec.Usages, u)
			}
		}
		for _, h := range names[secret] {
			if !slices.Contains(cert.Spec.DNSNames, h) && !slices.Contains(cert.Spec.IPAddresses, h) {
				t.Errorf("%s: %s is dialed by that name, which dnsNames %q lack", where, h, cert.Spec.DNSNames)
			}
		}
		if cert.Spec.PrivateKey == nil || cert.Spec.PrivateKey.RotationPolicy != "Always" {
			t.Errorf("%s: want privateKey.rotationPolicy Always (a new key at each renewal)", where)
		}
	}
}

func cmpOr(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// hostsBySecret returns, for each Secret a server serves with, the names
// it must carry: every host the manifests dial it by, each also qualified
// (<name>.<namespace>.svc.cluster.local, for clients in other namespaces),
// and loopback for the queue and the observer, which README.md reaches
// through kubectl port-forward.
func hostsBySecret(t *testing.T, c cluster) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	add := func(secret, h string) {
		if !slices.Contains(out[secret], h) {
			out[secret] = append(out[secret], h)
		}
	}
	for _, d := range dialedAddrs(t, c) {
		if d.secret == "" {
			t.Errorf("%s: %s reaches %s, which serves with no Secret the test knows", d.where, d.hostport, d.to)
			continue
		}
		add(d.secret, d.host)
		add(d.secret, d.host+"."+d.ns+".svc.cluster.local")
	}
	for _, s := range []string{serverSecrets["baton-queue"].secret, serverSecrets["baton-observer"].secret} {
		add(s, "localhost")
		add(s, "127.0.0.1")
	}
	return out
}

// TestSecretsScript runs secrets.sh: its host list covers every name a
// server is dialed by, and the Secrets it prints are the ones the pods
// mount, each holding the certificate of batonctl certs init its identity
// names (NAME.crt is the certificate whose CN is NAME) and ca.crt, never
// ca.key.
func TestSecretsScript(t *testing.T) {
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	out, err := exec.CommandContext(t.Context(), "bash", "secrets.sh", "hosts").Output()
	if err != nil {
		t.Fatalf("secrets.sh hosts: %v", err)
	}
	hosts := strings.Split(strings.TrimSpace(string(out)), ",")
	c := index(t, manifests(t))
	for secret, want := range hostsBySecret(t, c) {
		for _, h := range want {
			if !slices.Contains(hosts, h) {
				t.Errorf("secrets.sh hosts lacks %s, which %s's certificate must name", h, secret)
			}
		}
	}

	// A certificates directory whose every file holds its own name.
	dir := t.TempDir()
	for _, f := range []string{"ca.crt", "ca.key", "queue.crt", "queue.key", "observer.crt", "observer.key", "worker.crt", "worker.key",
		"viewer.crt", "viewer.key", "admin.crt", "admin.key", "etcd-server.crt", "etcd-server.key", "etcd-client.crt", "etcd-client.key"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(f), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	out, err = exec.CommandContext(t.Context(), "bash", "secrets.sh", "yaml", dir).Output()
	if err != nil {
		t.Fatalf("secrets.sh yaml: %v", err)
	}
	want := map[string]identity{etcdClientSecret.secret: etcdClientSecret.id}
	for _, s := range serverSecrets {
		want[s.secret] = s.id
	}
	seen := map[string]bool{}
	for i, doc := range bytes.Split(out, []byte("\n---\n")) {
		var s corev1.Secret
		if err := strictYAML(doc, &s); err != nil {
			t.Fatalf("secrets.sh yaml, document %d: %v\n%s", i, err, doc)
		}
		id, ok := want[s.Name]
		if !ok || s.Namespace != "baton" || s.Kind != "Secret" {
			t.Errorf("secrets.sh yaml: %s %s/%s: no Secret the pods mount", s.Kind, s.Namespace, s.Name)
			continue
		}
		seen[s.Name] = true
		wantData := map[string]string{"tls.crt": id.cn + ".crt", "tls.key": id.cn + ".key", "ca.crt": "ca.crt"}
		if len(s.Data) != len(wantData) {
			t.Errorf("secrets.sh yaml: %s has keys %v, want exactly %v", s.Name, slices.Sorted(mapKeys(s.Data)), slices.Sorted(mapKeys(wantData)))
		}
		for k, v := range wantData {
			if string(s.Data[k]) != v {
				t.Errorf("secrets.sh yaml: %s %s holds %s, want %s", s.Name, k, s.Data[k], v)
			}
		}
	}
	for name := range want {
		if !seen[name] {
			t.Errorf("secrets.sh yaml prints no Secret %s", name)
		}
	}
	// The exact data above already leaves ca.key out; said once more,
	// since it is the one file that must never reach the cluster.
	if bytes.Contains(out, []byte("Y2Eua2V5")) { // base64 of "ca.key"
		t.Error("secrets.sh yaml holds ca.key: the CA's key stays out of the cluster")
	}
}
