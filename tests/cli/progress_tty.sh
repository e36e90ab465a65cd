#!/usr/bin/env bash
# alpa-sim shows search progress on stderr only when stderr is a terminal, and not with
# --quiet (issue 17). Runs the real binary under a pseudo-terminal (util-linux `script`, part
# of every Debian system) on a small search scenario.
# Usage: progress_tty.sh ALPA_SIM SCENARIO WORK_DIR     (CTest cli/progress_tty)
set -euo pipefail
alpa_sim="$1" scenario="$2" work="$3"
command -v script >/dev/null || { echo "progress_tty: util-linux 'script' missing"; exit 1; }
rm -rf "$work" && mkdir -p "$work"
# Under a terminal: the progress line names a (microbatch size, recompute) point and a baseline.
script -qec "'$alpa_sim' '$scenario' >'$work/stdout.txt'" "$work/tty.txt" >/dev/null
grep -q 'alpa-sim: searching: point 1: microbatch [0-9]*, recompute none (' "$work/tty.txt" ||
  { echo "no point progress on the terminal:"; cat -v "$work/tty.txt"; exit 1; }
grep -q 'alpa-sim: searching: baseline 1 of [0-9]*: ' "$work/tty.txt" ||
  { echo "no baseline progress on the terminal:"; cat -v "$work/tty.txt"; exit 1; }
grep -q 'alpa-sim: searching' "$work/stdout.txt" &&
  { echo "progress leaked into stdout"; exit 1; }
# --quiet on a terminal: nothing at all.
script -qec "'$alpa_sim' --quiet '$scenario'" "$work/quiet.txt" >/dev/null
if [ -s "$work/quiet.txt" ] && grep -q 'searching' "$work/quiet.txt"; then
  echo "--quiet still shows progress:"; cat -v "$work/quiet.txt"; exit 1
fi
# Not a terminal (a pipe): no progress on stderr.
"$alpa_sim" "$scenario" >/dev/null 2>"$work/stderr.txt"
if [ -s "$work/stderr.txt" ]; then echo "stderr is not empty in a pipe:"; cat "$work/stderr.txt"; exit 1; fi
echo "progress_tty: terminal shows progress, --quiet and pipes do not"
