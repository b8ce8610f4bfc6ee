#!/usr/bin/env bash
# Starts the embedded stack (make run): etcd in-process plus the queue, the
# observer and a worker with every reference controller, on the default
# ports, with state under ./data. Extra arguments go to baton-dev (e.g.
# --data-dir, --log-level); BATON_DEV_* environment variables work too.
source "$(dirname "$0")/lib.sh"
cd "$ROOT"
exec "$ROOT/bin/baton-dev" "$@"
