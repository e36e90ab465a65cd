#!/usr/bin/env python3
"""Writes profiles/hgx-h200/2026-11-27-measured-attention.json from the third loan's raw
attention runs: the cuDNN rows of run4_attention.jsonl (35 shapes, head dimension 128 and 64)
are fit rows, those of run6_attention.jsonl (28 shapes: head dimension 64 with grouped-query
heads, and 192/128 as multi-head latent attention) are check rows, held out of the fit.
Times: forward = fwd_ms; backward = fwd_bwd_ms - fwd_ms (attention_bench.py times both loops
with CUDA events). The FlashAttention-2 rows are not used: Transformer Engine runs cuDNN's
kernel on Hopper. Usage, from the repository root:
    python3 validation/gpu/attention_to_profile.py > profiles/hgx-h200/2026-11-27-measured-attention.json
"""
import json
import sys

RUNS = "validation/gpu/results/2026-11-27-h200-loan3/"


def rows(name, role):
    out = []
    with open(RUNS + name) as f:
        for number, line in enumerate(f, start=1):
            if not line.startswith("{"):
                continue  # the raw file's first lines are a Python warning on stderr
            r = json.loads(line)
            if r.get("backend") != "cudnn":
                continue
            fwd_us = round(r["fwd_ms"] * 1000, 1)
            out.append({
                "batch": r["b"], "heads": r["heads"], "kv_heads": r["kv_heads"], "seq": r["seq"],
                "head_dim": r["head_dim"], "v_head_dim": r.get("v_head_dim", r["head_dim"]),
                "causal": True, "dtype": "bf16",
                "kernel": "cuDNN 9.19 fused attention (PyTorch 2.11 SDPA, cudnn backend)",
                "forward_us": fwd_us,
                "backward_us": round(r["fwd_bwd_ms"] * 1000 - fwd_us, 1),
                "role": role, "source": "measured",
                "citation": RUNS + name + " line " + str(number),
            })
    return out


profile = {
    "schema_version": 1,
    "provenance": {
        "machine": "hgx-h200", "gpu": "h200",
        "driver_version": "580.159.04", "cuda_version": "13.0", "cublas_version": "unknown",
        "cudnn_version": "9.19.0", "nccl_version": "unknown", "date": "2026-11-27",
        "measured_by": "validation/gpu/attention_bench.py (run 4) and run6_attention_bench.py "
                       "(run 6) on one NVIDIA H200 (peak SM clock 1980 MHz), PyTorch 2.11.0+cu130, "
                       "third GPU loan; converted by validation/gpu/attention_to_profile.py",
        "source": "measured", "citation": "",
    },
    "attention": rows("run4_attention.jsonl", "fit") + rows("run6_attention.jsonl", "check"),
}
json.dump(profile, sys.stdout, indent=1, sort_keys=True)
sys.stdout.write("\n")
