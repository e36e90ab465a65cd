# Fused (flash) attention microbenchmark: PyTorch SDPA's cuDNN and FlashAttention-2 backends,
# bf16, causal, head dim 128 (and 64), per-GPU head counts of tensor-parallel runs.
# Prints one JSON object per line: backend, b, heads, kv_heads, seq, head_dim, fwd_ms, fwd_bwd_ms.
import json, sys, time, torch, datetime
import torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend
dev = torch.device("cuda")
info = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(), "date": datetime.datetime.utcnow().isoformat() + "Z"}
print(json.dumps({"env": info}), flush=True)
def timeit(fn, iters):
    for _ in range(3): fn()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(iters): fn()
    e.record(); torch.cuda.synchronize()
    return s.elapsed_time(e) / iters
shapes = []
for d in (128,):
    for (h, kvh) in ((4, 1), (8, 1), (8, 8), (12, 12), (16, 2), (32, 8), (32, 32), (64, 8)):
        for s in (2048, 4096, 8192, 16384):
            b = max(1, 16384 // s)
            shapes.append((b, h, kvh, s, d))
shapes += [(4, 16, 16, 2048, 64), (2, 32, 32, 4096, 64), (1, 32, 32, 8192, 64)]
for backend_name, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash2", SDPBackend.FLASH_ATTENTION)):
    for (b, h, kvh, s, d) in shapes:
        q = torch.randn(b, h, s, d, device=dev, dtype=torch.bfloat16, requires_grad=True)
        k = torch.randn(b, kvh, s, d, device=dev, dtype=torch.bfloat16, requires_grad=True)
        v = torch.randn(b, kvh, s, d, device=dev, dtype=torch.bfloat16, requires_grad=True)
        g = torch.randn(b, h, s, d, device=dev, dtype=torch.bfloat16)
        row = {"backend": backend_name, "b": b, "heads": h, "kv_heads": kvh, "seq": s, "head_dim": d}
        try:
            with sdpa_kernel(backend):
                gqa = kvh != h
                def fwd():
                    with torch.no_grad():
                        return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
                def fwdbwd():
                    o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=gqa)
                    o.backward(g)
                row["fwd_ms"] = round(timeit(fwd, 10), 4)
                row["fwd_bwd_ms"] = round(timeit(fwdbwd, 10), 4)
        except Exception as ex:
            row["error"] = str(ex)[:200]
        print(json.dumps(row), flush=True)
        del q, k, v, g
