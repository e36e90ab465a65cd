# What a training step sustains that a GEMM microbenchmark does not (prepared 2026-11-27 for
# the next GPU loan; not yet run). Two questions from docs/validation.md "Tensor-parallel
# overlap as userbuffers run it": (1) do GEMMs keep their burst rate when the GPU runs them
# for tens of seconds (clocks under the power cap)? (2) how long does one GPT block take,
# forward and backward, in PyTorch eager with fused attention, against alpa-sim's per-layer
# prediction for the same shape?
# Usage: python3 validation/gpu/sustained_bench.py [--seconds 20] > run.jsonl
# One JSON object per line. Needs PyTorch with CUDA; nvidia-smi for clocks and power.
import argparse, datetime, json, subprocess, time

import torch
import torch.nn.functional as F

parser = argparse.ArgumentParser()
parser.add_argument("--seconds", type=float, default=20.0, help="length of each sustained GEMM run")
args = parser.parse_args()
dev = torch.device("cuda")
bf = torch.bfloat16


def emit(obj):
    print(json.dumps(obj), flush=True)


def smi():
    """SM clock (MHz), power (W) and temperature (C) now, or {} without nvidia-smi."""
    try:
        out = subprocess.run(["nvidia-smi", "--id=0", "--query-gpu=clocks.sm,power.draw,temperature.gpu",
                              "--format=csv,noheader,nounits"], capture_output=True, text=True, timeout=5)
        clock, power, temp = (float(v) for v in out.stdout.strip().split(","))
        return {"sm_clock_mhz": clock, "power_w": power, "temperature_c": temp}
    except Exception as e:  # report, do not stop the run
        return {"smi_error": str(e)[:120]}


emit({"env": {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "cuda": torch.version.cuda,
              "sms": torch.cuda.get_device_properties(0).multi_processor_count,
              "date": datetime.datetime.now(datetime.timezone.utc).isoformat(), "idle": smi()}})


def timed(fn, iters):
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(iters):
        fn()
    e.record()
    torch.cuda.synchronize()
    return s.elapsed_time(e) / 1e3 / iters  # seconds per call


# ---- (1) Burst against sustained GEMM throughput.
def gemm_case(name, m, n, k, fn):
    flops = 2.0 * m * n * k
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    burst = timed(fn, 20)
    emit({"gemm": name, "m": m, "n": n, "k": k, "phase": "burst", "tflops": round(flops / burst / 1e12, 1)})
    # Sustained: back-to-back for args.seconds, one window per ~second.
    per_window = max(1, int(1.0 / burst))
    start = time.time()
    window = 0
    while time.time() - start < args.seconds:
        t = timed(fn, per_window)
        row = {"gemm": name, "m": m, "n": n, "k": k, "phase": "sustained", "window": window,
               "elapsed_s": round(time.time() - start, 2), "tflops": round(flops / t / 1e12, 1)}
        row.update(smi())
        emit(row)
        window += 1
    time.sleep(10)  # cool down before the next case


m = n = k = 8192
a = torch.randn(m, k, device=dev, dtype=bf)
b = torch.randn(k, n, device=dev, dtype=bf)
gemm_case("bf16", m, n, k, lambda: a @ b)
if hasattr(torch, "float8_e4m3fn") and hasattr(torch, "_scaled_mm"):
    a8 = a.to(torch.float8_e4m3fn)
    b8 = b.t().contiguous().to(torch.float8_e4m3fn).t()  # column-major, as _scaled_mm wants
    one = torch.tensor(1.0, device=dev)
    try:
        gemm_case("fp8", m, n, k, lambda: torch._scaled_mm(a8, b8, scale_a=one, scale_b=one, out_dtype=bf))
    except Exception as e:
        emit({"gemm": "fp8", "error": str(e)[:200]})
del a, b


# ---- (2) GPT blocks as Megatron's GPT (pre-LN, GELU MLP of 4h, dropout 0.1 on attention and
# on each residual branch, fused attention), bf16, one microbatch, tp 1.
class Block(torch.nn.Module):
    def __init__(self, hidden, heads):
        super().__init__()
        self.heads = heads
        self.ln1 = torch.nn.LayerNorm(hidden)
        self.qkv = torch.nn.Linear(hidden, 3 * hidden)
        self.proj = torch.nn.Linear(hidden, hidden)
        self.ln2 = torch.nn.LayerNorm(hidden)
        self.fc1 = torch.nn.Linear(hidden, 4 * hidden)
        self.fc2 = torch.nn.Linear(4 * hidden, hidden)

    def forward(self, x):  # x: [batch, seq, hidden]
        b_, s_, h_ = x.shape
        q, k_, v = self.qkv(self.ln1(x)).view(b_, s_, 3, self.heads, h_ // self.heads).permute(2, 0, 3, 1, 4)
        o = F.scaled_dot_product_attention(q, k_, v, dropout_p=0.1, is_causal=True).transpose(1, 2).reshape(b_, s_, h_)
        x = x + F.dropout(self.proj(o), 0.1)
        return x + F.dropout(self.fc2(F.gelu(self.fc1(self.ln2(x)), approximate="tanh")), 0.1)


for hidden, heads, seq in ((2048, 16, 4096), (4096, 32, 4096)):
    layers = 4
    model = torch.nn.Sequential(*[Block(hidden, heads) for _ in range(layers)]).to(dev, bf)
    x = torch.randn(1, seq, hidden, device=dev, dtype=bf, requires_grad=True)
    grad = torch.randn_like(x)

    def fwd():
        return model(x)

    def fwd_bwd():
        model(x).backward(grad)

    for _ in range(3):
        fwd_bwd()
    torch.cuda.synchronize()
    with torch.no_grad():
        t_fwd_nograd = timed(fwd, 10)
    t_fwd = timed(fwd, 10)  # with autograd bookkeeping, as training runs it
    t_step = timed(fwd_bwd, 10)
    # Model FLOPs per block: 24·s·h² (linears) + 2·s²·h (causal attention, forward).
    flops_fwd = 24.0 * seq * hidden * hidden + 2.0 * seq * seq * hidden
    emit({"gpt_block": {"hidden": hidden, "heads": heads, "seq": seq, "layers": layers},
          "forward_ms_per_layer": round(t_fwd / layers * 1e3, 3),
          "forward_no_grad_ms_per_layer": round(t_fwd_nograd / layers * 1e3, 3),
          "backward_ms_per_layer": round((t_step - t_fwd) / layers * 1e3, 3),
          "model_tflops": round(3 * flops_fwd * layers / t_step / 1e12, 1), "smi": smi()})
    del model, x, grad
    torch.cuda.empty_cache()
