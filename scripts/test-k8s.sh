#!/usr/bin/env bash
# Applies deploy/kubernetes/ to a real control plane: kube-apiserver and
# kube-controller-manager on loopback, against an etcd of their own, with no
# scheduler and no kubelet (pods stay Pending). The test (test/k8s) applies
# the manifests server-side, checks that the controllers create what they
# should, scales the workers through the scale subresource as the HPA would,
# re-applies, and deletes everything; any error or warning fails it.
#
# What is applied is the stack as README.md has a user apply it: the
# manifests (their NetworkPolicies among them) and the Secrets they mount,
# made by deploy/kubernetes/secrets.sh from certificates that batonctl,
# built from this checkout, writes with `certs init` for the cluster's
# names. The Secrets are not in the repository, so both are staged in a
# temporary tree, deleted at the end, whose deploy/kubernetes/ the test
# reads in place of the checkout's (see stage below).
#
# kube-apiserver, kube-controller-manager and kubectl are built from
# k8s.io/kubernetes at the version test/k8s/go.mod pins (cold, 6-10 minutes
# on two cores and about 2 GB of memory at link; from a warm Go build cache,
# seconds), etcd from deploy/etcd's pin. The binaries are kept under .tools/
# and rebuilt only when missing or at another version; the test itself takes
# about 25 s. Its processes' logs land in test-output/test/k8s/_artifacts/.
# Extra arguments go to go test.
source "$(dirname "$0")/lib.sh"
cd "$ROOT"

k8s_ver=$(cd test/k8s && go list -m -f '{{.Version}}' k8s.io/kubernetes)
k8s_bin="$ROOT/.tools/k8s/$k8s_ver"
etcd_ver=$(cd deploy/etcd && go list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3)
etcd_bin="$ROOT/.tools/etcd-$etcd_ver/etcd"

# builtAt reports whether every binary is there and says it is $k8s_ver.
builtAt() {
  [ -x "$k8s_bin/kube-apiserver" ] && [ -x "$k8s_bin/kube-controller-manager" ] && [ -x "$k8s_bin/kubectl" ] || return 1
  [ "$("$k8s_bin/kube-apiserver" --version 2>/dev/null)" = "Kubernetes $k8s_ver" ] || return 1
  [ "$("$k8s_bin/kube-controller-manager" --version 2>/dev/null)" = "Kubernetes $k8s_ver" ] || return 1
  # Read kubectl's whole answer before matching: under pipefail, grep -q
  # exiting at the first line can kill kubectl with SIGPIPE and fail a
  # build that is right.
  local out
  out=$("$k8s_bin/kubectl" version --client 2>/dev/null) || return 1
  grep -qx "Client Version: $k8s_ver" <<<"$out"
}

if ! builtAt; then
  log "building kube-apiserver, kube-controller-manager, kubectl $k8s_ver into ${k8s_bin#"$ROOT/"} (cold: 6-10 minutes)"
  # The version the binaries report (hack/lib/version.sh sets the same
  # variables): kubectl's version skew check and the apiserver's
  # /version read them.
  major=${k8s_ver#v}; major=${major%%.*}
  minor=${k8s_ver#v*.}; minor=${minor%%.*}
  ldflags="-s -w"
  for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
    ldflags+=" -X $pkg.gitVersion=$k8s_ver -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor -X $pkg.gitTreeState=clean"
  done
  mkdir -p "$k8s_bin"
  start=$SECONDS
  (cd test/k8s && CGO_ENABLED=0 go build -trimpath -ldflags="$ldflags" -o "$k8s_bin/" \
    k8s.io/kubernetes/cmd/kube-apiserver k8s.io/kubernetes/cmd/kube-controller-manager k8s.io/kubernetes/cmd/kubectl)
  log "built in $((SECONDS - start)) s"
  builtAt || { echo "test-k8s: the binaries in $k8s_bin do not report version $k8s_ver" >&2; exit 1; }
fi

if [ ! -x "$etcd_bin" ]; then
  log "building etcd $etcd_ver into ${etcd_bin#"$ROOT/"}"
  (cd deploy/etcd && CGO_ENABLED=0 go build -trimpath -o "$etcd_bin" go.etcd.io/etcd/server/v3)
fi

# The staged tree: deploy/kubernetes/ holds the checkout's manifests and
# 01-secrets.yaml (after the namespace, before the pods that mount them: the
# directory applies in name order), and test/k8s/ is where the test binary
# runs, so that its ../../deploy/kubernetes is this copy. It holds private
# keys: removed on every exit.
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/bin" "$stage/certs" "$stage/tree/deploy/kubernetes" "$stage/tree/test/k8s"
log "making the Secrets: batonctl certs init for the cluster's names, then deploy/kubernetes/secrets.sh"
(cd services/batonctl && CGO_ENABLED=0 go build -trimpath -o "$stage/bin/batonctl" ./cmd/batonctl)
"$stage/bin/batonctl" certs init "$stage/certs" --hosts "$(deploy/kubernetes/secrets.sh hosts)" >/dev/null
if [ -e deploy/kubernetes/01-secrets.yaml ]; then
  echo "test-k8s: deploy/kubernetes/01-secrets.yaml exists: the staged Secrets would replace it" >&2
  exit 1
fi
cp deploy/kubernetes/*.yaml "$stage/tree/deploy/kubernetes/"
deploy/kubernetes/secrets.sh yaml "$stage/certs" >"$stage/tree/deploy/kubernetes/01-secrets.yaml"
# go test runs the test binary through this, which moves it into the staged
# tree; go test itself builds the package from the checkout.
printf '#!/bin/sh\ncd "%s/tree/test/k8s" && exec "$@"\n' "$stage" >"$stage/exec"
chmod +x "$stage/exec"

secrets=$(grep -c '^kind: Secret$' "$stage/tree/deploy/kubernetes/01-secrets.yaml")
policies=$(cat deploy/kubernetes/*.yaml | grep -c '^kind: NetworkPolicy$')
log "applying deploy/kubernetes/ with $secrets Secrets and $policies NetworkPolicies to kube-apiserver $k8s_ver"
out="$ROOT/test-output/test/k8s"
rm -rf "$out" && mkdir -p "$out" # the last run's logs only
cd test/k8s
BATON_TEST_K8S_BIN_DIR="$k8s_bin" BATON_TEST_K8S_ETCD="$etcd_bin" \
  go test -count=1 -timeout 5m -v -artifacts -outputdir "$out" -exec "$stage/exec" "$@" ./...
