"""Draws configs at random for an out-of-sample check of core's model: the hand-picked rows of
`configs.json` are the ones the model was built against, these are not.

Each draw: 1-12 layers; 1-16 heads of 16-128 dimensions (n_embd up to 1024); a block from 32 to
1024, not only powers of two; micro-batch 1-24; a vocabulary from nanoGPT's (65, 50304) or any
size from 50 to 50304; float32, bfloat16 or float16; flash or manual attention; bias; 1-4
micro-steps; sometimes an eval batch of its own, activation checkpointing, dropout 0.1 or SGD
(not with float16, which the harness cannot measure on the CPU).
The same seed gives the same configs.

`--space wide` draws only configs whose CPU trace is held to the byte (float32, no dropout) and
reaches where the default space does not: 1-24 layers, head dimensions that are not multiples of
16 (8-160), n_embd up to 2048, an eval block shorter than the training block, blocks up to 2048,
SGD and checkpointing more often. `--space wide-mixed` draws the same shapes in bfloat16 and
float16, with dropout 0.1 in a quarter of them: CPU rows the harness labels (CPU autocast and
dropout differ from CUDA's), for `run_all.py --method cpu-fake-cudalike`, the harness's
emulation of CUDA's dispatch, to compare core's CUDA rules with. The default space is unchanged,
so earlier seeds redraw the same configs.
`--space odd-heads` draws flash-attention configs with the head sizes some SDPA kernels refuse:
float32 heads that are not a multiple of 4 (7 in 10 draws) and bfloat16/float16 heads over 256,
some of them not a multiple of 8, a few (B,H,T,T) fp32 matrices per layer within 24 GiB.
`--space compiled` draws the default space's shapes up to 768 wide with `compile=True` (no
checkpointing), for the compile model's out-of-sample check on a GPU.

usage: python3 probes/random_configs.py [--seed S] [--n N] > random_configs.json
then:  .venv/bin/python run_all.py --method cpu-fake --configs random_configs.json \
           --out data/cpu-fake-random.json -j 2
"""

import argparse
import json
import random
import sys


def draw(rng: random.Random, index: int) -> dict:
    while True:
        n_head = rng.choice([1, 2, 3, 4, 6, 8, 12, 16])
        head_dim = rng.choice([16, 32, 48, 64, 80, 96, 128])
        if n_head * head_dim <= 1024:
            break
    n_embd = n_head * head_dim
    vocab = rng.choice([65, 50304, rng.randint(50, 50304)])
    block = rng.choice([32, 64, 100, 128, 200, 256, 384, 512, 1000, 1024])
    cfg = dict(
        n_layer=rng.randint(1, 12),
        n_head=n_head,
        n_embd=n_embd,
        block_size=block,
        batch_size=rng.randint(1, 24),
        vocab_size=vocab,
        dtype=rng.choice(["float32", "bfloat16", "float16"]),
        attention=rng.choice(["flash", "manual"]),
        bias=rng.random() < 0.5,
        gradient_accumulation_steps=rng.randint(1, 4),
        dropout=0.1 if rng.random() < 0.15 else 0.0,
        activation_checkpointing=rng.random() < 0.2,
        optimizer="sgd" if rng.random() < 0.1 else "adamw",
        eval_batch_size=rng.randint(1, 32) if rng.random() < 0.25 else None,
        eval_iters=2,
        compile=False,
    )
    if cfg["dtype"] == "float16" and cfg["optimizer"] == "sgd":
        # The harness cannot measure it on the CPU: GradScaler's unscale before a plain
        # optimizer asks for a tensor's value (`.item()`), which FakeTensorMode does not have.
        cfg["optimizer"] = "adamw"
    short = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}[cfg["dtype"]]
    cfg_id = (f"random-{index:02d}-L{cfg['n_layer']}H{n_head}C{n_embd}-T{block}-B{cfg['batch_size']}-V{vocab}"
              f"-{short}-{cfg['attention']}")
    return dict(id=cfg_id, **cfg)


def draw_wide(rng: random.Random, index: int, mixed: bool = False) -> dict:
    while True:
        n_head = rng.choice([1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 20, 25])
        head_dim = rng.choice([8, 12, 20, 24, 40, 56, 64, 72, 100, 128, 160])
        if n_head * head_dim <= 2048:
            break
    n_embd = n_head * head_dim
    vocab = rng.choice([65, 50257, 50304, rng.randint(2, 50304)])
    block = rng.choice([16, 33, 64, 127, 256, 300, 512, 777, 1024, 2048])
    # Small models may be long and deep; keep the trace's tensors within a few GB of shapes.
    n_layer = rng.randint(1, 24 if n_embd <= 768 else 8)
    eval_block = rng.randint(1, block) if rng.random() < 0.3 else None
    cfg = dict(
        n_layer=n_layer,
        n_head=n_head,
        n_embd=n_embd,
        block_size=block,
        batch_size=rng.randint(1, 16 if block <= 1024 else 4),
        vocab_size=vocab,
        dtype=rng.choice(["bfloat16", "float16"]) if mixed else "float32",
        attention=rng.choice(["flash", "manual"]),
        bias=rng.random() < 0.5,
        gradient_accumulation_steps=rng.randint(1, 5),
        dropout=0.1 if mixed and rng.random() < 0.25 else 0.0,
        activation_checkpointing=rng.random() < 0.3,
        optimizer="sgd" if rng.random() < 0.25 else "adamw",
        eval_batch_size=rng.randint(1, 32) if rng.random() < 0.3 else None,
        eval_block_size=eval_block,
        eval_iters=2,
        compile=False,
    )
    if cfg["dtype"] == "float16" and cfg["optimizer"] == "sgd":
        cfg["optimizer"] = "adamw"  # as in draw(): the harness cannot measure it on the CPU
    short = {"float32": "", "bfloat16": "-bf16", "float16": "-fp16"}[cfg["dtype"]]
    cfg_id = (f"wide-{index:03d}-L{n_layer}H{n_head}C{n_embd}-T{block}-B{cfg['batch_size']}-V{vocab}"
              f"{short}-{cfg['attention']}")
    return dict(id=cfg_id, **cfg)


