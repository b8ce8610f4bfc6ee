// Package kubernetes holds Baton's Kubernetes manifests (the *.yaml files in
// this directory: `kubectl apply -f deploy/kubernetes/`) and, in its test, the
// checks that keep them honest: every document decodes strictly into the
// k8s.io/api type its apiVersion and kind name, and every port, probe and
// BATON_* variable agrees with the flags the binaries define (DESIGN.md,
// "Binaries and flags").
package kubernetes
