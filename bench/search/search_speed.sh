#!/usr/bin/env bash
# Wall time of what a user waits for: `alpa-sim SCENARIO` with its defaults (the search and
# every baseline of the comparison table), per scenario, against issue 15's targets on a
# 2-core machine: GPT-3 39B on 64 V100 <= 10 s, GPT-3 175B on 1,024 A100 <= 60 s.
#   bench/search/search_speed.sh [ALPA_SIM] [RUNS]      (default: build/bin/alpa-sim, 3 runs)
# Prints one line per scenario: every run's wall seconds, the median, the target and whether
# the median meets it. Run it on an otherwise idle machine: the searches use every core.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
alpa_sim=${1:-$root/build/bin/alpa-sim}
runs=${2:-3}
[ -x "$alpa_sim" ] || { echo "build first: $alpa_sim is missing" >&2; exit 1; }
# scenario (relative to the repository root; "" = the built-in default) and target seconds
# ("-" = none).
cases=(
  "|-"
  "scenarios/alpa_gpt3_39b_p3_64gpu.json|10"
  "scenarios/gpt3_175b_dgx_a100_search.json|60"
  "scenarios/gpt3_175b_dgx_h100_search.json|-"
)
status=0
for c in "${cases[@]}"; do
  scenario=${c%%|*}
  target=${c##*|}
  times=()
  for ((r = 0; r < runs; ++r)); do
    start=$(date +%s.%N)
    (cd "$root" && "$alpa_sim" ${scenario:+"$scenario"} -q)
    end=$(date +%s.%N)
    times+=("$(echo "$end - $start" | bc)")
  done
  median=$(printf '%s\n' "${times[@]}" | sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}')
  verdict=""
  if [ "$target" != "-" ]; then
    if (($(echo "$median <= $target" | bc))); then verdict="target ${target} s: met"; else verdict="target ${target} s: NOT met"; status=1; fi
  fi
  printf 'search_speed: %-45s runs %s s, median %.2f s %s\n' "${scenario:-(built-in default)}" \
         "$(printf '%.2f ' "${times[@]}")" "$median" "$verdict"
done
exit $status
