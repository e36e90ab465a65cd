#!/usr/bin/env bash
# Third loan: exec_cuda_matches_cpu x8 (index-table fix + sliding-window softmax), virtual-device
# NCCL tests, the executor on the one-GPU plans (convolution heuristic refactor), and the
# processes-mode diagnosis. Writes $1/loan3.log and $1/results.tar.gz.
set -u
out=$1
work=$(mktemp -d)
exec > >(tee "$out/loan3.log") 2>&1
start=$(date +%s)
stamp() { echo "=== [$(( $(date +%s) - start )) s] $*"; }
bin=$PWD/.gpu/bin
libdirs="$bin/../lib"
for name in libcublas.so.13 libcudnn.so.9 libnccl.so.2 libcublasLt.so.13; do
  for f in $(find /usr/local /opt /usr/lib -name "$name" 2>/dev/null | head -3); do libdirs="$libdirs:$(dirname "$f")"; done
done
export LD_LIBRARY_PATH="$libdirs:${LD_LIBRARY_PATH:-}"
[ -e /tmp/fresh/main ] || { mkdir -p /tmp/fresh && ln -s "$PWD" /tmp/fresh/main; }
stamp env
{ date -u +%Y-%m-%dT%H:%M:%SZ; nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; nvidia-smi | head -5;
  for n in libcublas.so.13 libcudnn.so.9 libnccl.so.2; do find /usr/local /opt /usr/lib -name "$n*" 2>/dev/null | head -2 | while read -r f; do echo "$f -> $(readlink -f "$f")"; done; done; } | tee "$work/env.txt"
stamp "smoke"
timeout 60 "$bin/alpasim_gpu_tests" > "$work/smoke.log" 2>&1; echo "smoke rc=$?"; tail -3 "$work/smoke.log"
stamp "exec_cuda_matches_cpu x8"
for i in 1 2 3 4 5 6 7 8; do
  t0=$(date +%s); timeout 60 "$bin/alpasim_gpu_exec_tests" > "$work/cuda_cpu_$i.log" 2>&1; rc=$?
  echo "run $i rc=$rc $(( $(date +%s) - t0 )) s"; grep -E "mismatches|FAILED|initial" "$work/cuda_cpu_$i.log"
done
grep -h "^gradient\|^loss" "$work"/cuda_cpu_*.log | sort | uniq -c | head -20
stamp "virtual-device NCCL tests"
for c in wresnet_virtual sharded_virtual sharded_search_virtual; do
  timeout 60 "$bin/alpasim_gpu_exec_nccl_tests" $c > "$work/nccl_$c.log" 2>&1; echo "$c rc=$?"; tail -2 "$work/nccl_$c.log"
done
stamp "executor on one-GPU and two-stage plans"
for name in gpt_0p35b_fp32_h200_pp1.1f1b gpt_1p3b_fp32_h200_pp1.1f1b wresnet50x2_fp32_h200_pp1.1f1b wresnet50x2_fp32_h200_pp2.1f1b gpt_1p3b_fp32_h200_pp4.1f1b; do
  d="$work/exec_$name"; mkdir -p "$d"; t0=$(date +%s)
  timeout -k 5 45 "$bin/alpa-exec" validation/gpu/plans/$name.plan.json --backend cuda --warmup 1 --iterations 2 --out "$d" \
    --predicted validation/gpu/plans/$name.summary.json > "$d/stdout.txt" 2> "$d/stderr.txt"
  echo "$name rc=$? $(( $(date +%s) - t0 )) s"; head -25 "$d/stdout.txt"; tail -3 "$d/stderr.txt"
done
stamp "processes mode diagnosis"
LIMIT_S=15 validation/gpu/diagnose_processes.sh "$bin" "$work/diag"
stamp done
sleep 1
cp "$out/loan3.log" "$work/"
tar -C "$work" -czf "$out/results.tar.gz" .
