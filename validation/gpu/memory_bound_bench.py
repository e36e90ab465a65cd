# Memory-bound kernels of a transformer layer as PyTorch runs them (bf16 unless said), on one GPU:
# one JSON object per line: kernel, shape, bytes (read + written, counted as below), ms.
import json, torch, datetime
import torch.nn.functional as F
dev = torch.device("cuda")
print(json.dumps({"env": {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "cuda": torch.version.cuda,
                          "date": datetime.datetime.now(datetime.timezone.utc).isoformat()}}), flush=True)
def timeit(fn, iters=20):
    for _ in range(3): fn()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    s.record()
    for _ in range(iters): fn()
    e.record(); torch.cuda.synchronize()
    return s.elapsed_time(e) / iters
bf = torch.bfloat16
for tokens, hidden in ((4096, 4096), (8192, 4096), (16384, 4096), (8192, 8192), (16384, 8192), (2048, 12288), (8192, 12288)):
    x = torch.randn(tokens, hidden, device=dev, dtype=bf)
    y = torch.randn(tokens, hidden, device=dev, dtype=bf)
    w = torch.ones(hidden, device=dev, dtype=bf)
    b = torch.zeros(hidden, device=dev, dtype=bf)
    n = tokens * hidden
    rows = [
        ("copy", lambda: x.clone(), 4 * n),
        ("add", lambda: x + y, 6 * n),
        ("layer_norm_fwd", lambda: F.layer_norm(x, (hidden,), w, b), 4 * n),
        ("rms_norm_fwd", lambda: F.rms_norm(x, (hidden,), w), 4 * n),
        ("gelu_fwd", lambda: F.gelu(x, approximate="tanh"), 4 * n),
        ("swiglu_fwd", lambda: F.silu(x) * y, 6 * n),
        ("dropout_add_fwd", lambda: F.dropout(x, 0.1, True) + y, 6 * n),
    ]
    for name, fn, nbytes in rows:
        print(json.dumps({"kernel": name, "tokens": tokens, "hidden": hidden, "bytes": nbytes, "ms": round(timeit(fn), 5)}), flush=True)
    xr = x.clone().requires_grad_(True)
    g = torch.randn_like(x)
    def ln_bwd():
        o = F.layer_norm(xr, (hidden,), w, b); o.backward(g)
    print(json.dumps({"kernel": "layer_norm_fwd_bwd", "tokens": tokens, "hidden": hidden, "bytes": 4 * n + 6 * n, "ms": round(timeit(ln_bwd), 5)}), flush=True)
    def gelu_bwd():
        o = F.gelu(xr, approximate="tanh"); o.backward(g)
    print(json.dumps({"kernel": "gelu_fwd_bwd", "tokens": tokens, "hidden": hidden, "bytes": 4 * n + 6 * n, "ms": round(timeit(gelu_bwd), 5)}), flush=True)
    del x, y, xr, g
for tokens, vocab in ((4096, 32000), (8192, 50304), (8192, 128256), (4096, 256000)):
    logits = torch.randn(tokens, vocab, device=dev, dtype=bf)
    target = torch.randint(0, vocab, (tokens,), device=dev)
    print(json.dumps({"kernel": "cross_entropy_fwd", "tokens": tokens, "vocab": vocab, "bytes": 2 * tokens * vocab,
                      "ms": round(timeit(lambda: F.cross_entropy(logits.float(), target)), 5), "note": "logits cast to fp32 first (as Megatron's loss)"}), flush=True)
    del logits
for params in (50_000_000, 200_000_000, 800_000_000):
    p = [torch.randn(params, device=dev, dtype=torch.float32)]
    gr = [torch.randn(params, device=dev, dtype=torch.float32)]
    m = [torch.zeros(params, device=dev, dtype=torch.float32)]
    v = [torch.zeros(params, device=dev, dtype=torch.float32)]
    st = [torch.tensor(1.0, device=dev)]
    def adam():
        torch._fused_adam_(p, gr, m, v, [], st, lr=1e-4, beta1=0.9, beta2=0.95, weight_decay=0.1, eps=1e-8, amsgrad=False, maximize=False)
    print(json.dumps({"kernel": "fused_adam_fp32", "params": params, "bytes": 4 * params * 7, "ms": round(timeit(adam, 10), 5),
                      "note": "reads p, g, m, v; writes p, m, v"}), flush=True)
    del p, gr, m, v
