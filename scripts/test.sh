#!/usr/bin/env bash
# Runs every module's tests under the race detector. Fuzz targets run their
# seed corpora as ordinary tests. Files the tests keep (screenshots) land in
# test-output/<module>/_artifacts. Extra arguments go to go test.
source "$(dirname "$0")/lib.sh"
cd "$ROOT"
"$ROOT/scripts/build.sh" >/dev/null   # crash tests drive the real binaries in bin/

# The dashboard test drives a real browser: Debian's chromium.
if ! command -v chromium >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  log "installing chromium for the dashboard test"
  apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi

# The Python worker's test (services/dev/stack) runs examples/python-worker
# on Debian's python3 and its gRPC packages (grpc_tools imports pkg_resources).
if ! /usr/bin/python3 -c 'import grpc, grpc_tools.protoc, google.protobuf' >/dev/null 2>&1 && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  log "installing python3-grpcio and python3-grpc-tools for the Python worker's test"
  apt-get update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
    python3 python3-grpcio python3-grpc-tools python3-protobuf python3-pkg-resources >/dev/null
fi

# Every module runs even when one fails, so one run shows every failure.
failed=()
for m in $(modules); do
  log "go test -race: $m"
  out="$ROOT/test-output/$m"
  mkdir -p "$out"
  (cd "$m" && go test -race -count=1 -timeout 20m -artifacts -outputdir "$out" "$@" ./...) || failed+=("$m")
done
# The observer against other etcd releases than the embedded one.
"$ROOT/scripts/etcd-compat.sh" || failed+=("services/observer (etcd compatibility)")
# The Prometheus rules: promtool check rules and their unit tests (the Go
# tests of deploy/monitoring ran above, in services/dev).
MONITORING_GO_TEST=0 "$ROOT/scripts/monitoring.sh" || failed+=("deploy/monitoring (promtool)")
if [ ${#failed[@]} -gt 0 ]; then
  echo "FAILED modules: ${failed[*]}" >&2
  exit 1
fi
