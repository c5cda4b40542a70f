#!/usr/bin/env bash
# What a new user does, timed: a fresh clone of this checkout's HEAD into a temporary folder, `make demo`, then
# `make test`; prints each step's exit code and wall time and pytest's closing line.
#
#   scripts/fresh-check.sh [--cold] [--keep] [--skip-demo] [REPO]
#
#   --cold       first make the engine as a new machine's: remove every envkit image (the bases too) and the
#                engine's build cache (the classic builder's dangling layers and BuildKit's records). It removes
#                what other work on this engine may be using: never run it beside another suite.
#   --keep       keep the clone (its path is printed); otherwise it is removed at the end.
#   --skip-demo  only `make test` (the suite must pass without `make demo` before it, too).
#   REPO         what to clone (default: this checkout; its committed HEAD, not the working tree).
#
# Exit: 0 when every step passed, 1 when one failed, 2 on a usage error. The engine itself is the machine's
# (`make engine` starts Debian's dockerd when none answers); an engine of its own, with an empty data root, is what
# tests/integration/second_engine.py starts for the tests that need one, not for a whole suite: the suite's
# registry, Slurm and second-engine tests expect the machine's engine and network.
set -uo pipefail

cold=0 keep=0 demo=1 repo=""
for arg in "$@"; do
  case "$arg" in
    --cold) cold=1 ;;
    --keep) keep=1 ;;
    --skip-demo) demo=0 ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    -*) echo "fresh-check: unknown option $arg (see --help)" >&2; exit 2 ;;
    *) repo="$arg" ;;
  esac
done
repo=${repo:-$(git -C "$(dirname "$0")/.." rev-parse --show-toplevel)}

say() { printf 'fresh-check: %s\n' "$*" >&2; }

if [ "$cold" = 1 ]; then
  say "cold engine: removing envkit images and the build cache"
  docker ps -aq --filter label=io.envkit.container | xargs -r docker rm -f >/dev/null 2>&1
  { docker images -q --filter label=io.envkit.team; docker images -q --filter label=io.envkit.stage;
    docker images -q 'envkit-base/*'; } | sort -u | xargs -r docker rmi -f >/dev/null 2>&1
  docker image prune -f >/dev/null 2>&1
  DOCKER_BUILDKIT=1 docker builder prune -af >/dev/null 2>&1
  say "engine now holds: $(docker images -q | wc -l) images"
fi

# the engine's data root on disk, before and after: a run that removed all it made ends where it began, unless
# the engine lost space (Docker 20.10 lost a layer's to two BuildKit builds at once: test_buildkit_turns.py)
root=$(docker info -f '{{.DockerRootDir}}' 2>/dev/null)
on_disk() { [ -r "$root" ] && du -sm "$root" 2>/dev/null | cut -f1 || echo "?"; }
root_before=$(on_disk)

work=$(mktemp -d /var/tmp/envkit-fresh-XXXXXX)
cleanup() { [ "$keep" = 1 ] && say "clone kept at $work/envkit" || rm -rf "$work"; }
trap cleanup EXIT
git clone -q "$repo" "$work/envkit" || { say "cannot clone $repo"; exit 1; }
cd "$work/envkit" || exit 1
say "clone of $(git rev-parse --short HEAD) in $work/envkit"

results=()
failed=0
step() {  # step NAME COMMAND...: run, time, record
  local name=$1; shift
  local start end rc
  start=$(date +%s)
  "$@" > "$work/$name.log" 2>&1
  rc=$?
  end=$(date +%s)
  results+=("$(printf '%-5s rc %-3s %5.1f min' "$name" "$rc" "$(awk "BEGIN {print ($end - $start) / 60}")")")
  [ "$rc" = 0 ] || failed=1
  return "$rc"
}

[ "$demo" = 1 ] && step demo make demo
step test make test
closing=$(grep -E '^(=+ )?[0-9]+ (passed|failed)' "$work/test.log" | tail -n 1)

printf '%s\n' "${results[@]}"
[ -n "$closing" ] && echo "pytest: $closing"
if [ "$failed" = 1 ]; then
  say "a step failed; the end of its log:"
  for name in demo test; do
    [ -f "$work/$name.log" ] && tail -n 30 "$work/$name.log" >&2
  done
  keep=1
fi
echo "engine after: $(docker images --format '{{.Repository}}:{{.Tag}}' | sort | tr '\n' ' ')"
echo "engine data root ($root): ${root_before} MB before, $(on_disk) MB after"
exit "$failed"
