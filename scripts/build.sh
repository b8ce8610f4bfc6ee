#!/usr/bin/env bash
# Builds the binaries statically (CGO_ENABLED=0) into bin/: every command of
# every module, or only those named (e.g. `scripts/build.sh baton-dev
# batonctl`, what `make run` needs).
source "$(dirname "$0")/lib.sh"
cd "$ROOT"
mkdir -p bin
export CGO_ENABLED=0
want=("$@")
found=()
for m in $(modules); do
  [ -d "$m/cmd" ] || continue
  for c in "$m"/cmd/*/; do
    name=$(basename "$c")
    if [ ${#want[@]} -gt 0 ] && ! printf '%s\n' "${want[@]}" | grep -qx "$name"; then continue; fi
    found+=("$name")
    if [ -x "bin/$name" ] || [ -n "${told:-}" ]; then
      log "build bin/$name"
    else
      # A first build on a fresh machine downloads the modules and compiles
      # etcd, gRPC and Baton: say so once rather than sit silent for minutes.
      log "build bin/$name (on a fresh machine the first build downloads and compiles every dependency: a few minutes on 2 cores; later builds take seconds)"
      told=1
    fi
    (cd "$m" && go build -trimpath -ldflags='-s -w' -o "$ROOT/bin/$name" "./cmd/$name")
  done
done
for w in "${want[@]}"; do
  printf '%s\n' "${found[@]}" | grep -qx "$w" || { echo "build.sh: no command $w" >&2; exit 2; }
done
