"""Makes a real Hugging Face GPT-2 checkpoint that `vramfit train --weights` can be checked against,
without downloading anything: a small GPT2LMHeadModel (2 layers, 4 heads, 128 wide, GPT-2's
vocabulary and 1024 positions) is trained by transformers on a token stream that repeats a
97-token pattern, until it predicts the stream almost perfectly, and saved with
`save_pretrained` (the same model.safetensors layout as the published gpt2 files: Conv1D weights
stored [in, out], `transformer.` names, the tied lm_head left out).

usage: python3 pretrained_check.py OUT_DIR
writes OUT_DIR/model/model.safetensors, OUT_DIR/data/{train,val}.bin (uint16 token ids, as
nanoGPT's prepare.py writes them) and prints the model's mean loss on random val windows of
128 tokens. Loaded correctly, vramfit's step-0 val loss on the same data must be about the same;
a model that did not load (random weights) scores about ln(50257) = 10.8.
"""

import json
import os
import sys

import numpy as np
import torch
from transformers import GPT2Config, GPT2LMHeadModel


def main() -> None:
    out = sys.argv[1]
    os.makedirs(f"{out}/data", exist_ok=True)
    rng = np.random.default_rng(7)
    pattern = rng.choice(50257, size=97, replace=False)
    stream = np.tile(pattern, 4000).astype(np.uint16)
    stream[: 300_000].tofile(f"{out}/data/train.bin")
    stream[300_000:].tofile(f"{out}/data/val.bin")

    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=2, n_head=4, n_embd=128, n_positions=1024, vocab_size=50257,
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = GPT2LMHeadModel(cfg).cuda()
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    data = torch.from_numpy(stream.astype(np.int64)).cuda()
    block, batch = 128, 32

    def windows(split_start: int, split_end: int) -> torch.Tensor:
        starts = torch.randint(split_start, split_end - block - 1, (batch,), device="cuda")
        return torch.stack([data[s: s + block + 1] for s in starts.tolist()])

    model.train()
    for step in range(300):
        w = windows(0, 300_000)
        logits = model(w[:, :-1]).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), w[:, 1:].reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    model.eval()
    with torch.no_grad():
        losses = []
        for _ in range(20):
            w = windows(300_000, len(stream))
            logits = model(w[:, :-1]).logits
            losses.append(torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), w[:, 1:].reshape(-1)).item())
    model.save_pretrained(f"{out}/model", safe_serialization=True)
    print(json.dumps({"hf_val_loss": sum(losses) / len(losses), "final_train_loss": loss.item(),
                      "files": sorted(os.listdir(f"{out}/model"))}))


if __name__ == "__main__":
    main()
