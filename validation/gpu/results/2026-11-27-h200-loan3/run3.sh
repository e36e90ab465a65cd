#!/usr/bin/env bash
# Third loan, call 3: one process per GPU (ALPASIM_EXEC_CUDA_MODE=processes, built-in launcher,
# one NCCL rank) after alpa-exec stopped asking for the values (RunOptions::report_values).
set -u
out=$1
work=$(mktemp -d)
exec > >(tee "$out/loan3c.log") 2>&1
start=$(date +%s)
stamp() { echo "=== [$(( $(date +%s) - start )) s] $*"; }
bin=$PWD/.gpu/bin
libdirs="$bin/../lib"
for name in libcublas.so.13 libcudnn.so.9 libnccl.so.2 libcublasLt.so.13; do
  for f in $(find /usr/local /opt /usr/lib -name "$name" 2>/dev/null | head -3); do libdirs="$libdirs:$(dirname "$f")"; done
done
export LD_LIBRARY_PATH="$libdirs:${LD_LIBRARY_PATH:-}"
[ -e /tmp/fresh/main ] || { mkdir -p /tmp/fresh && ln -s "$PWD" /tmp/fresh/main; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; date -u +%Y-%m-%dT%H:%M:%SZ
stamp "exec_cuda_matches_cpu"
timeout 60 "$bin/alpasim_gpu_exec_tests" > "$work/cuda_cpu.log" 2>&1; echo "rc=$?"; grep mismatches "$work/cuda_cpu.log"
for name in gpt_0p35b_fp32_h200_pp1.1f1b wresnet50x2_fp32_h200_pp1.1f1b gpt_1p3b_fp32_h200_pp1.1f1b; do
  for mode in processes virtual; do
    stamp "$name $mode"
    d="$work/$mode.$name"; mkdir -p "$d"; t0=$(date +%s)
    ALPASIM_EXEC_CUDA_MODE=$mode timeout -k 5 60 "$bin/alpa-exec" validation/gpu/plans/$name.plan.json --backend cuda --warmup 1 --iterations 3 --out "$d" \
      --predicted validation/gpu/plans/$name.summary.json > "$d/stdout.txt" 2> "$d/stderr.txt"
    echo "$name $mode rc=$? $(( $(date +%s) - t0 )) s"; grep -E "end to end|peak|stage  |^  0 " "$d/stdout.txt" | head -6; tail -4 "$d/stderr.txt"
  done
done
stamp done
sleep 1; cp "$out/loan3c.log" "$work/"; tar -C "$work" -czf "$out/results.tar.gz" .
