"""A GPT with nanoGPT's architecture, written for vramfit's reference measurements.

This is not nanoGPT's code, but it reproduces nanoGPT's model.py op for op (module names, parameter
shapes, weight tying, the exact sequence of tensor operations in forward) so that the tensors that
are allocated, saved for backward and freed are the same as in a nanoGPT training run.

Module tree (parameter names match nanoGPT's state_dict):
    transformer.wte, transformer.wpe, transformer.drop,
    transformer.h.{i}.{ln_1, attn.{c_attn, c_proj, attn_dropout, resid_dropout}, ln_2,
                       mlp.{c_fc, gelu, c_proj, dropout}},
    transformer.ln_f, lm_head (weight tied to transformer.wte.weight)
"""

from __future__ import annotations

import inspect
import math
from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint


@dataclass
class GPTConfig:
    block_size: int = 1024
    vocab_size: int = 50304
    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768
    dropout: float = 0.0
    bias: bool = True
    # 'flash' -> F.scaled_dot_product_attention; 'manual' -> explicit softmax(QK^T)V with a causal
    # mask buffer (nanoGPT's fallback when SDPA is unavailable).
    attention: str = "flash"
    # Run each block through torch.utils.checkpoint (non-reentrant) while training.
    # (nanoGPT itself has no such option; it is offered here as a documented extension.)
    activation_checkpointing: bool = False


class LayerNorm(nn.Module):
    """LayerNorm whose bias is optional (nn.LayerNorm cannot drop only the bias)."""

    def __init__(self, ndim: int, bias: bool):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        assert cfg.n_embd % cfg.n_head == 0, "n_embd must be divisible by n_head"
        assert cfg.attention in ("flash", "manual"), cfg.attention
        # q, k and v for all heads come out of one matmul
        self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd, bias=cfg.bias)
        self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=cfg.bias)
        self.attn_dropout = nn.Dropout(cfg.dropout)
        self.resid_dropout = nn.Dropout(cfg.dropout)
        self.n_head = cfg.n_head
        self.n_embd = cfg.n_embd
        self.dropout = cfg.dropout
        self.flash = cfg.attention == "flash"
        if not self.flash:
            # fp32 lower-triangular mask, (1, 1, block, block); exists only on the manual path
            mask = torch.tril(torch.ones(cfg.block_size, cfg.block_size))
            self.register_buffer("bias", mask.view(1, 1, cfg.block_size, cfg.block_size))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        hs = C // self.n_head
        q = q.view(B, T, self.n_head, hs).transpose(1, 2)  # (B, H, T, hs)
        k = k.view(B, T, self.n_head, hs).transpose(1, 2)
        v = v.view(B, T, self.n_head, hs).transpose(1, 2)
        if self.flash:
            y = F.scaled_dot_product_attention(
                q, k, v, attn_mask=None,
                dropout_p=self.dropout if self.training else 0,
                is_causal=True,
            )
        else:
            att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
            att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
            att = F.softmax(att, dim=-1)
            att = self.attn_dropout(att)
            y = att @ v  # (B, H, T, hs)
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # heads side by side again
        y = self.resid_dropout(self.c_proj(y))
        return y


class MLP(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.c_fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd, bias=cfg.bias)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * cfg.n_embd, cfg.n_embd, bias=cfg.bias)
        self.dropout = nn.Dropout(cfg.dropout)

    def forward(self, x):
        x = self.c_fc(x)
        x = self.gelu(x)
        x = self.c_proj(x)
        x = self.dropout(x)
        return x


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.ln_1 = LayerNorm(cfg.n_embd, bias=cfg.bias)
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = LayerNorm(cfg.n_embd, bias=cfg.bias)
        self.mlp = MLP(cfg)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return x


class GPT(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        assert cfg.vocab_size is not None and cfg.block_size is not None
        self.config = cfg
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(cfg.vocab_size, cfg.n_embd),
            wpe=nn.Embedding(cfg.block_size, cfg.n_embd),
            drop=nn.Dropout(cfg.dropout),
            h=nn.ModuleList([Block(cfg) for _ in range(cfg.n_layer)]),
            ln_f=LayerNorm(cfg.n_embd, bias=cfg.bias),
        ))
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        # Weight tying: the embedding uses the head's matrix (the embedding's own matrix is freed).
        self.transformer.wte.weight = self.lm_head.weight

        self.apply(self._init_weights)
        # scaled init of the residual projections (GPT-2 paper)
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * cfg.n_layer))

    @staticmethod
    def _init_weights(module):
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def get_num_params(self, non_embedding: bool = True) -> int:
        """Parameter count; like nanoGPT, the position embedding is excluded by default."""
        n = sum(p.numel() for p in self.parameters())
        if non_embedding:
            n -= self.transformer.wpe.weight.numel()
        return n

    def forward(self, idx, targets=None):
        b, t = idx.size()
        assert t <= self.config.block_size, f"sequence length {t} > block_size {self.config.block_size}"
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)  # (t,)
        tok_emb = self.transformer.wte(idx)  # (b, t, C)
        pos_emb = self.transformer.wpe(pos)  # (t, C)
        x = self.transformer.drop(tok_emb + pos_emb)
        for block in self.transformer.h:
            if self.config.activation_checkpointing and self.training:
                x = checkpoint(block, x, use_reentrant=False)
            else:
                x = block(x)
        x = self.transformer.ln_f(x)
        if targets is not None:
            # logits for every position, and the loss
            logits = self.lm_head(x)
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)
        else:
            # inference: only the last position (a list index keeps the time dimension)
            logits = self.lm_head(x[:, [-1], :])
            loss = None
        return logits, loss

    def configure_optimizers(self, weight_decay, learning_rate, betas, device_type,
                             optimizer="adamw", fused=None):
        """AdamW as in nanoGPT: 2-D+ tensors decay, 1-D tensors (LN weights, biases) do not.

        fused: None -> nanoGPT's rule (fused when available and on CUDA); True/False forces it
        (the fake-tensor CPU path uses fused=True, which runs under FakeTensorMode).
        optimizer='sgd' -> torch.optim.SGD(lr, momentum=0), which keeps no state.
        Returns (optimizer, description dict).
        """
        params = {n: p for n, p in self.named_parameters() if p.requires_grad}
        decay = [p for n, p in params.items() if p.dim() >= 2]
        nodecay = [p for n, p in params.items() if p.dim() < 2]
        info = {
            "decay_tensors": len(decay), "decay_params": sum(p.numel() for p in decay),
            "nodecay_tensors": len(nodecay), "nodecay_params": sum(p.numel() for p in nodecay),
        }
        if optimizer == "sgd":
            opt = torch.optim.SGD(self.parameters(), lr=learning_rate, momentum=0)
            info["optimizer"] = "SGD(momentum=0)"
            return opt, info
        assert optimizer == "adamw", optimizer
        groups = [
            {"params": decay, "weight_decay": weight_decay},
            {"params": nodecay, "weight_decay": 0.0},
        ]
        if fused is None:
            fused = "fused" in inspect.signature(torch.optim.AdamW).parameters and device_type == "cuda"
        extra = dict(fused=True) if fused else dict(fused=False, foreach=False)
        opt = torch.optim.AdamW(groups, lr=learning_rate, betas=betas, **extra)
        info["optimizer"] = "AdamW(fused=True)" if fused else "AdamW(fused=False, foreach=False)"
        return opt, info
