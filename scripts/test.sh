#!/usr/bin/env bash
# Runs every module's tests under the race detector. Fuzz targets run their
# seed corpora as ordinary tests. Extra arguments go to go test.
source "$(dirname "$0")/lib.sh"
cd "$ROOT"
"$ROOT/scripts/build.sh" >/dev/null   # crash tests drive the real binaries in bin/
for m in $(modules); do
  log "go test -race: $m"
  (cd "$m" && go test -race -count=1 -timeout 20m "$@" ./...)
done
