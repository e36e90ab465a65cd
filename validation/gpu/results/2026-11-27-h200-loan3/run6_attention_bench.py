# Fused (flash) attention microbenchmark, second set: PyTorch SDPA's cuDNN backend, bf16,
# causal, head dim 64 (GPT-OSS) and 192/128 (DeepSeek's multi-head latent attention: queries
# and keys 192 wide, values 128), per-GPU head counts of tensor-parallel runs. Prints one
# JSON object per line: backend, b, heads, kv_heads, seq, head_dim, v_head_dim, fwd_ms,
# fwd_bwd_ms.
import json, sys, time, torch, datetime
import torch.nn.functional as F
from torch.nn.attention import sdpa_kernel, SDPBackend
dev = torch.device("cuda")
info = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version(), "date": datetime.datetime.now(datetime.timezone.utc).isoformat()}
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
for (h, kvh) in ((8, 1), (16, 2), (32, 4), (64, 8)):
    for seq in (2048, 4096, 8192, 16384):
        shapes.append((max(1, 16384 // seq), h, kvh, seq, 64, 64))
for h in (8, 16, 32, 128):
    for seq in (2048, 4096, 8192):
        shapes.append((max(1, 16384 // seq), h, h, seq, 192, 128))
for backend_name, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION),):
    for (b, h, kvh, s, d, dv) in shapes:
        q = torch.randn(b, h, s, d, device=dev, dtype=torch.bfloat16, requires_grad=True)
        k = torch.randn(b, kvh, s, d, device=dev, dtype=torch.bfloat16, requires_grad=True)
        v = torch.randn(b, kvh, s, dv, device=dev, dtype=torch.bfloat16, requires_grad=True)
        g = torch.randn(b, h, s, dv, device=dev, dtype=torch.bfloat16)
        row = {"backend": backend_name, "b": b, "heads": h, "kv_heads": kvh, "seq": s, "head_dim": d, "v_head_dim": dv}
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
