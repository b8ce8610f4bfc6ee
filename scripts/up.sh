#!/usr/bin/env bash
# make up: builds every image from this checkout (deploy/docker/Dockerfile,
# through docker-compose.yml's build sections) and starts the stack, waits
# until every service is healthy, builds bin/batonctl and bin/baton-experiment
# (which `batonctl experiment` runs), and prints the commands to try. Beyond
# `docker compose up -d --build` it provides what this machine may lack: the
# buildx plugin BuildKit needs (scripts/buildx.sh) and the build stage's Go
# image where no registry answers (scripts/base-image.sh). Extra arguments go
# to `compose up`. The stack runs mutual TLS with the certificates its certs
# service writes into ./certs; the message at the end gives the batonctl
# flags that reach it as admin.
source "$(dirname "$0")/lib.sh"
cd "$ROOT"
TIMEOUT=${BATON_UP_TIMEOUT:-300} # seconds to wait for health once started

if ! docker info >/dev/null 2>&1; then
  echo "up: no Docker engine answers ('docker info' fails): start one, or use 'make run' (no Docker needed)" >&2
  exit 1
fi
"$ROOT/scripts/buildx.sh"
"$ROOT/scripts/base-image.sh"
log "building the images and starting the stack (the first build downloads modules and compiles everything: a few minutes; later ones take seconds)"
start=$SECONDS
if ! compose up -d --build "$@"; then
  echo "up: '$(compose_name) up' failed (above). If a port is taken, move it: BATON_PUBLISH_QUEUE_GRPC=17070 make up (BATON_PUBLISH_* are in docker-compose.yml; an empty value picks a free port)" >&2
  exit 1
fi
log "built and started in $((SECONDS - start))s; waiting until every service is healthy"

unhealthy() { # prints the services not yet healthy; fails if there are any
  local bad=() id st svc
  # Every long-running service of the compose files in use (the
  # certs service runs once): docker-compose.ha.yml adds queue-2, queue-3.
  for svc in $(compose config --services | grep -vx certs); do
    ids=$(compose ps -q "$svc")
    [ -n "$ids" ] || { bad+=("$svc (no container)"); continue; }
    for id in $ids; do
      st=$(docker inspect -f '{{.State.Status}}/{{if .State.Health}}{{.State.Health.Status}}{{end}}' "$id")
      [ "$st" = running/healthy ] || bad+=("$svc ($st)")
    done
  done
  [ ${#bad[@]} -eq 0 ] && return 0
  echo "${bad[*]}"
  return 1
}
deadline=$((SECONDS + TIMEOUT))
while ! out=$(unhealthy); do
  if [ "$SECONDS" -ge "$deadline" ]; then
    echo "up: not healthy within ${TIMEOUT}s: $out" >&2
    compose ps >&2
    compose logs --no-color --tail=20 >&2
    exit 1
  fi
  sleep 1
done

log "building bin/batonctl and bin/baton-experiment"
mkdir -p bin
(cd services/batonctl && CGO_ENABLED=0 go build -trimpath -o "$ROOT/bin/batonctl" ./cmd/batonctl)
(cd services/experiment && CGO_ENABLED=0 go build -trimpath -o "$ROOT/bin/baton-experiment" ./cmd/baton-experiment)

port() { compose port "$1" "$2" 2>/dev/null | sed 's/^0\.0\.0\.0:/127.0.0.1:/'; }
queue=$(port queue 7070) observer=$(port observer 7071) etcd=$(port etcd 2379) dash=$(port queue 9090) ohttp=$(port observer 9091)
# As admin, to the services and to etcd (whose client-certificate check
# accepts any certificate of the CA).
flags=" --cacert $ROOT/certs/ca.crt --cert $ROOT/certs/admin.crt --key $ROOT/certs/admin.key"
flags+=" --etcd-endpoints https://$etcd --etcd-cacert $ROOT/certs/ca.crt --etcd-cert $ROOT/certs/admin.crt --etcd-key $ROOT/certs/admin.key"
status=""
[ "$queue" = 127.0.0.1:7070 ] || flags+=" --queue-addr $queue"
[ "$observer" = 127.0.0.1:7071 ] || flags+=" --observer-addr $observer"
[ "$dash" = 127.0.0.1:9090 ] || status+=" --queue-http-addr $dash"
[ "$ohttp" = 127.0.0.1:9091 ] || status+=" --observer-http-addr $ohttp"
cat <<MSG

Baton is up (every service healthy), mutual TLS everywhere, certificates in $ROOT/certs:
  etcd      https://$etcd
  queue     $queue   dashboard https://$dash/ (as viewer or admin: certs/admin.crt)
  observer  $observer
  workers   $(compose ps -q worker | wc -l) (scale with: $(compose_name) up -d --scale worker=3)

batonctl reaches it (as admin) with these flags:

  alias batonctl='$ROOT/bin/batonctl$flags'

Try:
  batonctl apply -f examples/deployment.yaml
  batonctl get deploy,rs,pods
  batonctl status$status
  make down        # stops the stack and removes its volumes (keeps the images)
MSG
