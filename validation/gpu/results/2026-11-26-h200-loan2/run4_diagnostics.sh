#!/usr/bin/env bash
# Run 4 diagnostics: the wide-row GPT race and the processes-mode hang.
set -u
out=$1
bin=$PWD/.gpu/bin
libdirs="$bin/../lib"
for name in libcublas.so.13 libcudnn.so.9 libnccl.so.2 libcublasLt.so.13; do
  for f in $(find /usr/local /opt /usr/lib -name "$name" 2>/dev/null | head -3); do libdirs="$libdirs:$(dirname "$f")"; done
done
export LD_LIBRARY_PATH="$libdirs:${LD_LIBRARY_PATH:-}"
[ -e /tmp/fresh/main ] || { mkdir -p /tmp/fresh && ln -s "$PWD" /tmp/fresh/main; }
echo "=== exec_cuda_matches_cpu x8"
for i in 1 2 3 4 5 6 7 8; do timeout 30 "$bin/alpasim_gpu_exec_tests" > "$out/t$i.log" 2>&1; echo "run $i rc=$? $(grep -c 'gradient ' "$out/t$i.log") gradient lines"; done
grep -h "^gradient\|mismatches" "$out"/t*.log | sort | uniq -c | sort -rn | head -20
echo "=== CUDA_LAUNCH_BLOCKING=1 x4"
for i in 1 2 3 4; do CUDA_LAUNCH_BLOCKING=1 timeout 60 "$bin/alpasim_gpu_exec_tests" > "$out/b$i.log" 2>&1; echo "blocking run $i rc=$? $(grep -c 'gradient ' "$out/b$i.log") gradient lines"; done
echo "=== compute-sanitizer memcheck"
CS=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
timeout 90 "$CS" --tool memcheck --print-limit 20 "$bin/alpasim_gpu_exec_tests" > "$out/memcheck.log" 2>&1; echo "memcheck rc=$?"; grep -v "^gradient\|calls" "$out/memcheck.log" | head -40
echo "=== processes mode, 1 device"
export TMPDIR=/tmp/diag; mkdir -p $TMPDIR
NCCL_DEBUG=WARN ALPASIM_EXEC_CUDA_MODE=processes timeout -k 3 25 "$bin/alpa-exec" validation/gpu/plans/gpt_0p35b_fp32_h200_pp1.1f1b.plan.json --backend cuda --warmup 0 --iterations 1 --out /tmp/diag/o > "$out/proc.log" 2>&1; echo "processes rc=$?"
tail -20 "$out/proc.log"
for f in /tmp/diag/alpa-exec-*/*; do echo "--- $f"; tail -c 3000 "$f"; done
ps aux | grep alpa-exec | grep -v grep | head
