"""Tensor-level live-bytes tracker used by the cpu-fake method (and for validation on real CPU tensors).

`LiveBytesTracker` is a TorchDispatchMode. Every tensor returned by every ATen op that reaches the
Python dispatch key is inspected; its *untyped storage* is what holds memory, so we key on the
storage object (views and in-place results share a storage and are counted once). A new storage is
counted as an allocation of `storage.nbytes()`; a `weakref.finalize` on the storage object reports
its free (PyTorch preserves the Python storage object for as long as the C++ StorageImpl lives, which
`validate.py` checks). Live bytes and the peak are kept twice:

  * `raw`     -- exact storage bytes (like the CUDA allocator's `requested_bytes`)
  * `rounded` -- each storage rounded up to a multiple of 512 bytes, 0 bytes stays 0 (like the CUDA
                 caching allocator's `allocated_bytes` for blocks that are split to size; see
                 README for when CUDA's counter is larger)

What it cannot see (by construction, the same as torch's own MemTracker): memory that a kernel
allocates internally (workspaces, temporaries inside one ATen op), library handles (cuBLAS), and the
CUDA context. Under FakeTensorMode no kernel runs at all; the outputs' sizes come from meta kernels.

Tracking starts when the mode is entered; tensors that already exist at that point can be added with
`adopt()`. In measure.py the tracker is entered before the model is built, so everything is seen
from birth and `live` is directly comparable to `torch.cuda.memory_allocated()`.
"""

from __future__ import annotations

import json
import weakref
from typing import Callable, Optional

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map_only
from torch.utils.weak import WeakIdKeyDictionary

ROUND = 512  # kMinBlockSize of the CUDA caching allocator


def round_up(n: int, q: int = ROUND) -> int:
    """CUDA caching allocator rounding: 0 -> 0, else up to a multiple of 512 (minimum 512)."""
    return 0 if n == 0 else ((n + q - 1) // q) * q


class _Rec:
    __slots__ = ("nbytes", "rounded", "serial", "op", "shape", "dtype")

    def __init__(self, nbytes: int, serial: int, op: str = "", shape=None, dtype=None):
        self.nbytes = nbytes
        self.rounded = round_up(nbytes)
        self.serial = serial
        self.op = op        # the op whose output created the storage
        self.shape = shape  # shape/dtype of that first tensor (for traces)
        self.dtype = dtype


class LiveBytesTracker(TorchDispatchMode):
    """Counts live tensor storage bytes and their peak, per window (see `reset_peak`).

    only_fake: count only FakeTensors (the fake method: any real tensor that shows up, e.g. a CPU
               RNG state, is host memory in a real CUDA run).
    on_event:  optional callback(dict) for a per-event trace (alloc/free with op, bytes, live, ...).
    context:   callable returning a dict merged into every trace event (phase, module, ...).
    """

    def __init__(self, only_fake: bool = False, on_event: Optional[Callable[[dict], None]] = None,
                 context: Optional[Callable[[], dict]] = None):
        super().__init__()
        self.only_fake = only_fake
        self.on_event = on_event
        self.context = context
        self._recs = WeakIdKeyDictionary()  # UntypedStorage -> _Rec
        self._serial = 0
        self.live_raw = 0
        self.live_rounded = 0
        self.peak_raw = 0
        self.peak_rounded = 0
        self.n_alloc = 0
        self.n_free = 0
        self.ops_seen = set()
        if only_fake:
            from torch._subclasses.fake_tensor import FakeTensor
            self._fake_cls = FakeTensor
        else:
            self._fake_cls = None

    # ---- windows ---------------------------------------------------------------------------
    def reset_peak(self) -> None:
        """Start a new peak window at the current live bytes (like reset_peak_memory_stats)."""
        self.peak_raw = self.live_raw
        self.peak_rounded = self.live_rounded

    def snapshot(self) -> dict:
        return {"live_raw": self.live_raw, "live_rounded": self.live_rounded,
                "peak_raw": self.peak_raw, "peak_rounded": self.peak_rounded}

    # ---- bookkeeping -----------------------------------------------------------------------
    def _emit(self, ev: str, rec: _Rec) -> None:
        # alloc and free events both describe the storage's creating op and first tensor
        if self.on_event is None:
            return
        e = {"ev": ev, "bytes": rec.rounded, "raw": rec.nbytes, "live": self.live_rounded,
             "op": rec.op, "sid": rec.serial, "shape": rec.shape, "dtype": rec.dtype}
        if self.context is not None:
            e.update(self.context())
        self.on_event(e)

    def _free(self, rec: _Rec) -> None:
        self.live_raw -= rec.nbytes
        self.live_rounded -= rec.rounded
        self.n_free += 1
        self._emit("free", rec)

    def _alloc(self, st: torch.UntypedStorage, t: torch.Tensor, op: str) -> None:
        self._serial += 1
        rec = _Rec(st.nbytes(), self._serial, op,
                   list(t.shape) if self.on_event is not None else None,
                   str(t.dtype).replace("torch.", "") if self.on_event is not None else None)
        self._recs[st] = rec
        weakref.finalize(st, self._free, rec)
        self.live_raw += rec.nbytes
        self.live_rounded += rec.rounded
        self.n_alloc += 1
        if self.live_raw > self.peak_raw:
            self.peak_raw = self.live_raw
        if self.live_rounded > self.peak_rounded:
            self.peak_rounded = self.live_rounded
        self._emit("alloc", rec)

    def _resize(self, rec: _Rec, new_nbytes: int, t: torch.Tensor, op: str) -> None:
        # A storage that grew/shrank in place (resize_): count it as a free and a new allocation.
        self._free(rec)
        old_serial = rec.serial
        rec.nbytes = new_nbytes
        rec.rounded = round_up(new_nbytes)
        rec.serial = old_serial
        rec.op = op + " (resize)"
        self.live_raw += rec.nbytes
        self.live_rounded += rec.rounded
        self.n_free -= 1
        self.peak_raw = max(self.peak_raw, self.live_raw)
        self.peak_rounded = max(self.peak_rounded, self.live_rounded)
        self._emit("alloc", rec)

    def track(self, t: torch.Tensor, op: str = "adopt") -> None:
        """Count t's storage if it is new (or changed size)."""
        if not isinstance(t, torch.Tensor):
            return
        if self._fake_cls is not None and not isinstance(t, self._fake_cls):
            return
        if t.layout != torch.strided:
            return
        st = t.untyped_storage()
        rec = self._recs.get(st)
        if rec is None:
            self._alloc(st, t, op)
        elif rec.nbytes != st.nbytes():
            self._resize(rec, st.nbytes(), t, op)

    def adopt(self, tensors) -> None:
        """Count tensors that existed before the mode was entered (params, grads, states...)."""
        for t in tensors:
            if t is not None:
                self.track(t, "adopt")

    # ---- the dispatch hook -------------------------------------------------------------------
    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        op = str(func)  # e.g. 'aten.mm.default'
        self.ops_seen.add(op)
        tree_map_only(torch.Tensor, lambda t: self.track(t, op), out)
        return out


class JsonlWriter:
    """Writes trace events as JSON lines with a running index."""

    def __init__(self, path: str):
        self.f = open(path, "w")
        self.i = 0

    def __call__(self, e: dict) -> None:
        if self.f.closed:  # frees reported after the run has ended are not traced
            return
        e = {"i": self.i, **e}
        self.i += 1
        self.f.write(json.dumps(e, separators=(",", ":")) + "\n")

    def close(self) -> None:
        self.f.close()
