#!/usr/bin/env bash
# Runs the benchmarks (bench/cmd/batonbench) against bin/baton-queue, prints
# the table, rewrites docs/benchmarks.md and, with BENCH_OUT=file.json, writes
# the records as JSON. `make bench` builds bin/ first. Extra arguments go to
# batonbench, e.g. scripts/bench.sh -quick for a smoke run.
source "$(dirname "$0")/lib.sh"
cd "$ROOT/bench"
if [ -n "${BENCH_OUT:-}" ]; then
  case "$BENCH_OUT" in /*) ;; *) BENCH_OUT="$ROOT/$BENCH_OUT" ;; esac
  export BENCH_OUT
fi
# The queue's data goes under bench/out (git-ignored), on the repository's
# disk: a tmpfs /tmp would make every fsync free.
mkdir -p "$ROOT/bench/out"
# The report names the commit by its subject and date, not its hash: a
# hash the history no longer holds after a rebase would be a dead
# reference (make verify refuses a doc naming one).
rev=unknown
if subject=$(git -C "$ROOT" log -1 --format='%s' 2>/dev/null); then
  rev="the commit \"${subject//|/\\|}\" of $(git -C "$ROOT" log -1 --format='%as')"
  if [ -n "$(git -C "$ROOT" status --porcelain --untracked-files=no 2>/dev/null)" ]; then
    rev="$rev, with uncommitted changes"
  fi
fi
log "batonbench $* (baton-queue from $rev)"
go run ./cmd/batonbench -bin "$ROOT/bin/baton-queue" -dir "$ROOT/bench/out" -doc "$ROOT/docs/benchmarks.md" -plot "$ROOT/docs/benchmarks-cycle.png" -rev "$rev" "$@"
