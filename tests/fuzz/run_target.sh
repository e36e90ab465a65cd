#!/usr/bin/env bash
# CTest label "fuzz": runs one libFuzzer target of build-fuzz/ (tools/fuzz.sh builds it;
# tools/test.sh does when clang is installed) briefly on a copy of its seed corpus. Exit 77
# (skipped) when the target was not built.
#   run_target.sh BINARY CORPUS_DIR WORK_DIR RUNS SECONDS
set -euo pipefail
bin=$1 corpus=$2 work=$3 runs=$4 seconds=$5
if [ ! -x "$bin" ]; then
  echo "SKIP: $bin not built (needs clang: tools/fuzz.sh 0 builds it)"
  exit 77
fi
rm -rf "$work" && mkdir -p "$work/new"
cd "$work"
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
  "$bin" -runs="$runs" -max_total_time="$seconds" -max_len=65536 -rss_limit_mb=2048 \
  -timeout=30 -artifact_prefix="$work/crash-" "$work/new" "$corpus" 2>&1 | tail -n 8
