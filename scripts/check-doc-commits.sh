#!/usr/bin/env bash
# Fails when a doc names a commit the history does not hold (make verify
# runs it). Docs cite tests and seeds, which stay true; a commit hash
# stops meaning anything once a rebase or a rewrite drops it. Every hex
# token of 7 to 40 characters with a digit and a letter a-f in README.md,
# CONTRIBUTING.md, CHANGELOG.md, docs/*.md and the bench's background.md
# (appended to docs/benchmarks.md) must be a commit of this history (an
# ancestor of HEAD), or be listed in scripts/doc-hex-allowlist as a known
# non-commit (a uid, an example id), with the reason. UUIDs, and the
# commits of other repositories that Go pseudo-versions name
# (v0.0.0-20260817212433-ac3dfec99bb1), are left alone.
#
#   scripts/check-doc-commits.sh [FILE...]   (paths from the repository's root; default: those docs)
source "$(dirname "$0")/lib.sh"
cd "$ROOT"
allowlist=scripts/doc-hex-allowlist

if [ $# -gt 0 ]; then
  files=("$@")
  for f in "${files[@]}"; do
    [ -f "$f" ] || { echo "check-doc-commits: no file $f" >&2; exit 2; }
  done
else
  files=()
  for f in README.md CONTRIBUTING.md CHANGELOG.md docs/*.md bench/cmd/batonbench/background.md; do
    [ -f "$f" ] && files+=("$f")
  done
fi

if [ "$(git rev-parse --is-shallow-repository)" = true ]; then
  echo "check-doc-commits: the history is shallow, so a commit a doc names may be missing from it: fetch it whole (git fetch --unshallow)" >&2
  exit 1
fi

declare -A allowed used
while read -r tok _; do
  case "$tok" in ''|'#'*) continue ;; esac
  allowed[$tok]=1
done <"$allowlist"

# file:line:token for every hex token, UUIDs and pseudo-versions blanked
# out first.
tokens=$(perl -ne '
  s/(?<![0-9A-Za-z_])[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}(?![0-9A-Za-z_])/ /g;
  s/-[0-9]{14}-[0-9a-f]{12}(?![0-9A-Za-z_])/ /g;
  while (/(?<![0-9A-Za-z_])([0-9a-f]{7,40})(?![0-9A-Za-z_])/g) {
    my $t = $1;
    print "$ARGV:$.:$t\n" if $t =~ /[0-9]/ && $t =~ /[a-f]/;
  }
  close ARGV if eof;' "${files[@]}")

fail=0
declare -A known
while IFS=: read -r file line tok; do
  [ -n "$tok" ] || continue
  if [ -n "${allowed[$tok]:-}" ]; then
    used[$tok]=1
    continue
  fi
  if [ -z "${known[$tok]:-}" ]; then
    known[$tok]=no
    if git cat-file -e "$tok^{commit}" 2>/dev/null && git merge-base --is-ancestor "$tok" HEAD 2>/dev/null; then
      known[$tok]=yes
    fi
  fi
  if [ "${known[$tok]}" = no ]; then
    echo "$file:$line: names $tok, which is no commit of this history. Docs cite tests and seeds, not commits: name the test (or the seed) that holds what it says instead. If $tok is not a commit (a uid, an example id), add it to $allowlist with a comment saying what it is." >&2
    fail=1
  fi
done <<<"$tokens"

# The allowlist stays small: a string no doc holds any more leaves it.
if [ $# -eq 0 ]; then
  for tok in "${!allowed[@]}"; do
    if [ -z "${used[$tok]:-}" ]; then
      echo "$allowlist: $tok is in no doc any more: remove its line" >&2
      fail=1
    fi
  done
fi
exit $fail
