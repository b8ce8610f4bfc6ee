#!/usr/bin/env bash
# Fails when a package imports across a line the architecture draws (make
# verify runs it). Each rule names a module and the imports its packages
# must not have. The consumers' tests (the observer's, the worker's,
# batonctl's, client/'s, the experiments', the SDK's) keep to the same
# lines: they run the other services as binaries (test/framework), not
# linked in.
#
#   the queue          ↛ observer, worker, batonctl, dev, sdk/ (it owns work; it never looks out)
#   the observer       ↛ the queue's or worker's code        (the queue only through client/queue)
#   observer, batonctl ↛ sdk/ but sdk/etcdconn               (they run no controllers)
#   the worker         ↛ the queue's or observer's code      (services only through client/ and proto/; controllers through sdk/)
#   batonctl           ↛ the queue's, observer's or worker's code, the experiments
#   the experiments    ↛ the servers' code, the worker's    (controllers through sdk/)
#   sdk/               ↛ anything of Baton's but client/ and proto/, in its tests too
#   client/, proto/    ↛ any service
#   test/framework     ↛ any service's code                  (it runs their binaries)
#   test/sdk           ↛ any service's code                  (it runs their binaries; etcd embedded)
#   examples/foo-controller ↛ Baton's but sdk/, client/, proto/ (a controller from outside); its test as test/sdk's
#   everyone but bench ↛ NATS, client-go                     (the peers it measures against)
#
# And a module-graph rule: the go.mod of a consumer (the observer, the
# worker, batonctl, the experiments, client/, test/framework, test/sdk)
# requires no other Baton service's module. Requiring one brings its server
# code and every dependency of it into the consumer's build; only what runs
# the servers itself (services/dev, bench) may. sdk/'s go.mod requires
# client/ and proto/ and nothing else of Baton's: a controller's module
# that depends on the SDK gets what the SDK needs at run time, and no test
# library or etcd server with it.
source "$(dirname "$0")/lib.sh"
cd "$ROOT"
B=github.com/batonrun/baton
rules=(
  "services/queue|^$B/services/(observer|worker|batonctl|dev|experiment)(/|$)|^$B/sdk(/|$)"
  "services/observer|^$B/services/(queue|worker|batonctl|dev|experiment)(/|$)"
  "services/worker|^$B/services/(queue|observer|batonctl|dev|experiment)(/|$)"
  "services/batonctl|^$B/services/(queue|observer|worker|dev|experiment)(/|$)"
  "services/experiment|^$B/services/(queue|observer|worker|batonctl|dev)(/|$)"
  "sdk|^$B/(services|test|bench|deploy)(/|$)"
  "client|^$B/(services|sdk)/"
  "proto|^$B/(services|client|sdk)/"
  "test/framework|^$B/services/(queue|observer|worker|batonctl|dev|experiment)(/|$)"
  "examples/foo-controller|^$B/(services|test|bench|deploy)(/|$)"
)
# The consumers' test packages follow the same lines (etcdembed and runtime
# are libraries, not services).
test_rules=(
  "services/observer|^$B/services/(queue|worker|batonctl|dev|experiment)(/|$)"
  "services/worker|^$B/services/(queue|observer|batonctl|dev|experiment)(/|$)"
  "services/batonctl|^$B/services/(queue|observer|worker|dev|experiment)(/|$)"
  "services/experiment|^$B/services/(queue|observer|worker|batonctl|dev)(/|$)"
  "sdk|^$B/(services|test|bench|deploy)(/|$)"
  "client|^$B/(services|sdk)/"
  "test/framework|^$B/services/(queue|observer|worker|batonctl|dev|experiment)(/|$)"
  "test/sdk|^$B/services/(queue|observer|worker|batonctl|dev|experiment|runtime)(/|$)"
  "examples/foo-controller|^$B/services/(queue|observer|worker|batonctl|dev|experiment|runtime)(/|$)"
)
# What a service that runs no controller may take from the SDK, in its
# code and its tests: etcdconn, the etcd flags and client configuration
# every binary shares, which lives in the SDK so that a controller written
# outside this repository takes the same flags. The rest of the SDK (the
# manager, objects, declarations) is the controllers' runtime.
sdk_rules=(
  "services/observer|^$B/sdk/etcdconn$"
  "services/batonctl|^$B/sdk/etcdconn$"
)
# The modules a consumer's go.mod must not require.
module_rules=(
  "services/observer|^$B/services/(queue|worker|batonctl|dev|experiment)$"
  "services/worker|^$B/services/(queue|observer|batonctl|dev|experiment)$"
  "services/batonctl|^$B/services/(queue|observer|worker|dev|experiment)$"
  "services/experiment|^$B/services/(queue|observer|worker|batonctl|dev)$"
  "sdk|^$B/(services|test|bench|deploy)(/|$)"
  "client|^$B/(services|sdk)(/|$)"
  "test/framework|^$B/services/(queue|observer|worker|batonctl|dev|experiment)$"
  "test/sdk|^$B/services/(queue|observer|worker|batonctl|dev|experiment|runtime)$"
  "examples/foo-controller|^$B/services/(queue|observer|worker|batonctl|dev|experiment|runtime)$"
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
for rule in "${sdk_rules[@]}"; do
  m=${rule%%|*} allow=${rule#*|}
  bad=$(cd "$m" && go list -f '{{$p := .ImportPath}}{{range .Imports}}{{$p}} {{.}}{{"\n"}}{{end}}{{range .TestImports}}{{$p}} {{.}}{{"\n"}}{{end}}{{range .XTestImports}}{{$p}}_test {{.}}{{"\n"}}{{end}}' ./... | awk -v sdk="^$B/sdk(/|$)" -v allow="$allow" '$2 ~ sdk && $2 !~ allow' | sort -u)
  if [ -n "$bad" ]; then
    echo "verify: $m runs no controller and takes only etcdconn from the SDK (scripts/check-imports.sh):" >&2
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
