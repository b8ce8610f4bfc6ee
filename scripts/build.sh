#!/usr/bin/env bash
# Builds every binary statically (CGO_ENABLED=0) into bin/.
source "$(dirname "$0")/lib.sh"
cd "$ROOT"
mkdir -p bin
export CGO_ENABLED=0
for m in $(modules); do
  [ -d "$m/cmd" ] || continue
  for c in "$m"/cmd/*/; do
    name=$(basename "$c")
    log "build bin/$name"
    (cd "$m" && go build -trimpath -ldflags='-s -w' -o "$ROOT/bin/$name" "./cmd/$name")
  done
done
