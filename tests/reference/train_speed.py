"""Training tokens per second of PyTorch eager on CPU for one nanoGPT config, for comparison with
`vramfit train` (trainer/benches/train_speed.rs runs both in one go).

The loop is nanoGPT's train.py on CPU: micro-steps of forward, loss / GA and backward, clipping by
global norm, AdamW (nanoGPT's groups; on CPU train.py's AdamW is the plain, unfused one) and
zero_grad(set_to_none=True). Batches are random token ids: speed does not depend on the text.

usage: train_speed.py '{"n_layer":2,...,"iters":20,"warmup":3,"threads":1}'
prints one JSON line: {"tokens_per_s": ..., "secs_per_iter": ..., "torch": "..."}
"""

import json
import sys
import time

import torch

from gpt import GPT, GPTConfig


def main() -> None:
    a = json.loads(sys.argv[1])
    torch.set_num_threads(a["threads"])
    torch.manual_seed(1337)
    cfg = GPTConfig(block_size=a["block_size"], vocab_size=a["vocab_size"], n_layer=a["n_layer"], n_head=a["n_head"],
                    n_embd=a["n_embd"], dropout=a.get("dropout", 0.0), bias=a.get("bias", False),
                    attention=a.get("attention", "flash"))
    model = GPT(cfg)
    model.train()
    opt, _ = model.configure_optimizers(0.1, 1e-3, (0.9, 0.95), "cpu")
    b, t, ga = a["batch_size"], a["block_size"], a["gradient_accumulation_steps"]

    def iteration() -> None:
        for _ in range(ga):
            x = torch.randint(a["vocab_size"], (b, t))
            y = torch.randint(a["vocab_size"], (b, t))
            _, loss = model(x, y)
            (loss / ga).backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(a["warmup"]):
        iteration()
    start = time.perf_counter()
    for _ in range(a["iters"]):
        iteration()
    secs = (time.perf_counter() - start) / a["iters"]
    print(json.dumps({"tokens_per_s": b * t * ga / secs, "secs_per_iter": secs, "torch": torch.__version__}))


if __name__ == "__main__":
    main()
