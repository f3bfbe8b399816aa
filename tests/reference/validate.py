#!/usr/bin/env python3
"""Validates the cpu-fake method.

1. fake == real: every phase record (start, peak, end, unrounded peak) of the cpu-fake method equals
   the one measured on real CPU tensors with the same tracker, for tiny configs covering every
   feature (dtypes, bias, manual attention, GA, dropout, checkpointing, SGD, eval batch/block).
   This shows that FakeTensorMode does not change any tensor's size or lifetime.
2. hand calculation: live bytes at phase boundaries equal sums computed from the parameter shapes
   (parameters, gradients, AdamW state, batch, logits, loss), with the 512-byte rounding.

Run:  .venv/bin/python validate.py   (exit status 0 when everything matches)
"""

from __future__ import annotations

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


def main():
    bad = check_fake_vs_real()
    for over in (dict(bias=True), dict(bias=False, dtype="bfloat16"), dict(attention="manual", dtype="float16")):
        bad += check_hand(over)
    print("ALL OK" if bad == 0 else f"{bad} FAILURES")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
