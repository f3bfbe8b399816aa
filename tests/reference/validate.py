#!/usr/bin/env python3
"""Validates the cpu-fake method.

1. fake == real: every phase record (start, peak, end, unrounded peak) of the cpu-fake method equals
   the one measured on real CPU tensors with the same tracker, for tiny configs covering every
   feature (dtypes, bias, manual attention, GA, dropout, checkpointing, SGD, eval batch/block).
   This shows that FakeTensorMode does not change any tensor's size or lifetime.
2. hand calculation: live bytes at phase boundaries equal sums computed from the parameter shapes
   (parameters, gradients, AdamW state, batch, logits, loss), with the 512-byte rounding.
3. cudalike emulation: the forward pass (training and no_grad) of the cpu-fake-cudalike method
   allocates and frees exactly what the same forward does on *fake CUDA tensors* with CUDA's
   autocast kernels switched on (the real AutocastCUDA dispatch rules run; only the kernels are
   meta). Manual attention only: without a GPU, SDPA on fake CUDA tensors picks the math backend.
   (The backward cannot run on fake CUDA tensors without a GPU.)

Run:  .venv/bin/python validate.py   (exit status 0 when everything matches)
"""

from __future__ import annotations

import contextlib
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from measure import measure  # noqa: E402
from memtrack import round_up  # noqa: E402

TINY = dict(n_layer=2, n_head=2, n_embd=32, block_size=32, vocab_size=65, batch_size=2)

CASES = {
    "fp32-flash-bias": dict(bias=True),
    "fp32-flash-nobias-ga2": dict(bias=False, gradient_accumulation_steps=2),
    "bf16-flash": dict(dtype="bfloat16"),
    "fp16-flash-ga2": dict(dtype="float16", gradient_accumulation_steps=2),
    "bf16-manual": dict(dtype="bfloat16", attention="manual", bias=True),
    "fp32-manual": dict(attention="manual"),
    "fp32-dropout": dict(dropout=0.1),
    "bf16-dropout-manual": dict(dtype="bfloat16", dropout=0.1, attention="manual"),
    "bf16-ckpt": dict(dtype="bfloat16", activation_checkpointing=True),
    "fp32-sgd": dict(optimizer="sgd"),
    "bf16-evalbatch": dict(dtype="bfloat16", eval_batch_size=5, eval_block_size=16),
}


def phase_map(row):
    keys = row["phases"][0]
    return {r[0]: dict(zip(keys, r)) for r in row["phases"][1:]}


def check_fake_vs_real() -> int:
    bad = 0
    for name, over in CASES.items():
        cfg = {"id": name, **TINY, **over}
        a = measure(cfg, "cpu-fake")
        b = measure(cfg, "cpu-real")
        if a["status"] != "ok" or b["status"] != "ok":
            print(f"FAIL {name}: {a['error']} / {b['error']}")
            bad += 1
            continue
        same = a["phases"] == b["phases"]
        diffs = []
        if not same:
            pa, pb = phase_map(a), phase_map(b)
            diffs = [(k, pa[k], pb.get(k)) for k in pa if pa[k] != pb.get(k)][:3]
        print(f"{'ok  ' if same else 'DIFF'} fake==real {name:24s} train_peak={a['train_peak_allocated_bytes']} "
              f"eval_peak={a['eval_peak_allocated_bytes']}")
        for d in diffs:
            print("     ", d)
        bad += not same
    return bad


def check_hand(over: dict) -> int:
    """Boundary live bytes from first principles (GA=1, AdamW, fp32 logits unless autocast)."""
    from gpt import GPT, GPTConfig
    import torch

    cfg = {**TINY, **over}
    row = measure({"id": "hand", **cfg}, "cpu-fake")
    assert row["status"] == "ok", row["error"]
    ph = phase_map(row)
    B, T, V = cfg["batch_size"], cfg["block_size"], cfg["vocab_size"]
    with torch.device("meta"):
        m = GPT(GPTConfig(block_size=T, vocab_size=V, n_layer=cfg["n_layer"], n_head=cfg["n_head"],
                          n_embd=cfg["n_embd"], bias=cfg.get("bias", False),
                          attention=cfg.get("attention", "flash")))
    params = sum(round_up(p.numel() * 4) for p in m.parameters())
    buffers = sum(round_up(b.numel() * 4) for b in m.buffers())
    grads = params
    adam = 2 * params + 512 * len(list(m.parameters()))  # exp_avg, exp_avg_sq, fp32 step scalar
    batch = 2 * round_up(B * T * 8)
    logit_bytes = 2 if cfg.get("dtype", "float32") != "float32" else 4
    logits = round_up(B * T * V * logit_bytes)
    loss = 512
    scaler = 2 * 512 if cfg.get("dtype") == "float16" else 0  # GradScaler _scale, _growth_tracker
    expect = {
        ("init", "end"): params + buffers + batch,
        ("eval0", "start"): params + buffers + batch,
        ("eval0", "end"): params + buffers + batch,
        ("it1.bwd0", "end"): params + buffers + grads + batch + logits + loss + scaler,
        ("it1.zero_grad", "end"): params + buffers + adam + batch + logits + loss + scaler,
        ("it2.zero_grad", "end"): params + buffers + adam + batch + logits + loss + scaler,
        ("eval", "end"): params + buffers + adam + batch + logits + loss + scaler,
    }
    bad = 0
    for (p, k), v in expect.items():
        got = ph[p][k]
        ok = got == v
        bad += not ok
        print(f"{'ok  ' if ok else 'FAIL'} hand {str(over):60s} {p}.{k}: measured {got} expected {v}")
    return bad


