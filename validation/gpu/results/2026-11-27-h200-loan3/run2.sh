#!/usr/bin/env bash
# Third loan, call 2: where the one-process-per-GPU child spins (cuda-gdb attached to it), and
# whether blocking NCCL communicators (NCCL_COMM_BLOCKING=1) change it.
set -u
out=$1
exec > >(tee "$out/loan3b.log") 2>&1
bin=$PWD/.gpu/bin
libdirs="$bin/../lib"
for name in libcublas.so.13 libcudnn.so.9 libnccl.so.2 libcublasLt.so.13; do
  for f in $(find /usr/local /opt /usr/lib -name "$name" 2>/dev/null | head -3); do libdirs="$libdirs:$(dirname "$f")"; done
done
export LD_LIBRARY_PATH="$libdirs:${LD_LIBRARY_PATH:-}"
plan=validation/gpu/plans/gpt_0p35b_fp32_h200_pp1.1f1b.plan.json
gdb=$(command -v cuda-gdb || ls /usr/local/cuda*/bin/cuda-gdb 2>/dev/null | head -1)
echo "cuda-gdb: $gdb"
for variant in plain blocking; do
  echo "=== $variant"
  tmp=$(mktemp -d)
  extra=""; [ $variant = blocking ] && extra="NCCL_COMM_BLOCKING=1"
  env $extra TMPDIR="$tmp" ALPASIM_EXEC_CUDA_MODE=processes "$bin/alpa-exec" "$plan" --backend cuda --warmup 0 --iterations 1 --out "$tmp/out" > "$out/$variant.stdout.txt" 2>&1 &
  parent=$!; waited=0
  while kill -0 $parent 2>/dev/null && [ $waited -lt 12 ]; do sleep 1; waited=$((waited+1)); done
  if kill -0 $parent 2>/dev/null; then
    for p in $(pgrep -f "alpa-exec $plan"); do
      [ "$p" = "$parent" ] && continue
      echo "--- child $p: threads"
      for t in /proc/$p/task/*; do echo "  $(basename $t) $(cat $t/comm) $(cut -d' ' -f3 $t/stat) utime=$(cut -d' ' -f14 $t/stat) syscall=$(cut -d' ' -f1 $t/syscall 2>/dev/null)"; done
      timeout 60 "$gdb" -q -batch -p "$p" -ex "set pagination off" -ex "info threads" -ex "thread apply all bt 25" 2>&1 | grep -v "^\[New Thread\|^warning: .*libthread" | head -150
    done
    pkill -9 -f "alpa-exec $plan"
  else
    wait $parent; echo "exited rc=$? after $waited s"
  fi
  tail -15 "$out/$variant.stdout.txt"
  for f in "$tmp"/alpa-exec-*/rank*.log; do [ -f "$f" ] && { echo "--- $f"; grep -v "Cuda Alloc\|Realloc" "$f" | tail -25; }; done
done
