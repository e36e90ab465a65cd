#!/usr/bin/env python3
"""Measured vs predicted per transformer block, per microbatch, for a one-device GPT run.

    validation/gpu/compare_layers.py TRACE.json PREDICTION.json [PREDICTION.json ...]

TRACE.json: `alpa-exec --backend cuda --out DIR`'s DIR/trace.json, or it gzipped (the last iteration's
instructions, each timed by CUDA events on its stream). PREDICTION.json: `alpa-sim SCENARIO
--json` for the same plan (optionally with --profile), whose prediction.layer_costs gives
each block's GEMM and memory-bound time per microbatch.

The executor's RUN instructions of the blocks are split as the cost model splits a layer:
GEMMs (the einsums: q, k, v, out, fc1, fc2, scores, context, each with grad_lhs / grad_rhs
in the backward) and everything else (memory-bound: norms, softmax, GELU, dropout, bias
gradients, adds); forward and backward apart. Only one-device plans are meaningful: on
virtual devices of one GPU the stages share its SMs. Prints a Markdown table.
"""
import gzip
import json
import re
import statistics
import sys

GEMMS = ("q", "k", "v", "out", "fc1", "fc2", "scores", "context")


def measured(trace_path):
    opener = gzip.open if trace_path.endswith(".gz") else open
    with opener(trace_path, "rt") as f:
        events = [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
    sums = {}
    layers, microbatches = set(), set()
    for e in events:
        m = re.match(r"run (block(\d+))/(\S+) mb(\d+)", e["name"])
        if not m:
            continue
        layers.add(m.group(2))
        microbatches.add(m.group(4))
        parts = m.group(3).split("/")
        backward = any(p.startswith("grad") for p in parts[1:]) or "grad" in m.group(3)
        gemm = parts[0] in ("attn", "mlp") and len(parts) >= 2 and parts[1] in GEMMS and \
            (len(parts) == 2 or parts[2] in ("grad_lhs", "grad_rhs"))
        key = ("gemm" if gemm else "memory_bound") + ("_backward" if backward else "_forward")
        sums[key] = sums.get(key, 0.0) + e["dur"] * 1e-6  # us -> s
    per = len(layers) * len(microbatches)
    return {k: v / per for k, v in sums.items()}, len(layers), len(microbatches)


def predicted(path):
    costs = json.load(open(path))["prediction"]["layer_costs"]
    blocks = [c for c in costs if c["kind"] == "transformer"]
    keys = ("gemm_forward_s", "gemm_backward_s", "memory_bound_forward_s", "memory_bound_backward_s")
    return {k[:-2]: statistics.mean(b[k] for b in blocks) for k in keys}


def main():
    meas, layers, mbs = measured(sys.argv[1])
    preds = [(p, predicted(p)) for p in sys.argv[2:]]
    print(f"per block and microbatch, ms ({layers} blocks x {mbs} microbatches measured)\n")
    head = "| part | measured | " + " | ".join(f"predicted ({p.split('/')[-1]}) | error" for p, _ in preds) + " |"
    print(head)
    print("|---|---:|" + "---:|---:|" * len(preds))
    rows = ("gemm_forward", "gemm_backward", "memory_bound_forward", "memory_bound_backward")
    total_m = sum(meas.get(r, 0.0) for r in rows)
    for r in rows + ("all",):
        m = total_m if r == "all" else meas.get(r, 0.0)
        cells = []
        for _, p in preds:
            v = sum(p[x] for x in rows) if r == "all" else p[r]
            cells.append(f"{v * 1e3:.3f} | {100 * (v - m) / m:+.1f} %")
        print(f"| {r} | {m * 1e3:.3f} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
