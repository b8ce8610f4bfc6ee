#!/usr/bin/env bash
# Checks deploy/monitoring with the pinned promtool: the rules' syntax and
# lint (promtool check rules), then their unit tests (promtool test rules,
# deploy/monitoring/tests/*.yaml); then services/dev/stack's
# TestMonitoring* tests, which check the rules and the Grafana dashboard
# against the metrics of a running stack and the runbooks of
# docs/operations.md. MONITORING_GO_TEST=0 leaves those out (scripts/test.sh
# runs them with the rest of that module).
source "$(dirname "$0")/lib.sh"
"$ROOT/scripts/tools.sh" promtool
cd "$ROOT/deploy/monitoring"
log "promtool check rules"
"$TOOLS_BIN/promtool" check rules --lint=all --lint-fatal baton-rules.yaml
log "promtool test rules"
"$TOOLS_BIN/promtool" test rules tests/*.yaml
if [ "${MONITORING_GO_TEST:-1}" != 0 ]; then
  log "go test: the rules and the dashboard against a running stack"
  cd "$ROOT/services/dev" && go test -race -count=1 -run '^TestMonitoring' ./stack/
fi