def draw_odd_heads(rng: random.Random, index: int) -> dict:
    """Flash-attention configs whose head size some of PyTorch's SDPA kernels refuse: float32
    heads that are not a multiple of 4 (the memory-efficient kernel's alignment; flash and cuDNN
    take no float32) and bfloat16/float16 heads over flash's 256, some not a multiple of 8."""
    while True:
        if rng.random() < 0.7:
            dtype = "float32"
            head_dim = rng.choice([1, 2, 3, 5, 6, 7, 9, 10, 11, 13, 15, 18, 22, 25, 30, 33, 42, 50, 65, 66, 90, 130])
            n_head = rng.choice([1, 2, 3, 4, 5, 6, 7, 8, 12, 16])
        else:
            dtype = rng.choice(["bfloat16", "float16"])
            head_dim = rng.choice([260, 264, 272, 288, 300, 320, 330, 384, 512])
            n_head = rng.choice([1, 2, 3, 4])
        n_embd = n_head * head_dim
        block = rng.choice([16, 33, 64, 127, 256, 300, 512, 777, 1024])
        batch = rng.randint(1, 16 if block <= 512 else 8)
        n_layer = rng.randint(1, 12)
        # The math path keeps a few (B,H,T,T) float32 matrices per layer: stay well inside 78 GiB.
        if n_embd <= 2048 and n_layer * batch * n_head * block * block * 4 * 4 <= 24 * 2**30:
            break
    cfg = dict(
        n_layer=n_layer,
        n_head=n_head,
        n_embd=n_embd,
        block_size=block,
        batch_size=batch,
        vocab_size=rng.choice([65, 50257, 50304, rng.randint(2, 50304)]),
        dtype=dtype,
        attention="flash",
        bias=rng.random() < 0.5,
        gradient_accumulation_steps=rng.randint(1, 4),
        dropout=0.1 if rng.random() < 0.3 else 0.0,
        activation_checkpointing=rng.random() < 0.25,
        optimizer="sgd" if dtype != "float16" and rng.random() < 0.15 else "adamw",
        eval_batch_size=rng.randint(1, 32) if rng.random() < 0.25 else None,
        eval_block_size=rng.randint(1, block) if rng.random() < 0.2 else None,
        eval_iters=2,
        compile=False,
    )
    short = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}[dtype]
    cfg_id = f"odd-{index:03d}-L{n_layer}H{n_head}C{n_embd}-T{block}-B{batch}-V{cfg['vocab_size']}-{short}"
    return dict(id=cfg_id, **cfg)


def draw_compiled(rng: random.Random, index: int) -> dict:
    """nanoGPT's default, `compile=True`, over the default space's shapes (at most 768 wide and
    12 layers, so that inductor compiles each in about a minute), mostly flash attention."""
    cfg = draw(rng, index)
    while cfg["n_embd"] > 768:
        cfg = draw(rng, index)
    cfg.update(
        compile=True,
        activation_checkpointing=False,
        attention="flash" if rng.random() < 0.8 else "manual",
        batch_size=min(cfg["batch_size"], 16),
    )
    short = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16"}[cfg["dtype"]]
    cfg["id"] = (f"compiled-{index:02d}-L{cfg['n_layer']}H{cfg['n_head']}C{cfg['n_embd']}-T{cfg['block_size']}"
                 f"-B{cfg['batch_size']}-V{cfg['vocab_size']}-{short}-{cfg['attention']}")
    return cfg


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=20261126)
    ap.add_argument("--n", type=int, default=40)
    ap.add_argument("--space", choices=["default", "wide", "wide-mixed", "odd-heads", "compiled"], default="default")
    args = ap.parse_args()
    rng = random.Random(args.seed)
    picks = {"default": draw, "wide": draw_wide, "wide-mixed": lambda r, i: draw_wide(r, i, mixed=True),
             "odd-heads": draw_odd_heads, "compiled": draw_compiled}
    pick = picks[args.space]
    space = "" if args.space == "default" else f" --space {args.space}"
    out = dict(
        description=(f"random configs for an out-of-sample check (probes/random_configs.py --seed {args.seed} "
                     f"--n {args.n}{space}); memory does not depend on eval_iters >= 2"),
        configs=[pick(rng, i) for i in range(args.n)],
    )
    json.dump(out, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
