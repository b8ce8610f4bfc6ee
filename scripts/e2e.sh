#!/usr/bin/env bash
# End-to-end test of the compose stack (make test-e2e), as a new user meets
# it: a fresh clone of this repository's HEAD, then `make up` in it (which
# builds every image from the clone, starts docker-compose.yml as project
# baton-e2e on free ports, and waits until it is healthy, with mutual TLS
# everywhere and the certificates its certs service wrote into the clone's
# ./certs); checks that a client without a certificate is refused by the
# queue, the observer and etcd, and that the services' HTTP needs one but for
# the probes; then it applies
# examples/ with batonctl and waits for convergence; under load, SIGKILLs the
# queue, restarts it and checks that nothing was lost; scales to 3 workers;
# cuts the observer off the network for 10 s and checks that it catches up;
# makes a one-line change to the queue's source and times the second
# `make up`, which must rebuild and restart the queue alone; then starts the
# replicated queue instead (make up-ha: three members) and SIGKILLs its
# leader under load, checking that nothing was lost. It always removes
# the stack and its volumes (down -v), also on failure or timeout, and it is
# bounded in time ($BATON_E2E_TIMEOUT seconds, default 1800, image builds
# included). On failure the last thing it prints, after the services' logs,
# is the step that was under way and why it failed: CI shows the end.
#
# Where no Docker engine answers it prints why and exits 0 (skipped).
#
# Convergence is judged from etcd itself (etcdctl + jq), not from the
# controllers' own status alone: every ReplicaSet and StatefulSet has exactly
# spec.replicas pods, all Running; every Deployment has observed its
# generation with all replicas updated and ready; every Job has finished; no
# pod names an owner that is gone; no bare pod is still Pending.
source "$(dirname "$0")/lib.sh"
cd "$ROOT"

PROJECT=baton-e2e
TIMEOUT=${BATON_E2E_TIMEOUT:-1800}
STEP_TIMEOUT=${BATON_E2E_STEP_TIMEOUT:-240} # each wait for health or convergence
LOAD=${BATON_E2E_LOAD:-100}                 # ReplicaSets applied before the queue is killed
JOBS=${BATON_E2E_JOBS:-20}                  # and Jobs, whose pods run for 30 s
EXAMPLES=${BATON_E2E_EXAMPLES:-examples}    # the manifests applied first
CLONE=${BATON_E2E_CLONE:-}                  # a clone to use, else a fresh one in a temporary directory

# Every compose call, the clone's `make up` included, works on this project,
# and the images get a tag of their own, so a stack of `make up` stays as it
# is.
export COMPOSE_PROJECT_NAME=$PROJECT BATON_IMAGE_TAG=e2e

# Publish on free host ports, so the test neither collides with a stack
# started by `make up` or `make run` nor needs the default ports free.
export BATON_PUBLISH_ETCD="" BATON_PUBLISH_QUEUE_GRPC="" BATON_PUBLISH_QUEUE_HTTP=""
export BATON_PUBLISH_OBSERVER_GRPC="" BATON_PUBLISH_OBSERVER_HTTP=""

