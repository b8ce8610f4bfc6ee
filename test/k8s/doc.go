// Package k8s applies Baton's Kubernetes manifests (deploy/kubernetes/) to a
// real control plane and checks that they apply, and re-apply, cleanly.
//
// It is a module of its own so that nothing else in the repository depends
// on Kubernetes: its go.mod pins k8s.io/kubernetes (the version the control
// plane is built at) and, as tools, the three commands the test runs.
//
// # Running it
//
//	make test-k8s      # or scripts/test-k8s.sh [go test flags]
//
// The script builds kube-apiserver, kube-controller-manager and kubectl from
// k8s.io/kubernetes at the pinned version into .tools/k8s/<version>/ (a cold
// build takes about 10 minutes; the Go build cache and the kept binaries make
// later runs take well under a minute), and etcd from deploy/etcd's pin, then
// runs `go test` here with BATON_TEST_K8S_BIN_DIR and BATON_TEST_K8S_ETCD set.
// Without them (`go test ./...`, as `make test` runs every module) the test
// skips and says so.
//
// # What it checks
//
// The test starts etcd, kube-apiserver (RBAC, a static token file, generated
// serving and service-account keys) and kube-controller-manager on free
// loopback ports. There is no scheduler and no kubelet, so pods stay Pending;
// that they are created at all shows the namespace's Pod Security level
// ("restricted") admits them. Then it
//
//   - applies deploy/kubernetes/ server-side, failing on any error or warning;
//   - waits for the Deployment controller's ReplicaSets and their pods, and
//     for the StatefulSet controller's pods and PersistentVolumeClaims;
//   - scales the HorizontalPodAutoscaler's target through the scale
//     subresource, as the autoscaler does, and re-applies: no conflict, the
//     scaled replicas kept, no other object changed;
//   - deletes everything and waits until the namespace is gone.
//
// Each step is bounded in time; the processes are stopped at the end, also
// when the test fails, and their logs are kept with -artifacts (the script
// passes it: test-output/test/k8s/).
package k8s
