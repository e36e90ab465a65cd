#!/usr/bin/env bash
# One command on a GPU machine: build alpa-profile with CUDA, measure a profile of every local
# GPU, calibrate the cost model from it and record the held-out GEMM errors.
#
#   tools/measure_profile.sh            # full sweep (tens of minutes on 8 GPUs)
#   tools/measure_profile.sh --quick    # about a minute per family on one H100
#   BUILD_DIR=build-gpu tools/measure_profile.sh --ops gemm,nccl   (extra flags go to alpa-profile)
#   tools/measure_profile.sh --from PROFILE.json   # no measurement: calibrate and record a
#                                                  # profile measured elsewhere (e.g. mpirun)
#
# Writes profiles/<machine>/<date>-measured.json (+ .hbm.json), the calibration report beside
# it (<date>-measured.calibration.txt) and appends a section to docs/validation.md.
# Exit 77 (and nothing written) on a machine without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
build=${BUILD_DIR:-build-cuda}
jobs=${JOBS:-$(nproc)}
validation=${VALIDATION_MD:-docs/validation.md}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
if [ "${1:-}" = "--from" ]; then
  [ $# -eq 2 ] || { echo "usage: $0 --from PROFILE.json" >&2; exit 1; }
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
  cmake --build "$build" -j "$jobs" --target alpa-sim
  out=$2
  out_dir=$(dirname "$out")
  stem=$(basename "$out" .json)
else
  cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DALPASIM_WITH_CUDA=ON >/dev/null
  cmake --build "$build" -j "$jobs" --target alpa-profile alpa-sim
  set +e
  "$build/bin/alpa-profile" --out "$tmp/profile.json" "$@"
  rc=$?
  set -e
  if [ "$rc" -ne 0 ]; then
    exit "$rc"  # 77: no GPU (the message is on stderr)
  fi
  machine=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["provenance"]["machine"])' "$tmp/profile.json")
  date=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["provenance"]["date"])' "$tmp/profile.json")
  out_dir="profiles/$machine"
  stem="$date-measured"
  mkdir -p "$out_dir"
  out="$out_dir/$stem.json"
  cp "$tmp/profile.json" "$out"
  if [ -f "$tmp/profile.hbm.json" ]; then cp "$tmp/profile.hbm.json" "$out_dir/$stem.hbm.json"; fi
fi

"$build/bin/alpa-sim" calibrate "$out" > "$out_dir/$stem.calibration.txt"
"$build/bin/alpa-sim" calibrate --json "$out" > "$tmp/calibration.json"
echo "wrote $out_dir/$stem.calibration.txt"

# The held-out GEMM table for docs/validation.md (appended: other sections stay as they are).
python3 - "$tmp/calibration.json" "$out" "$*" "$out_dir/$stem.hbm.json" >> "$validation" <<'PY'
import json, os, sys
cal = json.load(open(sys.argv[1]))
profile, flags, hbm_path = sys.argv[2], sys.argv[3], sys.argv[4]
prov = json.load(open(profile))["provenance"]
pct = lambda v: f"{100 * v:.1f}%"
print(f"\n## Held-out GEMM error of a measured {cal['gpu']} profile ({prov['date']})\n")
print(f"Measured by `tools/measure_profile.sh {flags}`: {prov['measured_by']}.")
print(f"Profile `{profile}`; calibration `alpa-sim calibrate {profile}`. The cost model is fitted")
print("on the grid GEMMs only; the rows below are shapes off the grid (role `check`), predicted")
print("by the fitted efficiency curve and by the cost model's log-time interpolation of the grid.\n")
print("| GEMM class and held-out set | shapes | curve: median | curve: worst | interpolation: median | interpolation: worst |")
print("|---|---:|---:|---:|---:|---:|")
interp = {s["group"]: s for s in cal["held_out_interpolated"]}
def line(name, c, i):
    print(f"| {name} | {c['rows']} | {pct(c['median_abs_rel_error'])} | {pct(c['max_abs_rel_error'])} | {pct(i['median_abs_rel_error'])} | {pct(i['max_abs_rel_error'])} |")
for s in cal["held_out"]:
    if s["group"].startswith("gemm/"):
        line(s["group"], s, interp[s["group"]])
line("**all held-out GEMMs**", cal["held_out_gemm"], cal["held_out_gemm_interpolated"])
verdict = lambda s: "met" if s["meets_target"] else "NOT met"
print(f"\nTarget (issue 9: median <= 5 %, worst <= 15 %): efficiency curve {verdict(cal['held_out_gemm'])}; "
      f"grid interpolation {verdict(cal['held_out_gemm_interpolated'])}.")
if os.path.exists(hbm_path):
    h = json.load(open(hbm_path))
    print("\nHBM streaming: " + ", ".join(f"{r['kernel']} {r['gbyte_per_s']:.0f} GB/s ({pct(r['fraction_of_spec'])} of spec)" for r in h["results"]) + ".")
PY
echo "appended the held-out GEMM table to $validation"
