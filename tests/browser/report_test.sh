#!/usr/bin/env bash
# Opens an alpa-sim HTML report in headless Chromium and checks that every chart rendered
# (the page sets data-report-ready and data-charts-rendered = data-charts-expected on <body>,
# and every chart container holds an <svg>) and that no error reached the console; saves a
# screenshot. Exit 77 (CTest: skipped) when Chromium is not installed.
#
# usage: report_test.sh ALPA_SIM SCENARIO WORK_DIR [SCREENSHOT.png [COMMAND]]
# COMMAND is "sweep" (default) or "capacity" (the report of `alpa-sim capacity`, whose table
# must also show the columns a planner asks for: MFU, tokens/s per GPU, goodput, the band).
set -euo pipefail
alpa_sim=$1 scenario=$2 work=$3 shot=${4:-$3/report.png} command=${5:-sweep}

browser=""
for b in chromium chromium-browser google-chrome; do
  if command -v "$b" > /dev/null 2>&1; then browser=$(command -v "$b"); break; fi
done
if [ -z "$browser" ]; then
  echo "SKIP: no chromium on PATH (tools/test.sh installs Debian's chromium; apt-get install chromium)"
  exit 77
fi

rm -rf "$work" && mkdir -p "$work"
"$alpa_sim" "$command" "$scenario" --threads 2 -q --report "$work/report.html" --markdown "$work/report.md"

flags=(--headless --no-sandbox --disable-gpu --disable-quic --no-first-run
       --disable-background-networking --disable-component-update --disable-sync
       --disable-extensions --disable-dev-shm-usage --hide-scrollbars
       --enable-logging=stderr --v=0 --virtual-time-budget=30000)
url="file://$(cd "$work" && pwd)/report.html"

# 1. The DOM after the scripts ran (virtual time lets vega-embed's promises settle).
"$browser" "${flags[@]}" --user-data-dir="$work/profile-dom" --dump-dom "$url" \
  > "$work/dom.html" 2> "$work/console.log" || { cat "$work/console.log"; exit 1; }

fail=0
check() { if ! eval "$2"; then echo "FAIL: $1"; fail=1; else echo "ok: $1"; fi; }
body=$(grep -o '<body data-charts-expected[^>]*>' "$work/dom.html" | head -1)
expected=$(sed -n 's/.*data-charts-expected="\([0-9]*\)".*/\1/p' <<< "$body")
rendered=$(sed -n 's/.*data-charts-rendered="\([0-9]*\)".*/\1/p' <<< "$body")
errors=$(sed -n 's/.*data-console-errors="\([0-9]*\)".*/\1/p' <<< "$body")
check "the page finished rendering (data-report-ready)" '[[ "$body" == *data-report-ready=\"true\"* ]]'
check "charts expected: ${expected:-?}" '[ -n "$expected" ] && [ "$expected" -ge 1 ]'
check "charts rendered: ${rendered:-none} of ${expected:-?}" '[ "${rendered:-x}" = "$expected" ]'
check "no error collected by the page (data-console-errors=${errors:-?})" '[ "${errors:-x}" = 0 ]'
# Every chart container <div class="chart..." id="chart-..."> holds an <svg>.
containers=$(grep -o 'id="chart-[a-z-]*"' "$work/dom.html" | sort -u | wc -l)
with_svg=$(python3 - "$work/dom.html" <<'PY'
import re, sys
dom = open(sys.argv[1], encoding="utf-8").read()
n = 0
for m in re.finditer(r'<div class="chart[^"]*" id="(chart-[a-z-]*)"', dom):
    nxt = dom.find('<div class="chart', m.end())
    if '<svg' in dom[m.end(): nxt if nxt != -1 else len(dom)]:
        n += 1
print(n)
PY
)
check "every chart container has an <svg> ($with_svg of $containers)" '[ "$containers" = "$expected" ] && [ "$with_svg" = "$containers" ]'
# Console errors as Chromium logs them (uncaught exceptions, console.error, failed loads).
bad=$(grep -E 'CONSOLE\([0-9]+\)|Uncaught' "$work/console.log" | grep -Ei 'error|uncaught' || true)
check "no console errors in Chromium's log" '[ -z "$bad" ]'
[ -n "$bad" ] && echo "$bad"
if [ "$command" = capacity ]; then
  for column in MFU "tokens/s per GPU" goodput "days (range)" cost "meets deadline"; do
    check "the rendered table has the column \"$column\"" 'grep -q "<th>$column</th>" "$work/dom.html"'
  done
  check "the rendered answer names the cost-optimal choice" 'grep -q "Cost-optimal: " "$work/dom.html"'
fi

# 2. A screenshot of the whole report.
"$browser" "${flags[@]}" --user-data-dir="$work/profile-shot" --window-size=1280,2400 \
  --screenshot="$shot" "$url" > /dev/null 2>> "$work/console.log"
check "screenshot written: $shot" '[ -s "$shot" ]'
exit $fail
