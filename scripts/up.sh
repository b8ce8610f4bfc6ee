#!/usr/bin/env bash
# make up: builds every image from this checkout (deploy/docker/Dockerfile,
# through docker-compose.yml's build sections) and starts the stack, waits
# until every service is healthy, builds bin/batonctl and bin/baton-experiment
# (which `batonctl experiment` runs), and prints the commands to try. Beyond
# `docker compose up -d --build` it provides what this machine may lack: the
# buildx plugin BuildKit needs (scripts/buildx.sh) and the build stage's Go
# image where no registry answers (scripts/base-image.sh). Extra arguments go
# to `compose up`. The stack runs mutual TLS with the certificates its certs
# service writes into ./certs; the message at the end (scripts/endpoints.sh,
# which prints it again whenever run) gives every queue member's address
# and dashboard and the batonctl flags that reach it as admin.
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

printf '\nBaton is up: every service is healthy.\n'
"$ROOT/scripts/endpoints.sh"
