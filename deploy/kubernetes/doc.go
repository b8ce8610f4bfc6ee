// Package kubernetes holds Baton's Kubernetes manifests (the *.yaml files in
// this directory: `kubectl apply -f deploy/kubernetes/`, after the Secrets
// README.md makes with secrets.sh or cert-manager/) and, in its tests, the
// checks that keep them honest: every document decodes strictly into the
// k8s.io/api type its apiVersion and kind name, and every port, probe and
// BATON_* variable agrees with the flags the binaries define (docs/design.md,
// "Binaries and flags"), and no document sets a field that a controller, the
// scheduler or the API server writes (which a re-apply would fight). Their
// trust settings too (security_test.go): mutual TLS from mounted Secrets on
// every link, HTTPS probes, NetworkPolicies that allow exactly the
// architecture's links, and the two ways of making the Secrets. The module
// test/k8s applies them to a real control plane (make test-k8s).
package kubernetes
