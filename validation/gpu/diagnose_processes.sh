#!/usr/bin/env bash
# Why the one-process-per-GPU mode hung on an H200 VM with one rank (docs/validation.md,
# "Second GPU run"): runs a one-device plan through the built-in launcher under NCCL's own
# log, once as is and once per NCCL setting that avoids a facility a VM may lack, and dumps
# the child's threads (state, kernel wait channel, CPU ticks) while it runs. Sized for a short
# loan: every attempt is cut after LIMIT_S seconds (default 20).
#
#   validation/gpu/diagnose_processes.sh BIN_DIR OUT_DIR
#
# BIN_DIR as for run_on_gpu.sh (alpa-exec built with CUDA; BIN_DIR/../lib for carried
# libraries). Writes OUT_DIR/processes_<variant>.log. Run from the repository root.
set -u
bin=$(cd "$1" && pwd)
out=$2
limit_s=${LIMIT_S:-20}
plan=${PLAN:-validation/gpu/plans/gpt_0p35b_fp32_h200_pp1.1f1b.plan.json}
mkdir -p "$out"
libdirs="$bin/../lib"
for name in libcublas.so.13 libcudnn.so.9 libnccl.so.2 libcublasLt.so.13; do
  for f in $(find /usr/local /opt /usr/lib -name "$name" 2>/dev/null | head -3); do libdirs="$libdirs:$(dirname "$f")"; done
done
export LD_LIBRARY_PATH="$libdirs:${LD_LIBRARY_PATH:-}"

attempt() {  # variant "VAR=value ..."
  local variant=$1 settings=$2 log="$out/processes_$1.log" tmp
  tmp=$(mktemp -d)
  echo "=== $variant ($settings), limit $limit_s s" | tee "$log"
  # shellcheck disable=SC2086  # settings is a list of VAR=value words
  env $settings NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,ENV,ALLOC TMPDIR="$tmp" ALPASIM_EXEC_CUDA_MODE=processes \
    "$bin/alpa-exec" "$plan" --backend cuda --warmup 0 --iterations 1 --out "$tmp/out" >> "$log" 2>&1 &
  local parent=$! waited=0
  while kill -0 "$parent" 2>/dev/null && [ "$waited" -lt "$limit_s" ]; do sleep 1; waited=$((waited + 1)); done
  if kill -0 "$parent" 2>/dev/null; then
    echo "--- still running after $limit_s s; threads of every alpa-exec process:" >> "$log"
    for p in $(pgrep -f "alpa-exec $plan"); do
      echo "pid $p state $(cut -d' ' -f3 "/proc/$p/stat") threads $(ls "/proc/$p/task" | wc -l)" >> "$log"
      for t in /proc/"$p"/task/*; do
        echo "  $(cat "$t/comm") state=$(cut -d' ' -f3 "$t/stat") wchan=$(cat "$t/wchan" 2>/dev/null) utime=$(cut -d' ' -f14 "$t/stat")"
      done | sort | uniq -c >> "$log"
      cat "/proc/$p/stack" >> "$log" 2>/dev/null
    done
    pkill -9 -f "alpa-exec $plan"
  else
    wait "$parent"
    echo "--- exited $? after $waited s" >> "$log"
  fi
  for f in "$tmp"/alpa-exec-*/rank*.log; do [ -f "$f" ] && { echo "--- $f"; tail -c 6000 "$f"; } >> "$log"; done
  tail -40 "$log"
  rm -rf "$tmp"
}

attempt plain ""
attempt no_cumem "NCCL_CUMEM_ENABLE=0"
attempt no_p2p_shm "NCCL_CUMEM_ENABLE=0 NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 NCCL_SOCKET_IFNAME=lo"
