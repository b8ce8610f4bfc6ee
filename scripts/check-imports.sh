#!/usr/bin/env bash
# Fails when a package imports across a line the architecture draws (make
# verify runs it). Each rule names a module and the imports its packages
# must not have. The consumers' tests keep to the same lines: they run the
# other services as binaries (test/framework), not linked in.
#
#   the queue          ↛ observer, worker, batonctl, dev    (it owns work; it never looks out)
#   the observer       ↛ the queue's or worker's code        (the queue only through client/queue)
#   the worker         ↛ the queue's or observer's code      (services only through client/ and proto/)
#   batonctl           ↛ the queue's, observer's or worker's code, the experiments
#   the experiments    ↛ the servers' code; of the worker only its SDK (manager, reconcile, objects)
#   client/, proto/    ↛ any service
#   test/framework     ↛ any service's code                  (it runs their binaries)
#   everyone but bench ↛ NATS, client-go                     (the peers it measures against)
#
# And a module-graph rule: the go.mod of a consumer (the observer, the
# worker, batonctl, client/, test/framework) requires no other Baton
# service's module. Requiring one brings its server code and every
# dependency of it into the consumer's build; only what runs the servers
# itself (services/dev, services/experiment, bench) may.
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
  "test/framework|^$B/services/(queue|observer|worker|batonctl|dev|experiment)(/|$)"
)
# The consumers' test packages follow the same lines (etcdembed and runtime
# are libraries, not services).
test_rules=(
  "services/observer|^$B/services/(queue|worker|batonctl|dev|experiment)(/|$)"
  "services/worker|^$B/services/(queue|observer|batonctl|dev|experiment)(/|$)"
  "services/batonctl|^$B/services/(queue|observer|worker|dev|experiment)(/|$)"
  "client|^$B/services/"
  "test/framework|^$B/services/(queue|observer|worker|batonctl|dev|experiment)(/|$)"
)
# The modules a consumer's go.mod must not require.
module_rules=(
  "services/observer|^$B/services/(queue|worker|batonctl|dev|experiment)$"
  "services/worker|^$B/services/(queue|observer|batonctl|dev|experiment)$"
  "services/batonctl|^$B/services/(queue|observer|worker|dev|experiment)$"
  "client|^$B/services/"
  "test/framework|^$B/services/(queue|observer|worker|batonctl|dev|experiment)$"
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
for rule in "${test_rules[@]}"; do
  m=${rule%%|*} re=${rule#*|}
  bad=$(cd "$m" && go list -f '{{$p := .ImportPath}}{{range .TestImports}}{{$p}} {{.}}{{"\n"}}{{end}}{{range .XTestImports}}{{$p}}_test {{.}}{{"\n"}}{{end}}' ./... | awk -v re="$re" '$2 ~ re' | sort -u)
  if [ -n "$bad" ]; then
    echo "verify: $m's tests import another service's code (scripts/check-imports.sh); start its binary with test/framework instead:" >&2
    awk '{print "  " $1 " imports " $2}' <<<"$bad" >&2
    fail=1
  fi
done
for rule in "${module_rules[@]}"; do
  m=${rule%%|*} re=${rule#*|}
  # The main module's edges of the module graph are its go.mod's require lines.
  bad=$(cd "$m" && go mod graph | awk -v me="$(go list -m)" -v re="$re" '$1 == me { sub(/@.*/, "", $2); if ($2 ~ re) print $2 }')
  if [ -n "$bad" ]; then
    echo "verify: $m/go.mod requires another Baton service's module (scripts/check-imports.sh): a consumer reaches a service through client/ and proto/ only, and its tests run the service's binary (test/framework):" >&2
    sed 's/^/  /' <<<"$bad" >&2
    fail=1
  fi
done
exit $fail
