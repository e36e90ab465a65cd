#!/usr/bin/env python3
"""Derives the shipped profiles from the published figures in validation/data/.

Usage: profiles/derive_from_reference.py [REFERENCE_DIR] [--check]
  REFERENCE_DIR defaults to validation/data; --check writes nothing and exits 1 when a
  shipped profile differs from what the generator produces (CTest validation/profiles_in_sync).

Writes profiles/<machine>/2026-08-22-derived.json for dgx-a100-80gb, hgx-h200, dgx-h100,
aws-p3.16xlarge, dgx-b200 and mi300x. Every entry cites its CSV line and marks its role:
  fit   - calibration fits the cost model to it;
  check - calibration only predicts it (validation measures prediction, not memory).
The split (docs/profiles.md):
  * message-size curves: sizes 2^odd fit, 2^even check;
  * the 1-channel ring latency sweep (nccl-tests #123): 2 and 8 GPUs fit, 3..7 check;
  * the NVLS GPU-count sweep: 8 GPUs fit, 4..7 check;
  * all-gather / reduce-scatter: always check (the ring efficiency comes from all-reduce);
  * A100 GEMM: MAMF and the 1024^3 chart point fit, 2048^3..8192^3 check;
  * H100 (dgx-h100): nothing fits: every row checks parameters fitted on A100 and H200;
  * network: per-NIC HDR busbw fits, EDR / NDR / all-to-all / multi-node rows check;
  * B200 (dgx-b200): the bf16 MAMF fits; the 8-GPU NVLink5 all-reduce curve (AWS p6-b200)
    fits at 2^odd sizes, checks at 2^even; the 4-node rows of that system cross EFA, not the
    preset's InfiniBand, so they are left out (the network is inherited from dgx-h100).
  * MI300X (mi300x): the bf16 MAMF fits; the 8-GPU all-reduce at 4 GiB fits, the 2-GPU
    row checks (one xGMI link against seven).
The output is deterministic (sorted keys, fixed order).
"""
import csv
import json
import math
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ARGS = [a for a in sys.argv[1:] if a != "--check"]
CHECK = "--check" in sys.argv[1:]
REF = ARGS[0] if ARGS else os.path.join(HERE, "..", "validation", "data")
DATE = "2026-08-22"  # date of the ml-engineering snapshot most rows come from


def load(name):
    with open(os.path.join(REF, name), encoding="utf-8-sig") as f:
        rows = list(csv.DictReader(f))
    return {i + 2: r for i, r in enumerate(rows)}  # CSV line number -> row (header is line 1)


COLL = load("collectives.csv")
GEMM = load("gemm.csv")


def cite(file, line, rows):
    r = rows[line]
    src = r.get("source", "")
    tool = r.get("tool", "") or r.get("software", "")
    return f"validation/data/{file} line {line}: {src}" + (f" ({tool})" if tool else "")


def provenance(machine, gpu, nccl, cublas, citation):
    return {
        "machine": machine, "gpu": gpu, "driver_version": "unknown", "cuda_version": "unknown",
        "cublas_version": cublas, "cudnn_version": "unknown", "nccl_version": nccl,
        "date": DATE, "measured_by": "profiles/derive_from_reference.py (published figures)",
        "source": "derived", "citation": citation,
    }


def coll(line, role, collective=None, algorithm="default", protocol="default", channels=0,
         num_gpus=None, num_nodes=None, message_bytes=None, busbw=None, time_us=None):
    r = COLL[line]
    e = {
        "collective": collective or r["collective"],
        "algorithm": algorithm, "protocol": protocol, "channels": channels,
        "num_gpus": int(num_gpus if num_gpus is not None else r["num_gpus"]),
        "num_nodes": int(num_nodes if num_nodes is not None else r["num_nodes"]),
        "message_bytes": int(message_bytes if message_bytes is not None else (r["message_bytes"] or 0)),
        "role": role, "source": "derived", "citation": cite("collectives.csv", line, COLL),
    }
    if busbw is None and r["busbw_GBps"] and time_us is None:
        busbw = float(r["busbw_GBps"].lstrip("~"))
    if busbw is not None:
        e["busbw_gbyte_per_s"] = busbw
    if time_us is not None:
        e["time_us"] = time_us
    return e


