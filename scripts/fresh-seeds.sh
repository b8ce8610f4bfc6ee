#!/usr/bin/env bash
# Runs the randomised suites with fresh seeds (BATON_FRESH_SEEDS=1), each
# logging the seed it drew and how to replay it. `make test` runs them on
# pinned seeds, so that a failure there is the code's and replays; this
# target is where new schedules are tried. Extra arguments go to go test.
source "$(dirname "$0")/lib.sh"
cd "$ROOT/services/queue"
export BATON_FRESH_SEEDS=1
log "fresh seeds: the workqueue's model, the replicated broker's random operations"
go test -race -count=1 -v -run 'TestModel$|TestReplicatedRandomOperations$' "$@" ./internal/workqueue/ ./internal/broker/ | grep -E '^(=== RUN|--- |ok|FAIL|PASS)|seed'
log "fresh seeds: the robustness suite's mix and power loss"
go test -count=1 -v -timeout 30m -run 'TestRobustness$|TestPowerLoss$' "$@" ./robustness/