if [ "${1:-}" != --steps ]; then
  if ! out=$(docker info 2>&1); then
    echo "e2e: SKIPPED: no Docker engine answers ('docker info' failed: $(tail -n1 <<<"$out"))" >&2
    exit 0
  fi
  if ! docker compose version >/dev/null 2>&1 && ! command -v docker-compose >/dev/null; then
    echo "e2e: FAIL: a Docker engine answers but neither 'docker compose' nor 'docker-compose' is installed" >&2
    exit 1
  fi
  command -v jq >/dev/null || { echo "e2e: FAIL: jq is needed (apt-get install jq)" >&2; exit 1; }
  command -v curl >/dev/null || { echo "e2e: FAIL: curl is needed (apt-get install curl)" >&2; exit 1; }
  if [ -z "$CLONE" ]; then
    CLONE=$(mktemp -d)/baton
    git clone -q "$ROOT" "$CLONE"
    log "a fresh clone of $(git -C "$CLONE" rev-parse --short HEAD) in $CLONE"
  fi
  export BATON_E2E_CLONE=$CLONE
  cd "$CLONE"

  # The steps write the step under way and the reason of a failure here,
  # for the summary cleanup prints last.
  export BATON_E2E_STATE=$(mktemp -d)
  cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    # Both files: the replicated phase's members and volumes are in the
    # override, and a failure there must remove them too.
    export COMPOSE_FILE=docker-compose.yml:docker-compose.ha.yml
    if [ "$rc" -ne 0 ]; then
      log "e2e failed (exit $rc): the last logs of each service"
      compose ps >&2 || true
      compose logs --no-color --tail=40 >&2 || true
    fi
    log "down -v"
    compose down -v --remove-orphans --timeout 10 >/dev/null 2>&1 || true
    if [ "$rc" -ne 0 ]; then
      echo "e2e: FAIL (exit $rc); the last step logged: $(cat "$BATON_E2E_STATE/step" 2>/dev/null || echo "(none)")" >&2
      [ -s "$BATON_E2E_STATE/fail" ] && echo "e2e: FAIL: $(cat "$BATON_E2E_STATE/fail")" >&2
    fi
    rm -rf "$BATON_E2E_STATE"
    docker images -q "baton/*:e2e" | xargs -r docker rmi >/dev/null 2>&1 || true
    [ -n "${BATON_E2E_KEEP:-}" ] || rm -rf "$(dirname "$CLONE")"
    exit "$rc"
  }
  trap cleanup EXIT
  trap 'exit 130' INT TERM
  rc=0
  timeout --kill-after=15s "$TIMEOUT" "$0" --steps || rc=$?
  if [ "$rc" -eq 124 ]; then echo "timed out after ${TIMEOUT}s" >"$BATON_E2E_STATE/fail"; fi
  [ "$rc" -eq 0 ] && echo "e2e: PASS" >&2
  exit "$rc"
fi

# ---- the steps (run under timeout by the part above) ----------------------

cd "$CLONE"

fail() {
  echo "e2e: FAIL: $*" >&2
  [ -z "${BATON_E2E_STATE:-}" ] || printf '%s (%ss in)\n' "$*" "$SECONDS" >"$BATON_E2E_STATE/fail"
  exit 1
}
# Every step's log line is also the step under way, for the summary.
log() {
  printf '==> %s\n' "$*" >&2
  [ -z "${BATON_E2E_STATE:-}" ] || printf '%s (%ss in)\n' "$*" "$SECONDS" >"$BATON_E2E_STATE/step"
}

# wait_for <what> <command...>: polls the command once a second until it
# succeeds, for at most STEP_TIMEOUT seconds; the command's last output is
# shown on failure.
wait_for() {
  local what=$1 deadline=$((SECONDS + STEP_TIMEOUT)) out=""
  shift
  log "waiting: $what"
  while ! out=$("$@" 2>&1); do
    if [ "$SECONDS" -ge "$deadline" ]; then
      printf '%s\n' "$out" | tail -n 20 >&2
      fail "$what: not within ${STEP_TIMEOUT}s"
    fi
    sleep 1
  done
  log "done: $what (${SECONDS}s in)"
}

# healthy <service> <n>: exactly n containers of service run and are healthy.
healthy() {
  local ids n=0 st
  ids=$(compose ps -q "$1")
  for id in $ids; do
    st=$(docker inspect -f '{{.State.Status}}/{{if .State.Health}}{{.State.Health.Status}}{{end}}' "$id")
    echo "$1 $id $st"
    [ "$st" = running/healthy ] && n=$((n + 1))
  done
  [ "$n" -eq "$2" ] && [ "$(wc -w <<<"$ids")" -eq "$2" ]
}

