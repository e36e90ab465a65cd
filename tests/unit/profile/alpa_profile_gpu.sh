#!/usr/bin/env bash
# On a GPU machine: a quick bf16 GEMM + HBM profile is written, loads, and `alpa-sim calibrate`
# accepts it. Exit 77 (CTest: skipped) where there is no GPU. No timing is asserted: the
# held-out error target is checked by tools/measure_profile.sh and reported in
# docs/validation.md. Registered by apps/alpa-profile/targets.cmake (label gpu).
#   alpa_profile_gpu.sh <alpa-profile> <alpa-sim> <scratch folder>
set -u
profile_bin=$1 sim_bin=$2 work=$3
rm -rf "$work" && mkdir -p "$work"
"$profile_bin" --quick --ops gemm,hbm --dtypes bf16 --no-progress --out "$work/p.json"
rc=$?
if [ "$rc" -eq 77 ]; then exit 77; fi
if [ "$rc" -ne 0 ]; then echo "alpa-profile exited $rc" >&2; exit 1; fi
for f in p.json p.hbm.json; do
  [ -f "$work/$f" ] || { echo "alpa-profile did not write $f" >&2; exit 1; }
done
out=$("$sim_bin" calibrate "$work/p.json") || { echo "alpa-sim calibrate failed" >&2; exit 1; }
echo "$out"
echo "$out" | grep -q "held-out GEMM, gemm (grid interpolation): [0-9]* shapes" || exit 1