@contextlib.contextmanager
def _forced_cuda_autocast(dtype):
    """torch.autocast('cuda') refuses to enable without a GPU; set the same TLS state directly."""
    import torch
    prev = (torch.is_autocast_enabled("cuda"), torch.get_autocast_dtype("cuda"))
    torch.set_autocast_enabled("cuda", True)
    torch.set_autocast_dtype("cuda", dtype)
    torch.autocast_increment_nesting()
    try:
        yield
    finally:
        if torch.autocast_decrement_nesting() == 0:
            torch.clear_autocast_cache()
        torch.set_autocast_enabled("cuda", prev[0])
        torch.set_autocast_dtype("cuda", prev[1])


def _forward_events(device, dtype, dropout, training, cudalike_on):
    import torch
    from torch._subclasses.fake_tensor import FakeTensorMode
    from cudalike import cuda_semantics
    from gpt import GPT, GPTConfig
    from memtrack import LiveBytesTracker

    ev = []
    with FakeTensorMode():
        with torch.device(device):
            m = GPT(GPTConfig(block_size=32, vocab_size=65, n_layer=2, n_head=2, n_embd=32,
                              attention="manual", dropout=dropout, bias=True))
        m.train(training)
        X = torch.randint(65, (2, 32), device=device)
        Y = torch.randint(65, (2, 32), device=device)
        tr = LiveBytesTracker(only_fake=True, on_event=ev.append)
        if dtype == torch.float32:
            ac = contextlib.nullcontext()  # nanoGPT's ctx for float32 here
        elif device == "cuda":
            ac = _forced_cuda_autocast(dtype)
        else:
            ac = torch.autocast("cpu", dtype=dtype)
        with tr, (cuda_semantics() if cudalike_on else contextlib.nullcontext()), ac:
            with (contextlib.nullcontext() if training else torch.no_grad()):
                logits, loss = m(X, Y)
        del logits, loss
    # canonical form: allocations in order; consecutive frees as a sorted multiset (the autocast
    # cache is cleared in hash-map order, which does not affect any peak)
    out, frees = [], []
    for e in ev:
        if e["ev"] == "free":
            frees.append(e["bytes"])
            continue
        if frees:
            out.append(("free", tuple(sorted(frees))))
            frees = []
        out.append(("alloc", e["op"], e["bytes"], tuple(e["shape"]), e["dtype"]))
    if frees:
        out.append(("free", tuple(sorted(frees))))
    return out


def check_cudalike_forward() -> int:
    import torch
    bad = 0
    for dtype in (torch.bfloat16, torch.float16, torch.float32):
        for dropout in (0.0, 0.1):
            for training in (True, False):
                a = _forward_events("cuda", dtype, dropout, training, False)
                b = _forward_events("cpu", dtype, dropout, training, True)
                c = _forward_events("cpu", dtype, dropout, training, False)
                ok = a == b
                bad += not ok
                print(f"{'ok  ' if ok else 'FAIL'} cudalike fwd == fake-CUDA fwd  {str(dtype):15s} dropout={dropout} "
                      f"{'train' if training else 'eval '}  ({len(a)} events; plain cpu-fake "
                      f"{'same' if a == c else 'differs'})")
    return bad


def main():
    bad = check_fake_vs_real()
    for over in (dict(bias=True), dict(bias=False, dtype="bfloat16"), dict(attention="manual", dtype="float16")):
        bad += check_hand(over)
    bad += check_cudalike_forward()
    print("ALL OK" if bad == 0 else f"{bad} FAILURES")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
