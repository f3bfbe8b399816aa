"""What PyTorch computes for a few of train.py's iterations on small GPTs, for
`trainer/tests/torch_equivalence.rs` to hold vramfit's trainer (candle, hand-written backward) to.

Each case is a small model of nanoGPT's architecture (`../gpt.py`) whose parameters and token
batches are not random draws but a counter-based hash (SplitMix64) that the Rust test computes
too, so both sides start from the same bits without a weights file. PyTorch then runs train.py's
arithmetic in float64 (so the reference carries no float32 rounding of its own):
`gradient_accumulation_steps` micro-steps, each loss divided by their number before its
backward; `clip_grad_norm_(model.parameters(), 1.0)`; AdamW with nanoGPT's two groups
(weight_decay on tensors of two or more dimensions only, betas 0.9/0.95, eps 1e-8) at the
case's learning rate for that iteration; `zero_grad(set_to_none=True)`. Recorded per iteration:
the mean micro-step loss (what train.py logs) and the gradient norm before clipping; after the
last, each parameter's sum and sum of squares (c_attn's bias without its key third: see
`compared_parameters`) and the loss on a held-out batch.

usage: tests/reference/.venv/bin/python tests/reference/probes/torch_training_steps.py > \
           tests/reference/data/torch-training-steps.json
"""

import datetime
import json
import os
import platform
import sys

import torch

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from gpt import GPT, GPTConfig  # noqa: E402

MASK = (1 << 64) - 1


def splitmix(seed: int, k: int) -> int:
    """SplitMix64's output for counter k of stream `seed` (the Rust test's `hash`)."""
    z = (seed * 0x9E3779B97F4A7C15 + (k + 1) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
    return z ^ (z >> 31)


def uniform(seed: int, k: int) -> float:
    """A float64 in [-1, 1): 53 bits of the hash, scaled by powers of two (exact in both languages)."""
    return (splitmix(seed, k) >> 11) / float(1 << 52) - 1.0


def param_values(index: int, name: str, numel: int) -> list:
    """Parameter `index` (nanoGPT's named_parameters() order): layer-norm weights about 1, the rest
    about 0, spread enough that every gradient is far from zero."""
    base, scale = (1.0, 0.1) if name.endswith("weight") and (".ln_" in name or "ln_f" in name) else (0.0, 0.25)
    return [base + scale * uniform(1000 + index, k) for k in range(numel)]


def tokens(seed: int, b: int, t: int, vocab: int) -> torch.Tensor:
    return torch.tensor([splitmix(seed, k) % vocab for k in range(b * t)], dtype=torch.long).view(b, t)


def compared_parameters(model, n_embd: int):
    """Each parameter as the comparison sees it: c_attn's bias without its key third. The loss does
    not depend on the key bias (it adds the same q.b_k to every score of a row, which softmax
    cancels), so its gradient is rounding noise, which AdamW normalises into full-size steps of
    either sign: float32 and float64 take different ones."""
    for name, p in model.named_parameters():
        if name.endswith("attn.c_attn.bias"):
            p = torch.cat([p[:n_embd], p[2 * n_embd:]])
        yield name, p


CASES = [
    # name, model, micro-batch and sequence length (up to block_size), micro-steps, lr per iteration
    dict(id="bias", n_layer=2, n_head=2, n_embd=32, block_size=16, vocab_size=65, bias=True,
         batch=4, seq=16, micro_steps=1, lrs=[1e-3, 1e-3, 6e-4, 3e-4]),
    dict(id="no-bias-accumulating", n_layer=2, n_head=4, n_embd=32, block_size=16, vocab_size=97, bias=False,
         batch=3, seq=16, micro_steps=3, lrs=[2e-3, 1e-3, 1e-3]),
    dict(id="short-sequences", n_layer=3, n_head=2, n_embd=24, block_size=16, vocab_size=50, bias=True,
         batch=2, seq=11, micro_steps=2, lrs=[1e-3, 5e-4, 5e-4]),
    # The trainer's memory savers must not change the arithmetic: same model as "bias".
    dict(id="bias-checkpointed-chunked", n_layer=2, n_head=2, n_embd=32, block_size=16, vocab_size=65, bias=True,
         batch=4, seq=16, micro_steps=1, lrs=[1e-3, 1e-3, 6e-4, 3e-4],
         trainer=dict(activation_checkpointing=True, chunked_loss=True, loss_chunk_rows=5)),
]
BETAS, EPS, WEIGHT_DECAY, GRAD_CLIP = (0.9, 0.95), 1e-8, 0.1, 1.0


def run(case: dict) -> dict:
    cfg = GPTConfig(block_size=case["block_size"], vocab_size=case["vocab_size"], n_layer=case["n_layer"],
                    n_head=case["n_head"], n_embd=case["n_embd"], dropout=0.0, bias=case["bias"])
    model = GPT(cfg)
    names = []
    with torch.no_grad():
        for i, (name, p) in enumerate(model.named_parameters()):
            names.append(name)
            # float32 first: the trainer's parameters are float32, so both start from these bits.
            values = torch.tensor(param_values(i, name, p.numel()), dtype=torch.float32).view(p.shape)
            p.copy_(values)
    model = model.double()
    opt, _ = model.configure_optimizers(WEIGHT_DECAY, case["lrs"][0], BETAS, "cpu", fused=False)
    for group in opt.param_groups:
        group["eps"] = EPS
    b, t, ga = case["batch"], case["seq"], case["micro_steps"]
    iterations = []
    batch_seed = 1
    for lr in case["lrs"]:
        for group in opt.param_groups:
            group["lr"] = lr
        loss_sum = 0.0
        for _ in range(ga):
            x = tokens(batch_seed, b, t, cfg.vocab_size)
            y = tokens(batch_seed + 1, b, t, cfg.vocab_size)
            batch_seed += 2
            _, loss = model(x, y)
            loss_sum += loss.item()
            (loss / ga).backward()
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), GRAD_CLIP)
        opt.step()
        opt.zero_grad(set_to_none=True)
        iterations.append(dict(lr=lr, loss=loss_sum / ga, grad_norm=norm.item()))
    with torch.no_grad():
        _, held_out = model(tokens(999, b, t, cfg.vocab_size), tokens(1000, b, t, cfg.vocab_size))
        params = {name: dict(sum=p.sum().item(), sum_sq=(p * p).sum().item())
                  for name, p in compared_parameters(model, cfg.n_embd)}
    return dict(case, names=names, iterations=iterations, held_out_loss=held_out.item(), params=params)


def main() -> None:
    torch.use_deterministic_algorithms(True)
    out = dict(
        provenance=dict(
            script="tests/reference/probes/torch_training_steps.py",
            torch=torch.__version__, python=platform.python_version(), device="cpu", dtype="float64",
            date=datetime.date.today().isoformat(),
            hash="SplitMix64: z = seed * 0x9E3779B97F4A7C15 + (k + 1) * 0xBF58476D1CE4E5B9, then its finalizer",
            batches="micro-step j of the run (from 0) takes x = tokens(1 + 2j), y = tokens(2 + 2j); held out: 999, 1000",
            adamw=dict(betas=BETAS, eps=EPS, weight_decay=WEIGHT_DECAY, grad_clip=GRAD_CLIP),
        ),
        cases=[run(c) for c in CASES],
    )
    json.dump(out, sys.stdout, indent=1)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
