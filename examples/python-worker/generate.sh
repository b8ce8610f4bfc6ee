#!/usr/bin/env bash
# Generates the Python stubs of baton.queue.v1 and baton.observer.v1 from
# proto/, from scratch, into OUT (default: gen/ beside this script, which git
# ignores). See README.md for why they are generated here and not checked in.
#
#   examples/python-worker/generate.sh [OUT]
#
# Needs Go and a python3 with Debian's python3-grpcio, python3-grpc-tools and
# python3-protobuf (PYTHON chooses the interpreter; by default the first of
# python3 and /usr/bin/python3 that has them).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
out=${1:-$here/gen}

has_tools() { "$1" -c 'import grpc, grpc_tools.protoc, google.protobuf' >/dev/null 2>&1; }
if [ -n "${PYTHON:-}" ]; then
  has_tools "$PYTHON" || { echo "generate.sh: $PYTHON lacks grpcio, grpcio-tools or protobuf" >&2; exit 1; }
  py=$PYTHON
else
  py=
  for p in python3 /usr/bin/python3; do
    if command -v "$p" >/dev/null && has_tools "$p"; then py=$p; break; fi
  done
  if [ -z "$py" ]; then
    echo "generate.sh: no python3 with grpcio, grpcio-tools and protobuf;" \
      "install them: apt-get install python3-grpcio python3-grpc-tools python3-protobuf python3-pkg-resources" >&2
    exit 1
  fi
fi

rm -rf "$out"
mkdir -p "$out"
# 1. proto/ as proto3 descriptors, from the generated Go code (proto3/main.go
#    says why and how). It builds with the proto module's own dependencies.
(cd "$root/proto" && GOWORK=off go run "$here/proto3/main.go" -o "$out/baton.binpb")
# 2. Python from those descriptors. `python3 -m grpc_tools.protoc` would add
#    -I for its bundled well-known types, which protoc refuses beside
#    --descriptor_set_in; the set carries them itself.
"$py" - "$out" <<'PY'
import sys
from grpc_tools import protoc
out = sys.argv[1]
sys.exit(protoc.main([
    "protoc", f"--descriptor_set_in={out}/baton.binpb",
    f"--python_out={out}", f"--grpc_python_out={out}",
    "baton/queue/v1/queue.proto", "baton/observer/v1/observer.proto",
]))
PY
echo "$out"
