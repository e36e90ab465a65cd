#!/usr/bin/env bash
# Times a 1,000-point what-if sweep of GPT-3 6.7B (target: under 10 minutes on a 2-core
# machine) and prints the time.
#   bench/reports/sweep_bench.sh [ALPA_SIM] [fixed|megatron|alpa] [THREADS]
# fixed     every point evaluates a fixed Megatron plan (tp 4, pp 2, dp 2) with the calibrated
#           cost model and the simulator: 10 NIC speeds × 4 NICs per node × 25 global batches
# megatron  every point runs the Megatron-LM grid planner (planner::search mode "megatron")
# alpa      every point runs Alpa's search (far slower: minutes per point on 2 cores)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
alpa_sim=${1:-$root/build/bin/alpa-sim}
mode=${2:-fixed}
threads=${3:-$(nproc 2>/dev/null || echo 2)}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
planner=""
[ "$mode" = fixed ] || planner="\"planner\": \"$mode\","
batches=$(seq -s, 64 64 1600)  # 25 batches, each divisible by dp 2 × microbatch 2
cat > "$work/sweep_1000.json" <<JSON
{
  "schema_version": 1,
  "name": "GPT-3 6.7B, 1000-point sweep (bench)",
  "model": {"builtin": "gpt", "name": "GPT-3 6.7B", "num_layers": 32, "hidden_size": 4096,
            "num_heads": 32, "seq_len": 2048, "vocab_size": 51200},
  "cluster": {"preset": "dgx-a100-80gb", "nodes": 2},
  "training": {"global_batch_size": 512, "dtype": "bf16", "optimizer": "adam", "microbatches": "auto"},
  "search": {"mode": "fixed", "megatron": {"tp": 4, "pp": 2, "dp": 2, "microbatch_size": 2,
             "interleave": 1, "recompute": "selective", "sequence_parallel": true, "zero_stage": 0}},
  "what_if": {$planner
    "nic_bandwidth_gbit_per_s": [12.5, 25, 50, 100, 150, 200, 250, 300, 350, 400],
    "nics_per_node": [1, 2, 4, 8],
    "global_batch_size": [$batches]}
}
JSON
start=$(date +%s.%N)
"$alpa_sim" sweep "$work/sweep_1000.json" --threads "$threads" -q --out "$work/out"
end=$(date +%s.%N)
points=$(($(wc -l < "$work/out/sweep.csv") - 1))
ok=$(grep -c ',ok,' "$work/out/sweep.csv" || true)
secs=$(echo "$end - $start" | bc)
echo "sweep_bench: $points points ($ok planned), PlanPointFn=$mode, $threads threads: ${secs} s" \
     "(target < 600 s on 2 cores)"
