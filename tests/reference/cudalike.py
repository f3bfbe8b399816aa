"""Opt-in emulation of CUDA's dispatch decisions on the cpu-fake path (method `cpu-fake-cudalike`).

The plain cpu-fake method runs the CPU's own rules; where those differ from CUDA for nanoGPT's ops
(see LABEL_REASONS in measure.py), this module makes the fake CPU run take CUDA's decisions instead,
so that its trace predicts what a GPU would allocate. It is a prediction under the assumptions
below, not a measurement: the GPU run (method `cuda`) is the ground truth and decides.

What is emulated (all of it read from PyTorch's sources/dispatch tables, 2.11):
  1. Autocast (only active for bf16/fp16, i.e. inside torch.autocast('cpu')):
     - aten::cross_entropy_loss has an fp32 rule on AutocastCPU but no rule on AutocastCUDA. On CUDA
       the composite runs with autocast still active: log_softmax(x, 1, dtype=x.dtype) keeps the
       low precision (fp32_set_opt_dtype leaves an explicit dtype alone), then nll_loss's fp32 rule
       casts the log-probs to fp32. Emulation: run the CompositeImplicitAutograd kernel directly.
     - aten::softmax.int / aten::log_softmax.int have CUDA's fp32_set_opt_dtype rule (none on CPU):
       if no dtype was given, run with dtype=float32. For a Half input CUDA's composite then calls
       _softmax/_log_softmax(x, dim, half_to_float=True) (no fp32 copy of the input); for bf16 it
       copies to fp32 first.
     - layer_norm's CUDA fp32 rule is not emulated: nanoGPT's LayerNorm inputs are fp32 already.
  2. Dropout (any dtype): CUDA's aten::dropout uses native_dropout (bool mask, 1 byte/elem saved);
     emulated by routing F.dropout to torch.native_dropout in training.
  3. SDPA with dropout_p > 0: CUDA's flash / mem-efficient kernels keep no mask; the CPU falls back to
     the math path. Emulated by calling the CPU flash kernel with dropout_p=0 (same output and
     logsumexp sizes as CUDA flash; the philox seed/offset scalars are not modelled).
  4. SDPA in bf16/fp16 with a head size that is not a multiple of 8: cuDNN refuses it, and
     the flash path pads q, k and v to a multiple of 8 (`pad_last_dim<8>` in
     aten/src/ATen/native/transformers/attention.cpp) and slices the output back. Emulated by
     padding with F.pad, running SDPA with the original scale, and slicing.
Not emulated: kernel-internal workspaces (cuBLAS, flash backward's fp32 dq accumulator, ...), the
mem-efficient kernel's logsumexp padding to 32 for fp32 inputs, _foreach_norm's single output
buffer in clip_grad_norm_ (the CPU path makes one 512-byte scalar per parameter), and allocator
effects (block splitting, fragmentation).
"""

from __future__ import annotations

import contextlib

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

_AUTOCAST_CPU = torch._C.DispatchKeySet(torch._C.DispatchKey.AutocastCPU)
_LOW = (torch.float16, torch.bfloat16)


def _no_autocast():
    return torch._C._ExcludeDispatchKeyGuard(_AUTOCAST_CPU)


def _cross_entropy_loss(self, target, weight=None, reduction=1, ignore_index=-100, label_smoothing=0.0):
    # CUDA: no autocast rule -> the composite runs, its inner ops see autocast (log_softmax, nll_loss)
    return torch.ops.aten.cross_entropy_loss.default.decompose(
        self, target, weight, reduction, ignore_index, label_smoothing)


def _softmax_like(private_op, public_op):
    def impl(x, dim, dtype=None):
        with _no_autocast():
            if x.is_floating_point() and x.dtype != torch.float64 and dtype is None:
                dtype = torch.float32  # fp32_set_opt_dtype: only when no dtype was given
            if x.dtype == torch.float16 and dtype == torch.float32:
                return private_op(x, dim, True)  # CUDA composite: half_to_float kernel, no copy
            return public_op(x, dim, dtype)
    return impl


def _register_autocast_overrides() -> torch.library.Library:
    """Registers the CUDA-like AutocastCPU kernels; `lib._destroy()` restores the originals."""
    import warnings
    lib = torch.library.Library("aten", "IMPL")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "overriding a previously registered kernel"
        lib.impl("cross_entropy_loss", _cross_entropy_loss, "AutocastCPU")
        lib.impl("log_softmax.int", _softmax_like(torch.ops.aten._log_softmax.default,
                                                   torch.ops.aten.log_softmax.int), "AutocastCPU")
        lib.impl("softmax.int", _softmax_like(torch.ops.aten._softmax.default,
                                               torch.ops.aten.softmax.int), "AutocastCPU")
    return lib


class _CudaKernelChoices(TorchFunctionMode):
    """Routes F.dropout and SDPA-with-dropout to the kernels CUDA would pick."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is F.dropout:
            x = args[0]
            p = kwargs.get("p", args[1] if len(args) > 1 else 0.5)
            training = kwargs.get("training", args[2] if len(args) > 2 else True)
            inplace = kwargs.get("inplace", args[3] if len(args) > 3 else False)
            if training and 0 < p < 1 and x.numel() > 0 and not inplace:
                return torch.native_dropout(x, p, True)[0]
        if func is F.scaled_dot_product_attention:
            dropout_p = kwargs.get("dropout_p", args[4] if len(args) > 4 else 0.0)
            attn_mask = kwargs.get("attn_mask", args[3] if len(args) > 3 else None)
            q = args[0]
            head = q.shape[-1]
            if q.dtype in _LOW and head % 8 != 0 and head <= 256 and attn_mask is None:
                pad = 8 - head % 8
                q, k, v = (F.pad(t, (0, pad)) for t in args[:3])
                is_causal = kwargs.get("is_causal", args[5] if len(args) > 5 else False)
                out = F.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0.0,
                                                     is_causal=is_causal, scale=head ** -0.5)
                return out[..., :head]
            if dropout_p > 0 and attn_mask is None:
                q, k, v = args[:3]
                is_causal = kwargs.get("is_causal", args[5] if len(args) > 5 else False)
                kw = {k_: v_ for k_, v_ in kwargs.items() if k_ not in ("dropout_p", "attn_mask")}
                kw["is_causal"] = is_causal
                return F.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0.0,
                                                      **{k_: v_ for k_, v_ in kw.items()
                                                         if k_ in ("is_causal", "scale", "enable_gqa")})
        return func(*args, **kwargs)


@contextlib.contextmanager
def cuda_semantics():
    """Enable the emulation for the duration of the block (the original AutocastCPU kernels are
    restored on exit)."""
    lib = _register_autocast_overrides()
    try:
        with _CudaKernelChoices():
            yield
    finally:
        lib._destroy()