def curve_role(nbytes):
    return "fit" if int(math.log2(nbytes)) % 2 == 1 else "check"


def gemm(line, role, dtype, m, n, k, gpu_rows=GEMM):
    r = gpu_rows[line]
    return {"m": m, "n": n, "k": k, "batch": 1, "dtype": dtype,
            "tflops_per_s": float(r["tflops"]), "role": role, "source": "derived",
            "citation": cite("gemm.csv", line, GEMM)}


def link(line, role, cls, measurement, spec, achieved):
    return {"link_class": cls, "measurement": measurement, "spec_gbyte_per_s": spec,
            "achieved_gbyte_per_s": achieved, "role": role, "source": "derived",
            "citation": cite("collectives.csv", line, COLL)}


def shape(line):
    m, n, k = (int(v) for v in GEMM[line]["shape_MxNxK"].split("x"))
    return m, n, k


def a100():
    g = [gemm(14, "fit", "bf16", *shape(14)), gemm(22, "fit", "bf16", *shape(22))]
    g += [gemm(line, "check", "bf16", *shape(line)) for line in (23, 24, 25)]
    c = []
    for line in range(2, 22):  # stas00 nccl-tests all_reduce curve, 32 KiB .. 16 GiB
        nbytes = int(COLL[line]["message_bytes"])
        c.append(coll(line, curve_role(nbytes), time_us=float(COLL[line]["time_us"]),
                      busbw=float(COLL[line]["busbw_GBps"])))
    for line in range(108, 115):  # nccl-tests #123: Ring, 1 channel, 8..128 B
        n = int(COLL[line]["num_gpus"])
        c.append(coll(line, "fit" if n in (2, 8) else "check", algorithm="ring", channels=1,
                      message_bytes=128, time_us=float(COLL[line]["time_us"])))
    c.append(coll(92, "check", algorithm="ring"))
    c.append(coll(101, "check"))
    c.append(coll(103, "check"))
    c.append(coll(96, "check", algorithm="ring", num_gpus=16, num_nodes=2, message_bytes=0))
    links = [link(97, "fit", "infiniband", "collective", 25.0, 24.0),
             link(100, "check", "infiniband", "collective", 12.5, 12.2)]
    return {"schema_version": 1,
            "provenance": provenance("dgx-a100-80gb", "a100-80gb", "unknown (not stated)",
                                     "torch 2.6.0+cu126 (MAMF); cuBLAS 11.0 (chart)",
                                     "validation/data/collectives.csv and gemm.csv (A100 rows)"),
            "gemm": g, "conv": [], "collectives": c, "links": links}


def h200():
    c = []
    for line in range(22, 42):  # all_reduce_bench.py curve, NCCL 2.27.7, default algorithm
        nbytes = int(COLL[line]["message_bytes"])
        c.append(coll(line, curve_role(nbytes)))
    c.append(coll(42, "check", algorithm="nvls"))
    c.append(coll(43, "fit", algorithm="ring"))
    c.append(coll(44, "check", algorithm="ring"))
    c.append(coll(45, "check", algorithm="ring"))
    for line in range(46, 51):  # NVLS GPU-count sweep at 8 GiB
        c.append(coll(line, "fit" if int(COLL[line]["num_gpus"]) == 8 else "check"))
    c.append(coll(124, "check", algorithm="ring", protocol="ll", time_us=40.0))
    g = [gemm(20, "fit", "fp8", *shape(20))]
    links = [link(128, "fit", "nvswitch", "p2p", 450.0, float(COLL[128]["algbw_GBps"]))]
    return {"schema_version": 1,
            "provenance": provenance("hgx-h200", "h200", "2.27.7", "torch 2.7.1+cu128 (MAMF)",
                                     "validation/data/collectives.csv and gemm.csv (H200 rows)"),
            "gemm": g, "conv": [], "collectives": c, "links": links}


