"""Training tokens per second of PyTorch eager for one nanoGPT config, for comparison with
`vramfit train` (trainer/benches/train_speed.rs runs both in one go on the CPU;
tests/reference/probes/trainer_cuda.sh on a GPU).

The loop is nanoGPT's train.py on CPU: micro-steps of forward, loss / GA and backward, clipping by
global norm, AdamW (nanoGPT's groups; on CPU train.py's AdamW is the plain, unfused one) and
zero_grad(set_to_none=True). Batches are random token ids: speed does not depend on the text.
With "device": "cuda" it is train.py on a GPU: fused AdamW, TF32 matmuls, and autocast for
"dtype" bfloat16 / float16 (with GradScaler for float16); timing waits for the GPU to finish.

usage: train_speed.py '{"n_layer":2,...,"iters":20,"warmup":3,"threads":1}'
prints one JSON line: {"tokens_per_s": ..., "secs_per_iter": ..., "torch": "..."}
"""

import contextlib
import json
import sys
import time

import torch

from gpt import GPT, GPTConfig


def main() -> None:
    a = json.loads(sys.argv[1])
    device = a.get("device", "cpu")
    dtype = a.get("dtype", "float32")
    torch.set_num_threads(a.get("threads", 1))
    if device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    torch.manual_seed(1337)
    cfg = GPTConfig(block_size=a["block_size"], vocab_size=a["vocab_size"], n_layer=a["n_layer"], n_head=a["n_head"],
                    n_embd=a["n_embd"], dropout=a.get("dropout", 0.0), bias=a.get("bias", False),
                    attention=a.get("attention", "flash"))
    model = GPT(cfg).to(device)
    model.train()
    opt, _ = model.configure_optimizers(0.1, 1e-3, (0.9, 0.95), device)
    b, t, ga = a["batch_size"], a["block_size"], a["gradient_accumulation_steps"]
    amp = {"float32": None, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]
    ctx = torch.autocast(device_type=device, dtype=amp) if amp is not None else contextlib.nullcontext()
    scaler = torch.amp.GradScaler(device, enabled=(dtype == "float16"))

    def iteration() -> None:
        for _ in range(ga):
            x = torch.randint(a["vocab_size"], (b, t), device=device)
            y = torch.randint(a["vocab_size"], (b, t), device=device)
            with ctx:
                _, loss = model(x, y)
            scaler.scale(loss / ga).backward()
        scaler.unscale_(opt)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(opt)
        scaler.update()
        opt.zero_grad(set_to_none=True)

    def sync() -> None:
        if device == "cuda":
            torch.cuda.synchronize()

    for _ in range(a["warmup"]):
        iteration()
    sync()
    start = time.perf_counter()
    for _ in range(a["iters"]):
        iteration()
    sync()
    secs = (time.perf_counter() - start) / a["iters"]
    print(json.dumps({"tokens_per_s": b * t * ga / secs, "secs_per_iter": secs, "torch": torch.__version__,
                      "device": device, "dtype": dtype}))


if __name__ == "__main__":
    main()
