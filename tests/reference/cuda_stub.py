"""Offline stand-in for the torch.cuda API used by measure.py's cuda method (--dry-run-cuda).

It lets the whole cuda code path (phases, points, snapshot file, JSON row, run_all table,
gpu_run.sh) run without a GPU: tensors live on the CPU, and the allocator counters are answered
by memtrack.LiveBytesTracker on those real tensors, so a dry-run row must reproduce the cpu-real
method's numbers exactly. Used only for testing; never imported by a real GPU run.
"""

from types import SimpleNamespace

import torch

from memtrack import LiveBytesTracker

_tracker = None


def _stats(*a, **k):
    t = _tracker
    return {
        "allocated_bytes.all.peak": t.peak_rounded, "allocated_bytes.all.current": t.live_rounded,
        "requested_bytes.all.peak": t.peak_raw, "requested_bytes.all.current": t.live_raw,
        "reserved_bytes.all.peak": t.peak_rounded, "reserved_bytes.all.current": t.live_rounded,
        "num_alloc_retries": 0, "num_ooms": 0,
    }


def install():
    global _tracker
    _tracker = LiveBytesTracker(only_fake=False)
    _tracker.__enter__()  # stays active for the process
    c = torch.cuda
    c.is_available = lambda: True
    c.is_current_stream_capturing = lambda *a, **k: False
    c.set_device = lambda *a, **k: None
    c.init = lambda: None
    c.synchronize = lambda *a, **k: None
    c.reset_peak_memory_stats = lambda *a, **k: _tracker.reset_peak()
    c.memory_allocated = lambda *a, **k: _tracker.live_rounded
    c.memory_reserved = lambda *a, **k: _tracker.live_rounded
    c.memory_stats = _stats
    c.mem_get_info = lambda *a, **k: (80 * 2**30 - _tracker.live_rounded, 80 * 2**30)
    c.get_device_name = lambda *a, **k: "Stub GPU (dry run)"
    c.get_device_properties = lambda *a, **k: SimpleNamespace(major=9, minor=0, total_memory=80 * 2**30)
    c.memory._record_memory_history = lambda *a, **k: None
    c.memory._snapshot = lambda *a, **k: {"segments": [], "device_traces": [], "dry_run": True}
