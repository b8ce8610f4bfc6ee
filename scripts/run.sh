#!/usr/bin/env bash
# Starts the embedded stack (make run): etcd in-process plus the queue, the
# observer and a worker with every reference controller, on the default
# ports, with state under ./data. Extra arguments go to baton-dev (e.g.
# --data-dir, --log-level); BATON_DEV_* environment variables work too.
# TLS=1 (make run TLS=1) passes --tls: mutual TLS on every link, with
# certificates made under the data directory, and baton-dev prints the
# batonctl flags that reach it.
#
# The observer gets the experiments' rules file (the built-in rules plus the
# experiments' prefixes), so `bin/batonctl experiment ...` works against it.
# A --rules in the arguments (or BATON_DEV_RULES) replaces it: the later flag
# wins.
source "$(dirname "$0")/lib.sh"
cd "$ROOT"
rules=()
[ -n "${BATON_DEV_RULES+set}" ] || rules=(--rules services/experiment/rules.yaml)
tls=()
[ "${TLS:-}" = 1 ] && tls=(--tls)
exec "$ROOT/bin/baton-dev" "${rules[@]}" "${tls[@]}" "$@"
