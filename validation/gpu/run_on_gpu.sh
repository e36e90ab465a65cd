#!/usr/bin/env bash
# One pass of everything only a GPU can show, sized for a short loan of one GPU
# (validation/gpu/README.md): the GPU tests, the CUDA executor on the plans of
# validation/gpu/plans/, and a quick alpa-profile sweep. Every step has its own time limit
# and a failing step never stops the next one.
#
#   validation/gpu/run_on_gpu.sh BIN_DIR OUT_DIR [PROFILE_SECONDS] [DEADLINE_SECONDS]
#
# BIN_DIR holds alpa-exec, alpa-profile and the GPU test executables (alpasim_gpu_tests,
# alpasim_gpu_exec_tests, alpasim_gpu_exec_nccl_tests), built for sm_90 by
# `cmake -DALPASIM_WITH_CUDA=ON`; BIN_DIR/../lib may hold libraries they need that the GPU
# machine lacks. PROFILE_SECONDS 0 skips the profile. PLANS (names under validation/gpu/plans,
# without .plan.json, in run order; default all), EXEC_LIMIT_S (per run, default 90) and
# SERIALIZED=0 (skip the CUDA_DEVICE_MAX_CONNECTIONS=1 reruns) size the executor step;
# ALPASIM_EXEC_CUDA_MODE=processes runs one-device plans through the launcher and NCCL;
# PROFILE_FLAGS (default "--quick --ops gemm,hbm,conv") chooses the profile sweep.
# Writes OUT_DIR/results.tar.gz (env.txt, tests/, exec/, profile/) and
# OUT_DIR/run.log. Run from the repository root.
set -uo pipefail
bin=$(cd "$1" && pwd)
out=$2
profile_s=${3:-180}
deadline_s=${4:-500}  # every step is cut so that the whole run ends by then
mkdir -p "$out"
work=$(mktemp -d)
mkdir -p "$work/tests" "$work/exec" "$work/profile"
exec > >(tee "$out/run.log") 2>&1
start=$(date +%s)
stamp() { echo "=== [$(( $(date +%s) - start )) s] $*"; }
# limit T: T, or less where the deadline is nearer (20 s kept for packing the results).
limit() {
  local left=$(( deadline_s - ($(date +%s) - start) - 20 ))
  if [ "$left" -lt "$1" ]; then echo "$left"; else echo "$1"; fi
}

# Libraries: the ones carried beside the binaries, then the CUDA toolkit's and the Python
# wheels' cuBLAS / cuDNN / NCCL, wherever this image keeps them.
libdirs="$bin/../lib"
for name in libcublas.so.13 libcudnn.so.9 libnccl.so.2 libcublasLt.so.13; do
  for f in $(find /usr/local /opt /usr/lib -name "$name" 2>/dev/null | head -3); do
    libdirs="$libdirs:$(dirname "$f")"
  done
done
export LD_LIBRARY_PATH="$libdirs:${LD_LIBRARY_PATH:-}"
# The test executables find their data under the source folder they were built in.
# ALPASIM_BUILT_SOURCE_DIR: the source folder of that build, linked here to this checkout.
src_dir=${ALPASIM_BUILT_SOURCE_DIR:-}
if [ -n "$src_dir" ] && [ ! -e "$src_dir" ]; then mkdir -p "$(dirname "$src_dir")" && ln -s "$PWD" "$src_dir"; fi

