#!/usr/bin/env bash
# Runs the replicated queue's robustness suite (services/queue/robustness):
# three real baton-queue members under recording clients and a seeded
# schedule of faults, the history checked for linearizability (porcupine),
# lost or duplicated keys and the queue's invariants; then the power loss
# of all three (in process), the pinned scenarios and the negative
# controls. The short mix by default; ROBUSTNESS_DURATION=30m for a long
# run, ROBUSTNESS_SEED=N to replay a run's schedule, ROBUSTNESS_FAULTS=a,b
# to draw from some fault classes only. A failing run leaves its history
# and visualisation under test-output/robustness/. Partitions need root
# and iptables (left out otherwise). Extra arguments go to go test.
source "$(dirname "$0")/lib.sh"
cd "$ROOT/services/queue"
duration=${ROBUSTNESS_DURATION:-60s}
# go test's timeout: the run's length, its checks and the negative
# control, with room (an hour's length for a duration spelled otherwise).
seconds() {
  case $1 in
    *[0-9]h) echo $(( ${1%h} * 3600 )) ;;
    *[0-9]m) echo $(( ${1%m} * 60 )) ;;
    *[0-9]s) echo "${1%s}" ;;
    *) echo 3600 ;;
  esac
}
n=$(seconds "$duration")
[[ $n =~ ^[0-9]+$ ]] || n=3600
timeout=$(( n * 2 + 900 ))s
# A fresh seed unless ROBUSTNESS_SEED names one: make test runs the suite
# on a pinned seed, and this target is where new schedules are tried.
export BATON_FRESH_SEEDS=1
log "robustness suite: ${duration} of faults${ROBUSTNESS_SEED:+, seed $ROBUSTNESS_SEED}"
ROBUSTNESS_DURATION="$duration" go test -count=1 -v -timeout "$timeout" -run 'TestRobustness$|TestNegativeControl|TestPowerLoss|TestScenario' "$@" ./robustness/
