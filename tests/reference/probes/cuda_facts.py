"""Facts about the CUDA runtime that the memory model needs, printed as JSON lines.

Run on a machine with a CUDA GPU: python3 tests/reference/probes/cuda_facts.py
Measures: CUDA context size (nvidia-smi per process after init), cudaMemGetInfo total,
cuBLAS workspace bytes allocated by the first matmul on the main thread and on the autograd
thread, which SDPA kernels run for bf16/fp16/fp32 (profiler kernel names), and whether the
bf16/fp16 log_softmax under autocast makes an fp32 copy of its input.
"""
import json, os, subprocess, sys
import torch
import torch.nn.functional as F

def smi_mib():
    out = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True).stdout
    for line in out.strip().splitlines():
        pid, mib = [x.strip() for x in line.split(",")]
        if int(pid) == os.getpid():
            return int(mib)
    return None

def emit(**kw):
    print(json.dumps(kw), flush=True)

dev = "cuda"
torch.cuda.init()
x = torch.zeros(1, device=dev)
free, total = torch.cuda.mem_get_info()
emit(fact="env", torch=torch.__version__, cuda=torch.version.cuda, gpu=torch.cuda.get_device_name(0),
     cc=list(torch.cuda.get_device_capability(0)), total_memory=torch.cuda.get_device_properties(0).total_memory,
     mem_get_info_total=total, mem_get_info_free=free, smi_after_init_mib=smi_mib(),
     allocated=torch.cuda.memory_allocated(), reserved=torch.cuda.memory_reserved(),
     flash=torch.backends.cuda.flash_sdp_enabled(), mem_eff=torch.backends.cuda.mem_efficient_sdp_enabled(),
     cudnn_sdp=torch.backends.cuda.cudnn_sdp_enabled(), math=torch.backends.cuda.math_sdp_enabled(),
     cublas_cfg=os.environ.get("CUBLAS_WORKSPACE_CONFIG"))

# cuBLAS workspace: first matmul on the main thread, then a backward (autograd thread).
for dtype in (torch.float32, torch.bfloat16):
    a = torch.randn(256, 256, device=dev, dtype=dtype, requires_grad=True)
    b = torch.randn(256, 256, device=dev, dtype=dtype)
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    c = a @ b
    torch.cuda.synchronize()
    after_fwd = torch.cuda.memory_allocated()
    c.sum().backward()
    torch.cuda.synchronize()
    after_bwd = torch.cuda.memory_allocated()
    emit(fact="cublas_workspace", dtype=str(dtype), before=before, after_fwd=after_fwd, after_bwd=after_bwd,
         fwd_delta_minus_out=after_fwd - before - c.numel() * c.element_size(),
         bwd_delta=after_bwd - after_fwd, grad_bytes=a.grad.numel() * a.grad.element_size(), smi_mib=smi_mib())
    del a, b, c

# Addmm/linear with 3-D input (nanoGPT's linear) — is there an extra workspace (cublasLt)?
lin = torch.nn.Linear(512, 512, device=dev)
inp = torch.randn(4, 64, 512, device=dev, requires_grad=True)
torch.cuda.synchronize(); before = torch.cuda.memory_allocated()
with torch.autocast("cuda", dtype=torch.bfloat16):
    out = lin(inp)
torch.cuda.synchronize(); mid = torch.cuda.memory_allocated()
out.float().sum().backward(); torch.cuda.synchronize()
emit(fact="linear_autocast", before=before, after_fwd=mid, after_bwd=torch.cuda.memory_allocated(), smi_mib=smi_mib(),
     reserved=torch.cuda.memory_reserved())
del lin, inp, out

# SDPA kernels by dtype.
from torch.profiler import profile, ProfilerActivity
for dtype in (torch.bfloat16, torch.float16, torch.float32):
    q = torch.randn(4, 6, 256, 64, device=dev, dtype=dtype, requires_grad=True)
    k = torch.randn(4, 6, 256, 64, device=dev, dtype=dtype, requires_grad=True)
    v = torch.randn(4, 6, 256, 64, device=dev, dtype=dtype, requires_grad=True)
    with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y.sum().backward()
        torch.cuda.synchronize()
    names = sorted({e.name for e in prof.events() if ("attention" in e.name.lower() or "flash" in e.name.lower()
                   or "fmha" in e.name.lower() or "cudnn" in e.name.lower() or "sdpa" in e.name.lower() or "efficient" in e.name.lower())})
    emit(fact="sdpa", dtype=str(dtype), ops=names[:20])
    del q, k, v, y

# log_softmax upcast under autocast: peak over cross_entropy of (N, V) logits.
for dtype in (torch.bfloat16, torch.float16):
    N, V = 4096, 8192
    logits = torch.randn(N, V, device=dev, dtype=dtype)
    tgt = torch.randint(0, V, (N,), device=dev)
    torch.cuda.synchronize(); torch.cuda.reset_peak_memory_stats(); base = torch.cuda.memory_allocated()
    with torch.no_grad(), torch.autocast("cuda", dtype=dtype):
        loss = F.cross_entropy(logits, tgt)
    torch.cuda.synchronize()
    emit(fact="cross_entropy_nograd", dtype=str(dtype), extra_peak_over_logits_elems=(torch.cuda.max_memory_allocated() - base) / (N * V))
    logits.requires_grad_(True)
    torch.cuda.reset_peak_memory_stats(); base = torch.cuda.memory_allocated()
    with torch.autocast("cuda", dtype=dtype):
        loss = F.cross_entropy(logits, tgt)
    fwd_peak = torch.cuda.max_memory_allocated() - base
    after_fwd = torch.cuda.memory_allocated() - base
    loss.backward(); torch.cuda.synchronize()
    emit(fact="cross_entropy_grad", dtype=str(dtype), fwd_peak_per_elem=fwd_peak / (N * V), kept_per_elem=after_fwd / (N * V),
         total_peak_per_elem=(torch.cuda.max_memory_allocated() - base) / (N * V))
    del logits, tgt, loss
emit(fact="end", smi_mib=smi_mib(), reserved=torch.cuda.memory_reserved())
