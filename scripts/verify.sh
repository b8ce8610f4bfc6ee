#!/usr/bin/env bash
# Fails on anything a reviewer should never have to point out: stale
# generated code or go.work, an untidy go.mod, buf lint, go vet, staticcheck
# or gofmt, an import across the architecture's lines, a doc naming a commit
# the history does not hold.
source "$(dirname "$0")/lib.sh"
cd "$ROOT"
fail=0

log "generated code is current"
"$ROOT/scripts/generate.sh"
if ! git diff --quiet -- proto || [ -n "$(git ls-files --others --exclude-standard proto)" ]; then
  git status --short proto >&2
  echo "verify: generated code is stale: run 'make generate' and commit" >&2
  fail=1
fi

log "the wire contract has no breaking change since proto/BREAKING_BASELINE"
# Outside programs call baton.queue.v1 and baton.observer.v1 by name and
# number: a rename or renumbering must fail here, not there. The baseline is
# the commit of the contract as it last landed (no release is tagged yet);
# move it only with a change meant to break, said so in its commit.
baseline=$(tr -d '[:space:]' <proto/BREAKING_BASELINE)
if ! (cd proto && "$TOOLS_BIN/buf" breaking --against "$ROOT/.git#ref=$baseline,subdir=proto"); then
  echo "verify: proto/ breaks the contract of $baseline (buf breaking, FILE rules)" >&2
  fail=1
fi

log "import rules"
"$ROOT/scripts/check-imports.sh" || fail=1

log "docs name no commit the history does not hold"
"$ROOT/scripts/check-doc-commits.sh" || fail=1

log "go.work is current"
"$ROOT/scripts/update_go_workspace.sh"
if ! git diff --quiet -- go.work; then
  echo "verify: go.work is stale: run scripts/update_go_workspace.sh and commit" >&2
  fail=1
fi

log "gofmt"
unformatted=$(git ls-files -co --exclude-standard '*.go' | xargs -r gofmt -l)
if [ -n "$unformatted" ]; then
  echo "verify: gofmt would change:" >&2; echo "$unformatted" >&2
  fail=1
fi

for m in $(modules); do
  log "go mod tidy, go vet, staticcheck: $m"
  if ! (cd "$m" && go mod tidy -diff >/dev/null); then
    echo "verify: $m/go.mod is not tidy: run 'go mod tidy' in $m" >&2
    fail=1
  fi
  (cd "$m" && go vet ./...) || fail=1
  # staticcheck's default checks, clean; a finding kept on purpose carries
  # a //lint:ignore with its reason.
  (cd "$m" && "$TOOLS_BIN/staticcheck" ./...) || fail=1
done
exit $fail
