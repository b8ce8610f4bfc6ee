#!/usr/bin/env bash
# Runs the observer's tests against the oldest and the newest etcd minor
# releases Baton supports, as separate etcd processes: the rest of the tests
# embed the etcd that go.mod requires (v3.6), and only one etcd server
# package can be linked into a test binary. Each version is pinned by a
# module under test/etcdcompat and built from the Go module proxy, like the
# image's etcd. Without -race: what differs here is etcd's behaviour, and
# the same tests run under -race against the embedded etcd in the module
# loop of scripts/test.sh. Extra arguments go to go test, e.g. -run Compaction.
source "$(dirname "$0")/lib.sh"
cd "$ROOT"
failed=()
for dir in test/etcdcompat/v*; do
  ver=$(cd "$dir" && go list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3)
  bin="$ROOT/.tools/etcd-$ver/etcd"
  if [ ! -x "$bin" ]; then
    log "building etcd $ver"
    (cd "$dir" && CGO_ENABLED=0 go build -trimpath -o "$bin" go.etcd.io/etcd/server/v3)
  fi
  log "observer tests against etcd $ver"
  (cd services/observer && BATON_TEST_ETCD_BIN="$bin" go test -count=1 -timeout 10m "$@" ./service/) || failed+=("$ver")
done
if [ ${#failed[@]} -gt 0 ]; then
  echo "FAILED against etcd ${failed[*]}" >&2
  exit 1
fi
