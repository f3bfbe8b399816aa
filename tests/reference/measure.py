#!/usr/bin/env python3
"""Ground-truth memory measurements of a nanoGPT training run (vramfit reference harness).

The loop below reproduces the tensor lifetimes of nanoGPT's train.py exactly (see README.md):

    X, Y = get_batch('train')                      # before the loop
    while True:
        if iter_num % eval_interval == 0: losses = estimate_loss()
        for micro_step in range(gradient_accumulation_steps):
            with ctx:
                logits, loss = model(X, Y)
                loss = loss / gradient_accumulation_steps
            X, Y = get_batch('train')
            scaler.scale(loss).backward()
        scaler.unscale_(optimizer); clip_grad_norm_(model.parameters(), grad_clip)
        scaler.step(optimizer); scaler.update()
        optimizer.zero_grad(set_to_none=True)

The names `logits` and `loss` are never deleted, so the previous micro-step's logits stay alive
through the next forward, the optimizer step and estimate_loss, exactly as in train.py.

Measured sequence per config:  init -> eval0 (estimate_loss before any step) -> iteration 1
(AdamW state is created in its step) -> eval (estimate_loss after the first step) -> iteration 2
(steady state).  Every stage is cut into fine phases (fwd/batch/bwd per micro-step, clip, step,
zero_grad); each phase records live bytes at its start and end and the peak inside it, and the
peak of a stage is the max over its phases (so one flat peak counter suffices, as on CUDA).

Methods
  cpu-fake : everything under FakeTensorMode on device 'cpu' (no math), live tensor bytes counted
             by memtrack.LiveBytesTracker (512-byte rounding per storage, and unrounded).
  cpu-real : the same tracker on real CPU tensors (validation of cpu-fake on tiny configs).
  cuda     : real tensors on the GPU; torch.cuda memory statistics per phase.

Usage
  python measure.py --method cpu-fake --config-id ID [--configs configs.json] [--out row.json]
  python measure.py --method cpu-fake --config-json '{"n_layer":2,...}' --trace out.jsonl
  python measure.py --method cuda --config-id ID --snapshot snap.pickle
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import subprocess
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import torch  # noqa: E402
import torch.utils._python_dispatch  # noqa: E402,F401  (TorchDispatchMode for OpNames)

from gpt import GPT, GPTConfig  # noqa: E402

# nanoGPT train.py defaults that this harness keeps (memory does not depend on their values)
LEARNING_RATE = 6e-4
WEIGHT_DECAY = 1e-1
BETAS = (0.9, 0.95)
GRAD_CLIP = 1.0

CONFIG_DEFAULTS = dict(
    n_layer=2, n_head=2, n_embd=64, block_size=64, vocab_size=65, bias=False, dropout=0.0,
    batch_size=4, gradient_accumulation_steps=1,
    eval_batch_size=None,   # None -> batch_size (nanoGPT has no separate eval batch size)
    eval_block_size=None,   # None -> block_size
    eval_iters=2,           # memory does not depend on more (k >= 1 already overlaps two batches)
    dtype="float32", attention="flash", compile=False, activation_checkpointing=False,
    optimizer="adamw",
)


def normalize_config(cfg: dict) -> dict:
    out = dict(CONFIG_DEFAULTS)
    for k, v in cfg.items():
        if k in ("id", "gpu_only", "note", "tags"):
            continue
        if k not in CONFIG_DEFAULTS:
            raise KeyError(f"unknown config key {k!r}")
        out[k] = v
    assert out["n_embd"] % out["n_head"] == 0, "n_embd % n_head != 0"
    assert out["dtype"] in ("float32", "float16", "bfloat16"), out["dtype"]
    assert out["attention"] in ("flash", "manual"), out["attention"]
    assert out["optimizer"] in ("adamw", "sgd"), out["optimizer"]
    eb = out["eval_block_size"] or out["block_size"]
    assert eb <= out["block_size"], "eval_block_size > block_size"
    return out


# ------------------------------------------------------------------------------------------------
# Labels: where a CPU trace is known to differ from a CUDA run of the same config
# ------------------------------------------------------------------------------------------------

LABEL_REASONS = {
    "dropout": (
        "dropout>0: CPU nn.Dropout keeps an input-dtype noise tensor (bernoulli_ then mul; 2 or 4 "
        "bytes/elem, saved for backward) where CUDA's aten::dropout uses native_dropout and keeps "
        "a 1-byte bool mask; CPU SDPA with dropout_p>0 falls back to the math path (materialised "
        "(B,H,T,T) scores, softmax and dropout noise) where CUDA flash/mem-efficient attention "
        "keeps no mask"),
    "autocast_head": (
        "bf16/fp16 head: CPU autocast has an fp32 rule for cross_entropy_loss (logits cast to fp32: "
        "4N transient, log_softmax in fp32: 4N saved, fp32 grads in backward). CUDA autocast has no "
        "rule for it: the composite calls log_softmax(x, 1, dtype=x.dtype), which CUDA's "
        "fp32_set_opt_dtype rule leaves in bf16/fp16 (2N saved), then nll_loss's fp32 rule casts "
        "the log-probs to fp32 (4N, saved by NllLossBackward) (N = B*T*vocab)"),
    "manual_softmax": (
        "manual attention under autocast: CUDA autocast runs F.softmax in fp32 (fp32_set_opt_dtype: "
        "bf16 input -> fp32 copy + fp32 softmax; the fp32 (B,H,T,T) output is saved and cast back "
        "to bf16/fp16 for att@v); CPU autocast has no softmax rule, softmax stays bf16/fp16"),
    "fp16_half_to_float": (
        "fp16 manual attention: CUDA's softmax(x, dtype=float32) on a Half input calls "
        "_softmax(x, half_to_float=True) with no fp32 copy of the input (bf16 gets the copy)"),
}

# Caveats that apply to every row of a CPU method (not labels: they concern what a tensor-level
# count cannot see, not a different trace).
CPU_METHOD_CAVEATS = [
    "kernel-internal allocations are not counted (CUDA: cuBLAS/cuBLASLt workspaces, flash/"
    "mem-efficient attention backward workspaces such as FA2's fp32 dq accumulator, "
    "embedding backward sort buffers); CUDA's allocated counter includes them",
    "CPU SDPA is _scaled_dot_product_flash_attention_for_cpu; CUDA picks flash (bf16/fp16) or "
    "mem-efficient/cuDNN (fp32), whose logsumexp may be padded (mem-efficient: to a multiple of 32)",
    "clip_grad_norm_: on FakeTensors torch falls back from _foreach_norm to one vector_norm per "
    "parameter (one 512-byte scalar each, transient in the clip phase); CUDA's _foreach_norm "
    "returns views of one buffer",
    "CUDA caching-allocator effects: a large-pool block (>1 MiB request) is not split when the "
    "remainder is <= 1 MiB, so CUDA's allocated counter can exceed the 512-rounded sum",
]


def labels_for(cfg: dict, method: str) -> list[str]:
    """Label codes for rows whose CPU trace is known to differ from CUDA (empty for cuda and for
    the cudalike emulation, which models these differences)."""
    if method in ("cuda", "cpu-fake-cudalike"):
        return []
    codes = []
    if cfg["dropout"] > 0:
        codes.append("dropout")
    if cfg["dtype"] in ("bfloat16", "float16"):
        codes.append("autocast_head")
        if cfg["attention"] == "manual":
            codes.append("manual_softmax")
            if cfg["dtype"] == "float16":
                codes.append("fp16_half_to_float")
    return codes


# ------------------------------------------------------------------------------------------------
# Meters: one flat peak counter, reset at the start of every phase
# ------------------------------------------------------------------------------------------------

class Phases:
    """Records (name, start, peak, end, peak_raw, ...) for consecutive phases."""

    def __init__(self, meter, on_end=None):
        self.meter = meter
        self.on_end = on_end  # optional callback(name) after a phase has been recorded
        self.rows = []
        self.current = "init"

    @contextlib.contextmanager
    def __call__(self, name: str):
        self.current = name
        start = self.meter.begin()
        try:
            yield
        finally:
            rec = self.meter.end()
            rec = {"name": name, "start": start["live"], **rec}
            self.rows.append(rec)
            self.current = "end"  # between phases (only the final cleanup in practice)
        if self.on_end is not None:
            self.on_end(name)


class FakeMeter:
    """Meter over memtrack.LiveBytesTracker (cpu-fake and cpu-real)."""

    def __init__(self, tracker):
        self.tr = tracker

    def begin(self):
        self.tr.reset_peak()
        return {"live": self.tr.live_rounded}

    def end(self):
        return {"peak": self.tr.peak_rounded, "end": self.tr.live_rounded,
                "peak_raw": self.tr.peak_raw, "end_raw": self.tr.live_raw}

    def live(self):
        return self.tr.live_rounded


class CudaMeter:
    """Meter over torch.cuda memory statistics. Allocator stats are updated on the host in
    program order, so no synchronisation is needed for them."""

    def begin(self):
        torch.cuda.reset_peak_memory_stats()
        return {"live": torch.cuda.memory_allocated()}

    def end(self):
        st = torch.cuda.memory_stats()
        return {"peak": st.get("allocated_bytes.all.peak", 0),
                "end": st.get("allocated_bytes.all.current", 0),
                "peak_raw": st.get("requested_bytes.all.peak", 0),
                "end_raw": st.get("requested_bytes.all.current", 0),
                "peak_reserved": st.get("reserved_bytes.all.peak", 0),
                "end_reserved": st.get("reserved_bytes.all.current", 0)}

    def live(self):
        return torch.cuda.memory_allocated()


# ------------------------------------------------------------------------------------------------
# CUDA helpers (kept small: they only read counters and nvidia-smi)
# ------------------------------------------------------------------------------------------------

def nvidia_smi_process_mib():
    """This process's used_memory (MiB) from nvidia-smi, or None; plus the raw lines."""
    try:
        out = subprocess.run(
            ["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=20).stdout
    except Exception as e:  # nvidia-smi missing or hanging
        return None, f"error: {e!r}"
    mine = None
    for line in out.strip().splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 2 and parts[0] == str(os.getpid()):
            try:
                mine = int(parts[1])
            except ValueError:
                pass
    return mine, out.strip()


def cuda_point(tag: str) -> dict:
    """Counters at one point in time (after synchronising)."""
    torch.cuda.synchronize()
    free, total = torch.cuda.mem_get_info()
    smi, smi_raw = nvidia_smi_process_mib()
    return {"tag": tag, "allocated": torch.cuda.memory_allocated(),
            "reserved": torch.cuda.memory_reserved(), "mem_get_info_free": free,
            "mem_get_info_total": total, "device_used": total - free,
            "nvidia_smi_process_mib": smi, "nvidia_smi_raw": smi_raw}


def _try(fn):
    try:
        return fn()
    except Exception as e:  # never let an informational field fail a measurement
        return f"error: {e!r}"


def cuda_environment() -> dict:
    b = torch.backends.cuda
    p = _try(lambda: torch.cuda.get_device_properties(0))
    env = {
        "torch": torch.__version__,
        "cuda_runtime": torch.version.cuda,
        "cudnn": _try(lambda: torch.backends.cudnn.version()),
        "device_name": _try(lambda: torch.cuda.get_device_name(0)),
        "capability": _try(lambda: f"{p.major}.{p.minor}"),
        "total_memory": _try(lambda: p.total_memory),
        "nvidia_smi_gpu": _try(lambda: subprocess.run(
            ["nvidia-smi", "--query-gpu=name,driver_version,memory.total", "--format=csv,noheader"],
            capture_output=True, text=True, timeout=20).stdout.strip()),
        "sdpa_defaults": {
            "flash": _try(b.flash_sdp_enabled), "mem_efficient": _try(b.mem_efficient_sdp_enabled),
            "math": _try(b.math_sdp_enabled), "cudnn": _try(b.cudnn_sdp_enabled),
        },
        "PYTORCH_CUDA_ALLOC_CONF": os.environ.get("PYTORCH_CUDA_ALLOC_CONF"),
        # "1": SDPA tries flash before cuDNN on sm_90 too (probes/gpu_flash_first.sh)
        "TORCH_CUDNN_SDPA_DEPRIORITIZED": os.environ.get("TORCH_CUDNN_SDPA_DEPRIORITIZED"),
    }
    return env


class OpNames(torch.utils._python_dispatch.TorchDispatchMode):
    """Collects the names of attention ops that run (used once, after the cuda measurement)."""

    def __init__(self):
        super().__init__()
        self.names = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = str(func)
        if "attention" in name or "softmax" in name or "dropout" in name:
            self.names.add(name)
        return func(*args, **(kwargs or {}))


# ------------------------------------------------------------------------------------------------
# Module / autograd-node context for --trace
# ------------------------------------------------------------------------------------------------

class TraceContext:
    """Keeps the current phase and module (via global forward hooks) for trace events."""

    def __init__(self, phases: Phases):
        self.phases = phases
        self.stack = []
        self.names = {}
        self.handles = []

    def install(self, model):
        self.names = {id(m): n for n, m in model.named_modules()}
        mm = torch.nn.modules.module
        self.handles.append(mm.register_module_forward_pre_hook(self._pre))
        self.handles.append(mm.register_module_forward_hook(self._post))

    def _pre(self, mod, args):
        self.stack.append(self.names.get(id(mod), type(mod).__name__))

    def _post(self, mod, args, out):
        if self.stack:
            self.stack.pop()

    def __call__(self) -> dict:
        at = self.phases.current
        kind = at.split(".")[-1].rstrip("0123456789") if "." in at else at
        kind = {"step": "opt", "eval0": "eval"}.get(kind, kind)
        ctx = {"phase": kind, "at": at}
        node = torch._C._current_autograd_node()
        if node is not None:
            ctx["node"] = node.name()
        if self.stack:
            ctx["module"] = self.stack[-1] or "model"
        return ctx


# ------------------------------------------------------------------------------------------------
# The run: nanoGPT train.py's lifetimes
# ------------------------------------------------------------------------------------------------

# Iterations per cycle of --later-cycles (core's sim::LATER_ITERATIONS: the allocator model runs
# at most this many before an eval, looking for its fixed point).
LATER_ITERATIONS = 16


def run_training(cfg: dict, device: str, phases: Phases, fake: bool, trace_ctx=None,
                 fused_adamw: bool = True, later_cycles: int = 0) -> dict:
    """Builds model/optimizer and runs eval0, iteration 1, eval, iteration 2 with phase records;
    then, for later_cycles > 0, that many cycles of LATER_ITERATIONS iterations and an eval
    (phases it3.*, ..., eval.after<k>), as train.py goes on. Returns facts about the model
    (parameter counts etc.)."""
    device_type = "cuda" if device.startswith("cuda") else "cpu"
    ptdtype = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[cfg["dtype"]]
    ctx = contextlib.nullcontext() if cfg["dtype"] == "float32" else torch.autocast(device_type, dtype=ptdtype)
    GA = cfg["gradient_accumulation_steps"]
    B, T, V = cfg["batch_size"], cfg["block_size"], cfg["vocab_size"]
    EB = cfg["eval_batch_size"] or B
    ET = cfg["eval_block_size"] or T

    def get_batch(split, bs=B, bt=T):
        # Random token ids; same device tensors as nanoGPT's get_batch: x then y, int64 (bs, bt).
        x = torch.randint(V, (bs, bt), device=device)
        y = torch.randint(V, (bs, bt), device=device)
        return x, y

    with phases("init"):
        torch.manual_seed(1337)
        gcfg = GPTConfig(block_size=T, vocab_size=V, n_layer=cfg["n_layer"], n_head=cfg["n_head"],
                         n_embd=cfg["n_embd"], dropout=cfg["dropout"], bias=cfg["bias"],
                         attention=cfg["attention"],
                         activation_checkpointing=cfg["activation_checkpointing"])
        if fake:
            model = GPT(gcfg)              # parameters are born fake on 'cpu'
        else:
            model = GPT(gcfg)              # nanoGPT: built on the CPU, then moved
            model.to(device)
        scaler = torch.amp.GradScaler(device_type, enabled=(cfg["dtype"] == "float16"))
        optimizer, opt_info = model.configure_optimizers(
            WEIGHT_DECAY, LEARNING_RATE, BETAS, device_type, optimizer=cfg["optimizer"],
            fused=(True if device_type == "cuda" else fused_adamw))
        if cfg["compile"]:
            model = torch.compile(model)
        X, Y = get_batch("train")  # fetch the very first batch
    if trace_ctx is not None:
        trace_ctx.install(model)

    @torch.no_grad()
    def estimate_loss():
        out = {}
        model.eval()
        for split in ["train", "val"]:
            losses = []  # nanoGPT: torch.zeros(eval_iters) on the host -- not device memory
            for k in range(cfg["eval_iters"]):
                X, Y = get_batch(split, EB, ET)
                with ctx:
                    logits, loss = model(X, Y)
                losses.append(float("nan") if fake else loss.item())
            out[split] = sum(losses) / len(losses)
        model.train()
        return out

    def iteration(it: int):
        nonlocal X, Y, logits, loss
        for param_group in optimizer.param_groups:
            param_group["lr"] = LEARNING_RATE
        for micro_step in range(GA):
            with phases(f"it{it}.fwd{micro_step}"):
                with ctx:
                    logits, loss = model(X, Y)
                    loss = loss / GA  # scale the loss to account for gradient accumulation
            with phases(f"it{it}.batch{micro_step}"):
                X, Y = get_batch("train")  # prefetch the next batch (old X, Y freed after)
            with phases(f"it{it}.bwd{micro_step}"):
                scaler.scale(loss).backward()
        with phases(f"it{it}.clip"):
            if GRAD_CLIP != 0.0:
                scaler.unscale_(optimizer)
                torch.nn.utils.clip_grad_norm_(model.parameters(), GRAD_CLIP)
        with phases(f"it{it}.step"):
            scaler.step(optimizer)
            scaler.update()
        with phases(f"it{it}.zero_grad"):
            optimizer.zero_grad(set_to_none=True)

    logits = loss = None  # not yet defined in train.py at iter 0 (None holds no memory)
    with phases("eval0"):
        estimate_loss()
    iteration(1)
    with phases("eval"):
        estimate_loss()
    iteration(2)
    it = 2
    for _ in range(later_cycles):
        for _ in range(LATER_ITERATIONS):
            it += 1
            iteration(it)
        with phases(f"eval.after{it}"):
            estimate_loss()

    raw = getattr(model, "_orig_mod", model)
    params = list(raw.parameters())
    info = {
        "n_params": sum(p.numel() for p in params),
        "n_params_nanogpt": raw.get_num_params(),  # excludes wpe, like nanoGPT's printout
        "n_param_tensors": len(params),
        "param_bytes": sum(p.numel() * p.element_size() for p in params),
        "buffer_bytes": sum(b.numel() * b.element_size() for b in raw.buffers()),
        "optimizer_state_bytes": sum(
            t.numel() * t.element_size() for s in optimizer.state.values() for t in s.values()
            if isinstance(t, torch.Tensor)),
        **opt_info,
    }
    return info, model, (X, Y), ctx, scaler


def summarize(phases: list[dict]) -> dict:
    """Stage peaks (max over phases) and stage start bytes."""
    def stage(prefix_match):
        rows = [p for p in phases if prefix_match(p["name"])]
        if not rows:
            return None
        best = max(rows, key=lambda p: p["peak"])
        out = {"start": rows[0]["start"], "peak": best["peak"], "peak_phase": best["name"],
               "end": rows[-1]["end"], "peak_raw": max(p.get("peak_raw", 0) for p in rows)}
        if "peak_reserved" in rows[0]:
            out["peak_reserved"] = max(p["peak_reserved"] for p in rows)
            out["end_reserved"] = rows[-1]["end_reserved"]
        return out

    return {
        "init": stage(lambda n: n == "init"),
        "eval0": stage(lambda n: n == "eval0"),
        "first_iter": stage(lambda n: n.startswith("it1.")),
        "eval": stage(lambda n: n == "eval"),
        "train": stage(lambda n: n.startswith("it2.")),
        "first_fwd": stage(lambda n: n == "it1.fwd0"),
        "first_bwd": stage(lambda n: n == "it1.bwd0"),
        "first_step": stage(lambda n: n == "it1.step"),
    }


def measure(cfg_in: dict, method: str, trace_path: str | None = None,
            snapshot_path: str | None = None, fused_adamw: bool = True,
            cuda_device: str = "cuda", later_cycles: int = 0) -> dict:
    """Runs one config with one method; returns a result row (never raises)."""
    t0 = time.time()
    row = {"id": cfg_in.get("id"), "config": None, "method": method, "status": "ok",
           "error": None, "label": None, "labels": []}
    try:
        cfg = normalize_config(cfg_in)
        row["config"] = cfg
        row["labels"] = labels_for(cfg, method)
        row["label"] = "; ".join(LABEL_REASONS[c] for c in row["labels"]) or None
        if method != "cuda" and cfg["compile"]:
            row["status"] = "skipped"
            row["error"] = "compile=true needs a GPU (gpu_only)"
            return row
        if method == "cpu-fake":
            res = _measure_tracked(cfg, fake=True, trace_path=trace_path, fused_adamw=fused_adamw)
        elif method == "cpu-fake-cudalike":
            res = _measure_tracked(cfg, fake=True, trace_path=trace_path, fused_adamw=fused_adamw,
                                   cudalike=True)
        elif method == "cpu-real":
            res = _measure_tracked(cfg, fake=False, trace_path=trace_path, fused_adamw=fused_adamw)
        elif method == "cuda":
            res = _measure_cuda(cfg, snapshot_path, device=cuda_device, later_cycles=later_cycles)
        else:
            raise ValueError(method)
        row.update(res)
    except Exception as e:
        row["status"] = "error"
        row["error"] = f"{type(e).__name__}: {e}"
        row["traceback"] = traceback.format_exc()[-4000:]
    row["wall_s"] = round(time.time() - t0, 3)
    return row


def _stage_fields(row: dict, stages: dict, with_reserved: bool):
    for st, rec in stages.items():
        if rec is None:
            continue
        row[f"{st}_peak_allocated_bytes"] = rec["peak"]
        row[f"{st}_start_allocated_bytes"] = rec["start"]
        row[f"{st}_end_allocated_bytes"] = rec["end"]
        row[f"{st}_peak_raw_bytes"] = rec["peak_raw"]
        row[f"{st}_peak_phase"] = rec["peak_phase"]
        if with_reserved and "peak_reserved" in rec:
            row[f"{st}_peak_reserved_bytes"] = rec["peak_reserved"]


def _compact_phases(rows: list[dict]) -> list[list]:
    keys = ["name", "start", "peak", "end", "peak_raw"]
    if rows and "peak_reserved" in rows[0]:
        keys.append("peak_reserved")
    return [keys] + [[r[k] for k in keys] for r in rows]


def _measure_tracked(cfg: dict, fake: bool, trace_path=None, fused_adamw=True, cudalike=False) -> dict:
    from memtrack import JsonlWriter, LiveBytesTracker
    if cudalike:
        from cudalike import cuda_semantics

    writer = JsonlWriter(trace_path) if trace_path else None
    fake_mode = None
    if fake:
        from torch._subclasses.fake_tensor import FakeTensorMode
        fake_mode = FakeTensorMode()
    phases = None
    with (fake_mode if fake_mode is not None else contextlib.nullcontext()):
        tracker = LiveBytesTracker(only_fake=fake, on_event=writer)
        phases = Phases(FakeMeter(tracker))
        tctx = TraceContext(phases) if writer else None
        tracker.context = tctx
        try:
            with tracker, (cuda_semantics() if cudalike else contextlib.nullcontext()):
                info, model, batch, ctx, scaler = run_training(
                    cfg, "cpu", phases, fake=fake, trace_ctx=tctx, fused_adamw=fused_adamw)
                ops = sorted({"attention" in o and o for o in _ops_seen(tracker)} - {False})
        finally:
            if tctx is not None:
                for h in tctx.handles:
                    h.remove()
            if writer:
                writer.close()
    stages = summarize(phases.rows)
    row = {}
    _stage_fields(row, stages, with_reserved=False)
    row.update(info)
    row["attention_ops"] = ops
    row["rounding"] = "each storage rounded up to a multiple of 512 bytes (0 stays 0); *_raw_bytes unrounded"
    row["phases"] = _compact_phases(phases.rows)
    return row


def _ops_seen(tracker):
    return getattr(tracker, "ops_seen", set())


def later_points(rows: list[dict]) -> list[list]:
    """[iteration, in_eval, reserved bytes at its end] after each iteration from the second on
    and each later eval (the reserve never shrinks without empty_cache, so the last is the
    run's largest)."""
    out = []
    for p in rows:
        name = p["name"]
        if name.startswith("it") and name.endswith(".zero_grad"):
            k = int(name[2:].split(".")[0])
            if k >= 2:
                out.append([k, False, p["end_reserved"]])
        elif name.startswith("eval.after"):
            out.append([int(name[len("eval.after"):]), True, p["end_reserved"]])
    return out


def _measure_cuda(cfg: dict, snapshot_path=None, device: str = "cuda", later_cycles: int = 0) -> dict:
    """device is 'cuda' except in the offline dry run (cuda_stub.py), which uses 'cpu'."""
    assert torch.cuda.is_available(), "CUDA is not available"
    torch.backends.cuda.matmul.allow_tf32 = True  # as nanoGPT's train.py
    torch.backends.cudnn.allow_tf32 = True
    torch.cuda.set_device(0)
    torch.cuda.init()
    row = {"environment": cuda_environment()}
    points = [cuda_point("start")]
    if snapshot_path:
        torch.cuda.memory._record_memory_history(enabled="all", context="all", stacks="python",
                                                 max_entries=200000)
    # nvidia-smi / mem_get_info points after iteration 1, after the eval and after iteration 2
    tags = {"it1.zero_grad": "after_iter1", "eval": "after_eval", "it2.zero_grad": "after_iter2"}

    def on_end(name):
        if name in tags:
            points.append(cuda_point(tags[name]))

    phases = Phases(CudaMeter(), on_end=on_end)
    info, model, batch, ctx, scaler = run_training(cfg, device, phases, fake=False, later_cycles=later_cycles)
    if snapshot_path:
        import pickle
        snap = torch.cuda.memory._snapshot()
        with open(snapshot_path, "wb") as f:
            pickle.dump(snap, f)
        torch.cuda.memory._record_memory_history(enabled=None)
        row["snapshot"] = os.path.basename(snapshot_path)
    stages = summarize(phases.rows)
    _stage_fields(row, stages, with_reserved=True)
    row.update(info)
    row["points"] = points
    row["nvidia_smi_after_eval_mib"] = next((p["nvidia_smi_process_mib"] for p in points if p["tag"] == "after_eval"), None)
    row["nvidia_smi_after_train_mib"] = next((p["nvidia_smi_process_mib"] for p in points if p["tag"] == "after_iter2"), None)
    row["max_reserved_bytes_overall"] = max(p.get("peak_reserved", 0) for p in phases.rows)
    if later_cycles:
        row["later_cycles"] = later_cycles
        row["later_iterations"] = LATER_ITERATIONS
        row["later_points"] = later_points(phases.rows)
    row["rounding"] = "CUDA caching allocator: allocated_bytes (512-byte blocks, unsplit large-block remainders included); *_raw_bytes = requested_bytes"
    row["phases"] = _compact_phases(phases.rows)
    st = torch.cuda.memory_stats()
    row["allocator_stats_end"] = {k: st.get(k) for k in (
        "num_alloc_retries", "num_ooms", "num_device_alloc", "num_device_free",
        "segment.all.peak", "active_bytes.all.peak", "inactive_split_bytes.all.peak")}
    # Which attention/softmax kernels ran: one extra eager micro-step under an op-name recorder,
    # after all measurements (cannot affect them). Skipped for compiled models.
    if not cfg["compile"]:
        try:
            X, Y = batch
            rec = OpNames()
            with rec:
                with ctx:
                    _, l2 = model(X, Y)
                scaler.scale(l2).backward()
            row["attention_ops"] = sorted(rec.names)
        except Exception as e:
            row["attention_ops"] = [f"error: {e!r}"]
    return row


# ------------------------------------------------------------------------------------------------
# CLI
# ------------------------------------------------------------------------------------------------

def load_configs(path: str) -> list[dict]:
    with open(path) as f:
        data = json.load(f)
    return data["configs"] if isinstance(data, dict) else data


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--method", choices=["cpu-fake", "cpu-fake-cudalike", "cpu-real", "cuda"], default="cpu-fake")
    ap.add_argument("--configs", default=os.path.join(HERE, "configs.json"))
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--config-id")
    g.add_argument("--config-json", help="a config as a JSON object")
    ap.add_argument("--out", help="write the row as JSON here (default: stdout)")
    ap.add_argument("--trace", help="cpu-fake/cpu-real: write every alloc/free event as JSON lines here")
    ap.add_argument("--snapshot", help="cuda: record memory history and pickle torch.cuda.memory._snapshot() here")
    ap.add_argument("--no-fused", action="store_true", help="cpu methods: AdamW(fused=False, foreach=False)")
    ap.add_argument("--dry-run-cuda", action="store_true",
                    help="offline test of the cuda method: torch.cuda counters stubbed by a live-bytes "
                         "tracker on real CPU tensors (cuda_stub.py); numbers equal cpu-real's")
    ap.add_argument("--later-cycles", type=int, default=0,
                    help=f"cuda: go on after iteration 2 for this many cycles of {LATER_ITERATIONS} "
                         "iterations and an eval, recording the reserve after each (row field later_points)")
    args = ap.parse_args(argv)
    cuda_device = "cuda"
    if args.dry_run_cuda:
        import cuda_stub
        cuda_stub.install()
        cuda_device = "cpu"

    if args.config_id:
        cfgs = {c["id"]: c for c in load_configs(args.configs)}
        if args.config_id not in cfgs:
            sys.exit(f"unknown config id {args.config_id!r}")
        cfg = cfgs[args.config_id]
    else:
        cfg = json.loads(args.config_json)
        cfg.setdefault("id", "adhoc")
    if args.later_cycles and args.method != "cuda":
        sys.exit("--later-cycles measures the CUDA allocator's reserve: --method cuda only")
    row = measure(cfg, args.method, trace_path=args.trace, snapshot_path=args.snapshot,
                  fused_adamw=not args.no_fused, cuda_device=cuda_device, later_cycles=args.later_cycles)
    text = json.dumps(row, indent=1)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    else:
        print(text)
    if row["status"] == "error":
        print(row.get("traceback", row["error"]), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