def h100():
    g = [gemm(16, "check", "bf16", *shape(16)), gemm(19, "check", "fp8", *shape(19))]
    c = [coll(93, "check", collective="all_gather", algorithm="ring", num_gpus=8, num_nodes=1,
              message_bytes=0, busbw=370.0),
         coll(93, "check", collective="reduce_scatter", algorithm="ring", num_gpus=8,
              num_nodes=1, message_bytes=0, busbw=370.0),
         coll(94, "check", algorithm="nvls", message_bytes=0),
         coll(95, "check", algorithm="nvls", message_bytes=0),
         coll(115, "check", message_bytes=128, time_us=6.0)]
    links = [link(98, "check", "infiniband", "collective", 50.0, 47.0),
             link(99, "check", "infiniband", "collective", 50.0, 48.5)]
    return {"schema_version": 1,
            "provenance": provenance("dgx-h100", "h100-sxm", "2.20.5 / unknown",
                                     "torch 2.7.0+cu126 (MAMF)",
                                     "validation/data/collectives.csv and gemm.csv (H100 rows)"),
            "gemm": g, "conv": [], "collectives": c, "links": links}


def p3():
    links = [link(127, "fit", "nvlink", "p2p", 50.0, float(COLL[127]["algbw_GBps"]))]
    return {"schema_version": 1,
            "provenance": provenance("aws-p3.16xlarge", "v100-16gb", "unknown", "unknown",
                                     "validation/data/collectives.csv lines 125-127 (V100 NVLink "
                                     "link specs and p2pBandwidthLatencyTest); gemm.csv line 31: "
                                     "no published V100 large-GEMM figure"),
            "gemm": [], "conv": [], "collectives": [], "links": links}


def b200():
    g = [gemm(18, "fit", "bf16", *shape(18))]
    c = []
    for line in range(51, 91):  # all_reduce_bench.py on AWS p6-b200, NCCL default algorithm
        if int(COLL[line]["num_nodes"]) != 1:
            continue  # 4 nodes over EFA v4: not the dgx-b200 preset's fabric
        nbytes = int(COLL[line]["message_bytes"])
        c.append(coll(line, curve_role(nbytes)))
    return {"schema_version": 1,
            "provenance": provenance("dgx-b200", "b200", "2.27.7",
                                     "torch 2.7.1+cu128 (MAMF)",
                                     "validation/data/collectives.csv lines 51-90 (AWS p6-b200, "
                                     "the 8-GPU rows) and gemm.csv line 18 (B200 MAMF)"),
            "gemm": g, "conv": [], "collectives": c, "links": []}


def mi300x():
    # MI300X: the bf16 MAMF fits; the 8-GPU all-reduce at 4 GiB (all 7 xGMI links in use)
    # fits the direct-link efficiency; the 2-GPU row (one link) checks it. No fp8 MAMF, no
    # size curve and no multi-node row is published: the rest comes from dgx-h100.
    g = [gemm(38, "fit", "bf16", *shape(38))]
    c = [coll(139, "fit"), coll(140, "check")]
    return {"schema_version": 1,
            "provenance": provenance("mi300x", "mi300x", "RCCL (version not stated)",
                                     "torch 2.5.1+rocm6.3.42131 (MAMF, hipBLASLt)",
                                     "validation/data/collectives.csv lines 138-140 (MI300X "
                                     "xGMI spec, 8- and 2-GPU all-reduce) and gemm.csv line 38 "
                                     "(MI300X MAMF)"),
            "gemm": g, "conv": [], "collectives": c, "links": []}


def main():
    stale = []
    for machine, fn in (("dgx-a100-80gb", a100), ("hgx-h200", h200), ("dgx-h100", h100),
                        ("aws-p3.16xlarge", p3), ("dgx-b200", b200), ("mi300x", mi300x)):
        path = os.path.join(HERE, machine, f"{DATE}-derived.json")
        text = json.dumps(fn(), indent=2, sort_keys=True) + "\n"
        if CHECK:
            try:
                with open(path, encoding="utf-8") as f:
                    same = f.read() == text
            except OSError:
                same = False
            if not same:
                stale.append(os.path.relpath(path, HERE))
            continue
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        print("wrote", os.path.relpath(path, HERE))
    if stale:
        print("profiles differ from profiles/derive_from_reference.py output: " + ", ".join(stale)
              + " (run the script to regenerate)")
        sys.exit(1)
    if CHECK:
        print("shipped profiles are in sync with validation/data")


if __name__ == "__main__":
    main()