stamp "environment"
{
  date -u +%Y-%m-%dT%H:%M:%SZ
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem,power.limit --format=csv
  nvidia-smi | head -15
  echo "LD_LIBRARY_PATH=$LD_LIBRARY_PATH"
  for f in "$bin"/*; do echo "--- ldd $(basename "$f")"; ldd "$f" | grep -E "not found|cublas|cudnn|nccl|glpk"; done
  for name in libcublas.so.13 libcudnn.so.9 libnccl.so.2; do
    find /usr/local /opt /usr/lib -name "$name*" 2>/dev/null | head -3 | while read -r f; do echo "$f -> $(readlink -f "$f")"; done
  done
  uname -a
  cat /etc/os-release 2>/dev/null | head -2
} > "$work/env.txt" 2>&1
cat "$work/env.txt"

stamp "GPU tests"
run_test() {  # name timeout_s command...
  local name=$1 t=$2; shift 2
  local t0; t0=$(date +%s)
  t=$(limit "$t")
  if [ "$t" -lt 5 ]; then echo "$name skipped: deadline" | tee -a "$work/tests/summary.txt"; return; fi
  timeout -k 5 "$t" "$@" > "$work/tests/$name.log" 2>&1
  local rc=$?
  echo "$name rc=$rc $(( $(date +%s) - t0 )) s" | tee -a "$work/tests/summary.txt"
  tail -5 "$work/tests/$name.log"
}
run_test smoke 60 "$bin/alpasim_gpu_tests"
run_test exec_cuda_matches_cpu 120 "$bin/alpasim_gpu_exec_tests"
for c in pipeline data mesh2x2 wresnet wresnet_virtual sharded sharded_virtual sharded_search_virtual hang; do
  run_test "exec_nccl_$c" 90 "$bin/alpasim_gpu_exec_nccl_tests" "$c"
done

stamp "CUDA executor on the validation plans"
plans=${PLANS:-$(cd validation/gpu/plans && ls -- *.plan.json | sed 's/\.plan\.json$//')}
for name in $plans; do
  plan=validation/gpu/plans/$name.plan.json
  for conn in default 1; do
    case "$name" in *pp1*) [ "$conn" = 1 ] && continue ;; esac
    [ "$conn" = 1 ] && [ "${SERIALIZED:-1}" = 0 ] && continue
    dir="$work/exec/$name.conn-$conn"
    mkdir -p "$dir"
    t0=$(date +%s)
    t=$(limit "${EXEC_LIMIT_S:-90}")
    if [ "$t" -lt 5 ]; then echo "$name conn=$conn skipped: deadline" | tee -a "$work/exec/summary.txt"; continue; fi
    if [ "$conn" = 1 ]; then export CUDA_DEVICE_MAX_CONNECTIONS=1; else unset CUDA_DEVICE_MAX_CONNECTIONS; fi
    timeout -k 5 "$t" "$bin/alpa-exec" "$plan" --backend cuda --warmup 1 --iterations 2 --out "$dir" \
      --predicted "validation/gpu/plans/$name.summary.json" > "$dir/stdout.txt" 2> "$dir/stderr.txt"
    rc=$?
    unset CUDA_DEVICE_MAX_CONNECTIONS
    echo "$name conn=$conn rc=$rc $(( $(date +%s) - t0 )) s" | tee -a "$work/exec/summary.txt"
    head -40 "$dir/stdout.txt"; tail -5 "$dir/stderr.txt"
  done
done

if [ "$profile_s" -gt 0 ]; then
profile_s=$(limit "$profile_s")
fi
if [ "$profile_s" -lt 5 ]; then
  stamp "alpa-profile skipped (no time left before the deadline, or PROFILE_SECONDS 0)"
else
stamp "alpa-profile ${PROFILE_FLAGS:---quick --ops gemm,hbm,conv} (limit ${profile_s} s)"
# shellcheck disable=SC2086  # PROFILE_FLAGS is a list of flags
timeout -k 5 "$profile_s" "$bin/alpa-profile" ${PROFILE_FLAGS:---quick --ops gemm,hbm,conv} --no-progress \
  --out "$work/profile/profile.json" > "$work/profile/stdout.txt" 2> "$work/profile/stderr.txt"
echo "alpa-profile rc=$?"
tail -20 "$work/profile/stderr.txt"
fi

stamp "done"
sleep 1  # tee (above) writes run.log asynchronously: let it catch up before the copy
cp "$out/run.log" "$work/run.log"
tar -C "$work" -czf "$out/results.tar.gz" .
ls -la "$out"