stack_healthy() {
  healthy etcd 1 && healthy queue 1 && healthy observer 1 && healthy worker "${1:-1}"
}

batonctl() { "$CLONE/bin/batonctl" "$@"; }

# down_v <what>: compose down -v, tried three times: the engine can refuse a
# removal while a container it is stopping still holds the network.
down_v() {
  local out i
  for i in 1 2 3; do
    out=$(compose down -v --remove-orphans --timeout 10 2>&1) && return 0
    log "down -v of $1, attempt $i, failed: $(tail -n 3 <<<"$out" | tr '\n' ' ')"
    sleep 2
  done
  fail "down -v of $1 failed three times: $(tail -n 5 <<<"$out" | tr '\n' ' ')"
}
# etcdctl runs in the etcd container (the host needs none), with the
# certificate etcd's clients use.
etcdctl() {
  compose exec -T etcd /usr/local/bin/etcdctl --endpoints https://127.0.0.1:2379 \
    --cacert /etc/baton/certs/ca.crt --cert /etc/baton/certs/etcd-client.crt --key /etc/baton/certs/etcd-client.key \
    --dial-timeout 3s --command-timeout 10s "$@"
}

# problems prints one line per object that has not converged (see the top).
problems() {
  etcdctl get --prefix /registry/ -w json | jq -r '
    [.kvs[]? | .value | @base64d | fromjson] as $objs
    | ($objs | map(select(.kind == "Pod"))) as $pods
    | def ns: .metadata.namespace // "default";
      def id: "\(.kind) \(ns)/\(.metadata.name)";
      def want: .spec.replicas // 1;
      def children($o): $pods | map(select(ns == ($o | ns)
          and any(.metadata.ownerReferences[]?; .kind == $o.kind and .name == $o.metadata.name)));
      def running: map(select(.status.phase == "Running")) | length;
    $objs[] | . as $o
    | if .kind == "ReplicaSet" then
        children($o) as $c
        | select(($c | length) != want or ($c | running) != want)
        | "\(id): \($c | running) Running of \($c | length) pods, want \(want)"
      elif .kind == "StatefulSet" then
        children($o) as $c
        | ([range(0; want)] | map("\($o.metadata.name)-\(.)")) as $names
        | select(($c | map(.metadata.name) | sort) != ($names | sort) or ($c | running) != want)
        | "\(id): pods \($c | map(.metadata.name + "=" + (.status.phase // "?")) | join(",")), want \($names | join(",")) Running"
      elif .kind == "Deployment" then
        select((.status.observedGeneration // 0) < (.metadata.generation // 1)
          or (.status.updatedReplicas // 0) != want or (.status.readyReplicas // 0) != want)
        | "\(id): generation \(.metadata.generation) observed \(.status.observedGeneration // 0), updated \(.status.updatedReplicas // 0) ready \(.status.readyReplicas // 0), want \(want)"
      elif .kind == "Job" then
        select(any(.status.conditions[]?; (.type == "Complete" or .type == "Failed") and .status == "True") | not)
        | "\(id): not finished (active \(.status.active // 0), succeeded \(.status.succeeded // 0), failed \(.status.failed // 0))"
      elif .kind == "Pod" and (.metadata.ownerReferences // [] | length) > 0 then
        select([.metadata.ownerReferences[] as $r | $objs[]
                | select(.kind == $r.kind and .metadata.name == $r.name and ns == ($o | ns))] | length == 0)
        | "\(id): owner \(.metadata.ownerReferences[0].kind) \(.metadata.ownerReferences[0].name) is gone"
      elif .kind == "Pod" then
        select((.status.phase // "Pending") == "Pending") | "\(id): a bare pod still Pending"
      else empty end'
}

converged() {
  local p
  p=$(problems) || { echo "reading etcd failed"; return 1; }
  [ -z "$p" ] && return 0
  echo "$(wc -l <<<"$p") objects not converged:"
  echo "$p"
  return 1
}

count() { # count <prefix>: keys under prefix; fails (prints nothing) if etcd does
  local keys
  keys=$(etcdctl get --prefix "$1" --keys-only) || return 1
  grep -c . <<<"$keys" || true
}

# load_manifest <replicas>: JOBS Jobs of 2 pods that run for 30 s, then LOAD
# ReplicaSets of <replicas> pods, in namespace e2e, as one YAML stream. A job
# pod's key waits in the queue, delayed, until its run ends: unfinished work
# that only the queue remembers.
load_manifest() {
  for i in $(seq 1 "$JOBS"); do
    cat <<EOF
---
kind: Job
metadata:
  name: batch-$i
  namespace: e2e
spec:
  completions: 2
  parallelism: 2
  template:
    spec: {image: "busybox:1.36", durationSeconds: 30, exitCode: 0}
EOF
  done
  for i in $(seq 1 "$LOAD"); do
    cat <<EOF
---
kind: ReplicaSet
metadata:
  name: load-$i
  namespace: e2e
  labels: {app: load-$i}
spec:
  replicas: $1
  template:
    metadata:
      labels: {app: load-$i}
    spec: {image: "busybox:1.36", durationSeconds: 0, exitCode: 0}
EOF
  done
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

[ -e "$EXAMPLES" ] || fail "$EXAMPLES is missing"

compose down -v --remove-orphans >/dev/null 2>&1 || true # leftovers of a killed run
log "make up (project $PROJECT, in the clone)"
up_start=$SECONDS
make up >"$tmp/up.log" 2>&1 || { tail -n 40 "$tmp/up.log" >&2; fail "make up failed"; }
log "make up: healthy in $((SECONDS - up_start))s"
[ -x bin/batonctl ] || fail "make up did not build bin/batonctl"
stack_healthy 1 >/dev/null || fail "make up returned but the stack is not healthy"

# batonctl reaches the stack as admin, with the certificates the certs
# service wrote (the flags make up prints, as environment).
CERTS=$CLONE/certs
export BATONCTL_CACERT=$CERTS/ca.crt BATONCTL_CERT=$CERTS/admin.crt BATONCTL_KEY=$CERTS/admin.key
export BATON_BATONCTL_ETCD_CACERT=$CERTS/ca.crt BATON_BATONCTL_ETCD_CERT=$CERTS/admin.crt BATON_BATONCTL_ETCD_KEY=$CERTS/admin.key

# discover points batonctl and etcdctl at the published ports, which are
# free ports picked by Docker and change when a container restarts.
discover() {
  ETCD=https://$(compose port etcd 2379)
  export BATON_BATONCTL_ETCD_ENDPOINTS=$ETCD
  export BATON_BATONCTL_QUEUE_ADDR=$(compose port queue 7070)
  export BATON_BATONCTL_OBSERVER_ADDR=$(compose port observer 7071)
  QUEUE_HTTP=$(compose port queue 9090)
  OBSERVER_HTTP=$(compose port observer 9091)
  log "published: etcd $ETCD, queue $BATON_BATONCTL_QUEUE_ADDR, observer $BATON_BATONCTL_OBSERVER_ADDR"
}
# status: batonctl's view of every service's health (workers publish no port).
status() {
  batonctl status --queue-http-addr "$QUEUE_HTTP" --observer-http-addr "$OBSERVER_HTTP" --worker-http-addr ""
}
discover
wait_for "batonctl status reports every service healthy" status
status

log "trust: the certs service's files, and what a client without a certificate gets"
for f in ca.crt ca.key admin.crt admin.key queue.key etcd-client.key; do
  [ -f "$CERTS/$f" ] || fail "the certs service did not write $CERTS/$f"
done
mode() { stat -c %a "$1"; }
[ "$(mode "$CERTS/ca.key")" = 600 ] && [ "$(mode "$CERTS/admin.key")" = 600 ] || fail "ca.key and admin.key must be the user's alone: $(ls -l "$CERTS")"
[ "$(mode "$CERTS/queue.key")" = 640 ] && [ "$(stat -c %g "$CERTS/queue.key")" = 65532 ] || fail "queue.key must be readable by the services' group 65532: $(ls -l "$CERTS")"
[ "$(stat -c %u "$CERTS/admin.key")" = "$(stat -c %u "$CERTS")" ] || fail "the files must keep the owner of ./certs: $(ls -ln "$CERTS")"
# refused <what> <command...>: the command must fail, saying why in its output.
refused() {
  local what=$1 out
  shift
  if out=$("$@" 2>&1); then fail "$what succeeded without a certificate: $out"; fi
  log "refused as it should be: $what ($(tail -n 1 <<<"$out" | cut -c1-160))"
}
plain() { env -u BATONCTL_CACERT -u BATONCTL_CERT -u BATONCTL_KEY "$CLONE/bin/batonctl" --timeout 5s "$@"; }
refused "batonctl queue stats in plaintext" plain queue stats
refused "batonctl queue stats over TLS with no certificate" env -u BATONCTL_CERT -u BATONCTL_KEY "$CLONE/bin/batonctl" --timeout 5s queue stats
refused "etcd without a client certificate" compose exec -T etcd /usr/local/bin/etcdctl --endpoints https://127.0.0.1:2379 \
  --cacert /etc/baton/certs/ca.crt --dial-timeout 3s --command-timeout 5s get /registry --prefix --keys-only
https_code() { curl -s -o /dev/null -w '%{http_code}' --max-time 5 --cacert "$CERTS/ca.crt" "$@" || true; }
[ "$(https_code "https://$QUEUE_HTTP/healthz")" = 200 ] || fail "the queue's /healthz must answer without a client certificate"
[ "$(https_code --cert "$CERTS/admin.crt" --key "$CERTS/admin.key" "https://$QUEUE_HTTP/metrics")" = 200 ] || fail "the queue's /metrics must answer admin"
code=$(https_code "https://$QUEUE_HTTP/metrics")
[ "$code" != 200 ] || fail "the queue's /metrics answered a client without a certificate"
log "the queue's HTTP: /healthz open, /metrics to admin, $code without a certificate"

log "apply $EXAMPLES"
batonctl apply -f "$EXAMPLES"
wait_for "the manifests in $EXAMPLES converge" converged
batonctl get all -A

log "load: $JOBS Jobs and $LOAD ReplicaSets of 3; SIGKILL the queue while they are worked on"
load_manifest 3 >"$tmp/load.yaml"
queue_id=$(compose ps -q queue)
started=$(docker inspect -f '{{.State.StartedAt}}' "$queue_id")
batonctl apply -f "$tmp/load.yaml" >"$tmp/apply.log" 2>&1 &
apply_pid=$!
# Kill as soon as a job pod runs: its key is then delayed in the queue, and
# the apply may still be writing the rest.
running_job_pods() {
  etcdctl get --prefix /registry/pods/e2e/batch- -w json |
    jq '[.kvs[]? | .value | @base64d | fromjson | select(.status.phase == "Running")] | length'
}
deadline=$((SECONDS + STEP_TIMEOUT))
until [ "$(running_job_pods)" -gt 0 ]; do
  [ "$SECONDS" -lt "$deadline" ] || fail "no job pod Running within ${STEP_TIMEOUT}s: $(tail -n 5 "$tmp/apply.log")"
  sleep 0.2
done
docker kill -s KILL "$queue_id" >/dev/null
unfinished=$(problems | wc -l)
log "SIGKILLed the queue: $unfinished objects not converged, $(count /registry/pods/e2e/load-) of $((LOAD * 3)) ReplicaSet pods created"
# Otherwise the crash proves nothing.
[ "$unfinished" -gt 0 ] || fail "the load had converged before the queue was killed"
wait "$apply_pid" || fail "batonctl apply of the load failed: $(tail -n 5 "$tmp/apply.log")"
# The restart policy may already have restarted it; start is a no-op then.
killed() { local s; s=$(docker inspect -f '{{.State.Running}} {{.State.StartedAt}}' "$queue_id"); echo "$s"; [ "$s" != "true $started" ]; }
wait_for "the queue is down" killed
compose start queue >/dev/null
wait_for "the queue is healthy again" stack_healthy 1
log "the restarted queue: $(compose logs --no-color queue | grep -i recover | tail -n 1)"
discover
wait_for "the load converges after the crash: no key lost" converged
[ "$(count /registry/pods/e2e/load-)" -eq $((LOAD * 3)) ] || fail "want $((LOAD * 3)) ReplicaSet pods, have $(count /registry/pods/e2e/load-)"

log "scale to 3 workers"
compose up -d --no-recreate --scale worker=3
wait_for "3 healthy workers" stack_healthy 3
load_manifest 2 >"$tmp/load.yaml"
batonctl apply -f "$tmp/load.yaml"
wait_for "the load scales down to 2 pods each with 3 workers" converged

log "cut the observer off the network for 10 s, changing objects meanwhile"
observer_id=$(compose ps -q observer)
network=$(docker inspect -f '{{range $k, $v := .NetworkSettings.Networks}}{{$k}}{{end}}' "$observer_id")
docker network disconnect "$network" "$observer_id"
load_manifest 4 >"$tmp/load.yaml"
batonctl apply -f "$tmp/load.yaml"
sleep 10 # the partition itself: the observer misses these changes live
docker network connect --alias observer "$network" "$observer_id"
log "observer reconnected to $network"
wait_for "the stack is healthy after the partition" stack_healthy 3
discover
wait_for "the changes made during the partition converge" converged
wait_for "batonctl status reports every service healthy" status
[ "$(count /registry/pods/e2e/load-)" -eq $((LOAD * 4)) ] || fail "want $((LOAD * 4)) ReplicaSet pods, have $(count /registry/pods/e2e/load-)"

log "delete the load: its pods go with it"
batonctl delete -f "$tmp/load.yaml"
no_load_pods() { local n; n=$(count /registry/pods/e2e/); echo "$n load pods left"; [ "$n" -eq 0 ]; }
wait_for "the load's pods are deleted" no_load_pods
wait_for "everything else is still converged" converged
batonctl queue stats

log "a one-line change to the queue's source, then make up again: only the queue is rebuilt and restarted"
# make up starts one worker, as docker-compose.yml says.
compose up -d --no-recreate --scale worker=1 >/dev/null 2>&1
wait_for "1 healthy worker" stack_healthy 1
ids() { for svc in etcd observer worker; do echo "$svc $(compose ps -q "$svc")"; done; }
others=$(ids)
queue_before=$(compose ps -q queue)
sed -i 's/log.Info("recovered", /log.Info("recovered (changed by the e2e test)", /' services/queue/internal/broker/broker.go
git diff --quiet -- services/queue/internal/broker/broker.go && fail "the one-line change did not apply"
up_start=$SECONDS
make up >"$tmp/up2.log" 2>&1 || { tail -n 40 "$tmp/up2.log" >&2; fail "the second make up failed"; }
took=$((SECONDS - up_start))
[ "$(compose ps -q queue)" != "$queue_before" ] || fail "the queue was not restarted with its change"
[ "$(ids)" = "$others" ] || fail "make up after a change to the queue restarted other services too: before $others, after $(ids)"
compose logs --no-color queue | grep -q "recovered (changed by the e2e test)" || fail "the restarted queue does not run the changed source"
log "the second make up, after a one-line change to the queue: ${took}s, the queue alone rebuilt and restarted"
wait_for "everything is still converged" converged

log "the replicated queue (make up-ha): three members, the leader SIGKILLed under load"
down_v "the single queue's stack"
export COMPOSE_FILE=docker-compose.yml:docker-compose.ha.yml
export BATON_PUBLISH_QUEUE_2_GRPC="" BATON_PUBLISH_QUEUE_2_HTTP="" BATON_PUBLISH_QUEUE_3_GRPC="" BATON_PUBLISH_QUEUE_3_HTTP=""
up_start=$SECONDS
make up-ha >"$tmp/up-ha.log" 2>&1 || { tail -n 40 "$tmp/up-ha.log" >&2; fail "make up-ha failed"; }
log "make up-ha: healthy in $((SECONDS - up_start))s"
discover
export BATON_BATONCTL_QUEUE_ADDR=$(compose port queue 7070),$(compose port queue-2 7070),$(compose port queue-3 7070)
leader() { # prints the member that leads, as one that answers sees it
  local l
  l=$(batonctl --timeout 5s queue members -o json | jq -r '.members[]? | select(.leader) | .name') || return 1
  echo "$l"
  [ -n "$l" ]
}
wait_for "a member leads" leader
batonctl queue members
lead=$(leader)
# The leader's address first: batonctl must get past a dead first member to
# the ones that answer, whichever member happened to win the election.
others_addrs=""
for m in queue queue-2 queue-3; do
  [ "$m" = "$lead" ] || others_addrs="$others_addrs,$(compose port "$m" 7070)"
done
export BATON_BATONCTL_QUEUE_ADDR=$(compose port "$lead" 7070)$others_addrs
load_manifest 3 >"$tmp/load.yaml"
batonctl apply -f "$tmp/load.yaml" >"$tmp/apply.log" 2>&1 &
apply_pid=$!
deadline=$((SECONDS + STEP_TIMEOUT))
until [ "$(running_job_pods)" -gt 0 ]; do
  [ "$SECONDS" -lt "$deadline" ] || fail "no job pod Running within ${STEP_TIMEOUT}s: $(tail -n 5 "$tmp/apply.log")"
  sleep 0.2
done
lead_id=$(compose ps -q "$lead")
started=$(docker inspect -f '{{.State.StartedAt}}' "$lead_id")
docker kill -s KILL "$lead_id" >/dev/null
unfinished=$(problems | wc -l)
log "SIGKILLed the leader, $lead: $unfinished objects not converged"
[ "$unfinished" -gt 0 ] || fail "the load had converged before the leader was killed"
another() { local l; l=$(leader) || return 1; echo "$l leads"; [ "$l" != "$lead" ]; }
wait_for "another member leads" another
wait "$apply_pid" || fail "batonctl apply of the load failed: $(tail -n 5 "$tmp/apply.log")"
queue_id=$lead_id
wait_for "the killed member is down" killed
compose start "$lead" >/dev/null
wait_for "the load converges after the leader's loss: no key lost" converged
[ "$(count /registry/pods/e2e/load-)" -eq $((LOAD * 3)) ] || fail "want $((LOAD * 3)) ReplicaSet pods, have $(count /registry/pods/e2e/load-)"
wait_for "the killed member is healthy again" healthy "$lead" 1
batonctl queue members

log "down -v: nothing of the stack is left"
down_v "the replicated queue's stack"
left=$(docker ps -aq --filter "label=com.docker.compose.project=$PROJECT")
[ -z "$left" ] || fail "containers left after down -v: $left"
vols=$(docker volume ls -q --filter "label=com.docker.compose.project=$PROJECT")
[ -z "$vols" ] || fail "volumes left after down -v: $vols"
nets=$(docker network ls -q --filter "label=com.docker.compose.project=$PROJECT")
[ -z "$nets" ] || fail "networks left after down -v: $nets"
