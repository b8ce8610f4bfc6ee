#!/usr/bin/env bash
# Starts the embedded stack (make run): etcd in-process plus the queue, the
# observer and a worker with every reference controller, on the default
# ports, with state under ./data. Extra arguments go to baton-dev (e.g.
# --data-dir, --log-level); BATON_DEV_* environment variables work too.
#
# The observer gets the experiments' rules file (the built-in rules plus the
# experiments' prefixes), so `bin/batonctl experiment ...` works against it.
# A --rules in the arguments (or BATON_DEV_RULES) replaces it: the later flag
# wins.
source "$(dirname "$0")/lib.sh"
cd "$ROOT"
rules=()
[ -n "${BATON_DEV_RULES+set}" ] || rules=(--rules services/experiment/rules.yaml)
exec "$ROOT/bin/baton-dev" "${rules[@]}" "$@"
