#!/usr/bin/env bash
# Fails when a package imports across a line the architecture draws (make
# verify runs it). Each rule names a module and the imports its packages
# (tests excluded) must not have; the test packages may reach further (they
# start real servers).
#
#   the queue          ↛ observer, worker, batonctl, dev    (it owns work; it never looks out)
#   the observer       ↛ the queue's or worker's code        (the queue only through client/queue)
#   the worker         ↛ the queue's or observer's code      (services only through client/ and proto/)
#   batonctl           ↛ the queue's, observer's or worker's code, the experiments
#   the experiments    ↛ the servers' code; of the worker only its SDK (manager, reconcile, objects)
#   client/, proto/    ↛ any service
#   everyone but bench ↛ NATS, client-go                     (the peers it measures against)
source "$(dirname "$0")/lib.sh"
cd "$ROOT"
B=github.com/batonrun/baton
rules=(
  "services/queue|^$B/services/(observer|worker|batonctl|dev|experiment)(/|$)"
  "services/observer|^$B/services/(queue|worker|batonctl|dev|experiment)(/|$)"
  "services/worker|^$B/services/(queue|observer|batonctl|dev|experiment)(/|$)"
  "services/batonctl|^$B/services/(queue|observer|worker|dev|experiment)(/|$)"
  "services/experiment|^$B/services/((queue|observer|batonctl|dev)(/|$)|worker/(controllers|service|cmd)(/|$))"
  "client|^$B/services/"
  "proto|^$B/(services|client)/"
)
fail=0
for m in $(modules); do
  [ "$m" = bench ] || rules+=("$m|^(github.com/nats-io/|k8s.io/client-go(/|$))")
done
for rule in "${rules[@]}"; do
  m=${rule%%|*} re=${rule#*|}
  bad=$(cd "$m" && go list -f '{{$p := .ImportPath}}{{range .Imports}}{{$p}} {{.}}{{"\n"}}{{end}}' ./... | awk -v re="$re" '$2 ~ re')
  if [ -n "$bad" ]; then
    echo "verify: $m imports across an architecture line (scripts/check-imports.sh):" >&2
    awk '{print "  " $1 " imports " $2}' <<<"$bad" >&2
    fail=1
  fi
done
exit $fail
