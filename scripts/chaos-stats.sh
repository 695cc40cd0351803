#!/usr/bin/env bash
# Prints the restart and snapshot counts of chaos reports (verdict.json) and
# fails when, over all of them, members never restarted, never took a
# snapshot or never installed one: a suite that missed those paths proves
# nothing about crash safety. Reports of runs with a garbage nemesis
# (garbage.json) also show the connections it opened and the forged raft
# messages it sent; "-" where the run had none.
# Usage: scripts/chaos-stats.sh REPORT_DIR...
set -euo pipefail
stat() { grep -o "\"$1\": *[0-9]*" "$2" | head -1 | grep -o '[0-9]*$'; }
total_r=0 total_s=0 total_i=0 total_g=0 total_f=0
printf '%-28s %9s %10s %10s %8s %7s\n' report restarts snapshots installed garbage forged
for dir in "$@"; do
  v="$dir/verdict.json"
  r=$(stat restarts "$v") s=$(stat snapshots "$v") i=$(stat snapshots_installed "$v")
  g=- f=-
  if [ -f "$dir/garbage.json" ]; then
    g=$(stat conns "$dir/garbage.json") f=$(stat forged_raft_messages "$dir/garbage.json")
    total_g=$((total_g + g)) total_f=$((total_f + f))
  fi
  printf '%-28s %9d %10d %10d %8s %7s\n' "$dir" "$r" "$s" "$i" "$g" "$f"
  total_r=$((total_r + r)) total_s=$((total_s + s)) total_i=$((total_i + i))
done
printf '%-28s %9d %10d %10d %8d %7d\n' total "$total_r" "$total_s" "$total_i" "$total_g" "$total_f"
if [ "$total_r" -eq 0 ] || [ "$total_s" -eq 0 ] || [ "$total_i" -eq 0 ]; then
  echo "chaos-stats: the runs never restarted a member, took a snapshot or installed one" >&2
  exit 1
fi
