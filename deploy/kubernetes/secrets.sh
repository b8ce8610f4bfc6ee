#!/usr/bin/env bash
# The Secrets the manifests mount, made from the certificates of
# `batonctl certs init` (README.md, "Certificates"). Each Secret has the
# layout cert-manager writes, so the two ways are interchangeable:
#
#   tls.crt  the component's certificate
#   tls.key  its key
#   ca.crt   the CA bundle that verifies the other side
#
#   secrets.sh hosts [--namespace NS] [--cluster-domain D] [--etcd-members N] [--queue-members N]
#       the --hosts list for `batonctl certs init`: every name the
#       manifests dial (queue, queue-N.queue-peers, observer, etcd-N.etcd, each also qualified
#       with the namespace and the cluster domain) and loopback, which
#       kubectl port-forward and the services' healthcheck use
#   secrets.sh yaml DIR [--namespace NS]
#       prints the Secrets as manifests (kubectl apply -f - takes them)
#   secrets.sh apply DIR [--namespace NS]
#       creates or updates them with kubectl (its current context)
#
# DIR is a directory `batonctl certs init` wrote. ca.key never leaves it:
# no Secret holds it, since only issuing needs it.
set -euo pipefail

namespace=baton
cluster_domain=cluster.local
etcd_members=3  # etcd.yaml's replicas
queue_members=3 # queue.yaml's replicas

# secret name -> the base name of its certificate in DIR
secrets=(
  baton-queue-tls:queue
  baton-observer-tls:observer
  baton-worker-tls:worker
  baton-etcd-server-tls:etcd-server
  baton-etcd-client-tls:etcd-client
)

usage() {
  echo "usage: secrets.sh hosts [--namespace NS] [--cluster-domain D] [--etcd-members N] [--queue-members N] | secrets.sh yaml|apply DIR [--namespace NS]" >&2
  exit 2
}

die() {
  echo "secrets.sh: $*" >&2
  exit 2
}

cmd=${1:-}
[ -n "$cmd" ] || usage
shift
dir=
if [ "$cmd" = yaml ] || [ "$cmd" = apply ]; then
  [ $# -gt 0 ] && [ "${1#-}" = "$1" ] || die "$cmd needs the directory of batonctl certs init"
  dir=$1
  shift
fi
while [ $# -gt 0 ]; do
  case $1 in
    --namespace) namespace=${2:?--namespace needs a value}; shift 2 ;;
    --cluster-domain) cluster_domain=${2:?--cluster-domain needs a value}; shift 2 ;;
    --etcd-members) etcd_members=${2:?--etcd-members needs a value}; shift 2 ;;
    --queue-members) queue_members=${2:?--queue-members needs a value}; shift 2 ;;
    *) die "unknown argument $1" ;;
  esac
done

# qualified NAME prints NAME in every form a pod of the namespace may dial
# it by: the short name resolves through the pod's DNS search path, the
# longer ones from anywhere in the cluster.
qualified() {
  printf '%s\n' "$1" "$1.$namespace" "$1.$namespace.svc" "$1.$namespace.svc.$cluster_domain"
}

hosts() {
  {
    qualified queue
    for ((i = 0; i < queue_members; i++)); do
      # queue-N.queue-peers: a member's name under the headless Service,
      # which the members dial each other by.
      qualified "queue-$i.queue-peers"
    done
    qualified observer
    qualified etcd
    for ((i = 0; i < etcd_members; i++)); do
      # etcd-N.etcd: a member's name under the headless Service, which the
      # clients' endpoints and the members' peer URLs use.
      qualified "etcd-$i.etcd"
    done
    printf '%s\n' localhost 127.0.0.1 ::1
  } | paste -sd, -
}

# check DIR fails unless every file the Secrets need is there.
check() {
  local s name
  [ -f "$dir/ca.crt" ] || die "$dir/ca.crt is missing: run batonctl certs init $dir --hosts \"\$($0 hosts)\" first"
  for s in "${secrets[@]}"; do
    name=${s#*:}
    for f in "$name.crt" "$name.key"; do
      [ -f "$dir/$f" ] || die "$dir/$f is missing (batonctl certs init writes it)"
    done
  done
}

# yaml prints one Secret per component. base64 -w0 keeps each value on one
# line, as a manifest's data wants.
yaml() {
  local s secret name first=1
  for s in "${secrets[@]}"; do
    secret=${s%%:*}
    name=${s#*:}
    [ $first = 1 ] || echo ---
    first=0
    cat <<EOF
apiVersion: v1
kind: Secret
metadata:
  name: $secret
  namespace: $namespace
  labels:
    app.kubernetes.io/part-of: baton
type: Opaque
data:
  tls.crt: $(base64 -w0 <"$dir/$name.crt")
  tls.key: $(base64 -w0 <"$dir/$name.key")
  ca.crt: $(base64 -w0 <"$dir/ca.crt")
EOF
  done
}

case $cmd in
  hosts) hosts ;;
  yaml) check; yaml ;;
  apply)
    check
    # Each is kubectl create secret generic, through apply so that a second
    # run replaces the certificates (a rotation) instead of failing.
    for s in "${secrets[@]}"; do
      secret=${s%%:*}
      name=${s#*:}
      kubectl create secret generic "$secret" --namespace "$namespace" \
        --from-file=tls.crt="$dir/$name.crt" --from-file=tls.key="$dir/$name.key" --from-file=ca.crt="$dir/ca.crt" \
        --dry-run=client -o yaml | kubectl apply -f -
    done
    ;;
  *) usage ;;
esac
