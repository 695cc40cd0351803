#!/usr/bin/env bash
# Runs raftlock chaos once per planted bug and seed until the checker catches
# the bug, and prints: bug, caught, seeds tried, seconds to first detection.
# Usage: scripts/mutation.sh [BIN] (env: SEEDS="1 2 3", TIME=15s, BUGS="...")
set -u
bin=${1:-bin/raftlock}
seeds=${SEEDS:-"1 2 3"}
time=${TIME:-15s}
bugs=${BUGS:-"ack-before-commit token-at-propose release-skips-owner-check follower-local-expire stale-read no-term-barrier expire-ignores-token"}
out=${OUT:-mutation-out}
mkdir -p "$out"
printf '%-28s %-7s %-12s %s\n' bug caught seeds_tried seconds_to_detection
missed=0
for bug in $bugs; do
  caught=no tried=0 secs=-
  start=$(date +%s.%N)
  for seed in $seeds; do
    tried=$((tried + 1))
    "$bin" chaos --time "$time" --seed "$seed" --unsafe-bug "$bug" --out "$out/$bug-seed-$seed" >"$out/$bug-seed-$seed.txt" 2>&1
    rc=$?
    if [ $rc -eq 1 ]; then
      caught=yes
      secs=$(awk "BEGIN{printf \"%.1f\", $(date +%s.%N) - $start}")
      break
    elif [ $rc -eq 3 ]; then
      echo "harness failure for $bug seed $seed: see $out/$bug-seed-$seed.txt" >&2
    fi
  done
  [ "$caught" = yes ] || missed=$((missed + 1))
  printf '%-28s %-7s %-12s %s\n' "$bug" "$caught" "$tried" "$secs"
done
[ -n "${ALLOW_MISSED:-}" ] || [ $missed -eq 0 ]
