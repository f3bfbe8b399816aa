"""One config of tests/reference/capped_configs.json, run with PyTorch's reserve capped.

torch.cuda.set_per_process_memory_fraction(cap / total) makes the caching allocator treat the
cap as a smaller card's end: a request that would take the reserve past it first releases
cached segments that hold no live block and retries, and raises OutOfMemoryError only if that
does not make room. So a large GPU answers what core's allocator model predicts for a small
one (sim::simulate_exact_and_later with a limit): does the run go on past iteration 2, or run
out of memory, and where. The loop is measure.py's (run_training): eval, iteration 1, eval,
iteration 2, then --later-cycles cycles of 16 iterations and an eval.

    python3 tests/reference/probes/capped.py --config-id ID [--later-cycles 2] [--dry-run-cuda]

Prints one JSON row: outcome ("ran" or "out_of_memory"), the phase that ran out, the reserve
after each iteration from the second on (later_points, as measure.py), the allocator's retry
and OOM counts, and each phase's peak and final reserve.
"""
import argparse
import json
import os
import sys

HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, HERE)

import torch  # noqa: E402

import measure  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--configs", default=os.path.join(HERE, "capped_configs.json"))
    ap.add_argument("--config-id", required=True)
    ap.add_argument("--later-cycles", type=int, default=2)
    ap.add_argument("--dry-run-cuda", action="store_true", help="no GPU: cuda_stub.py counters on CPU tensors (plumbing only; no cap)")
    args = ap.parse_args()
    entries = {c["id"]: c for c in measure.load_configs(args.configs)}
    if args.config_id not in entries:
        sys.exit(f"unknown config id {args.config_id!r}")
    entry = dict(entries[args.config_id])
    cap = int(entry.pop("reserve_cap_bytes"))
    cfg = measure.normalize_config(entry)
    device = "cuda"
    if args.dry_run_cuda:
        import cuda_stub
        cuda_stub.install()
        device = "cpu"
    torch.backends.cuda.matmul.allow_tf32 = True  # as nanoGPT's train.py
    torch.backends.cudnn.allow_tf32 = True
    row = {"id": args.config_id, "config": cfg, "reserve_cap_bytes": cap, "later_cycles": args.later_cycles}
    if not args.dry_run_cuda:
        torch.cuda.set_device(0)
        torch.cuda.init()
        total = torch.cuda.get_device_properties(0).total_memory
        torch.cuda.set_per_process_memory_fraction(cap / total)
        row["environment"] = measure.cuda_environment()
    phases = measure.Phases(measure.CudaMeter())
    try:
        measure.run_training(cfg, device, phases, fake=False, later_cycles=args.later_cycles)
        row["outcome"] = "ran"
    except torch.OutOfMemoryError as e:
        # Phases records the phase an exception leaves as its last row.
        row["outcome"] = "out_of_memory"
        row["oom_phase"] = phases.rows[-1]["name"] if phases.rows else "init"
        row["error"] = str(e).splitlines()[0][:400]
    row["later_points"] = measure.later_points(phases.rows)
    st = torch.cuda.memory_stats()
    row["allocator_stats_end"] = {k: st.get(k) for k in ("num_alloc_retries", "num_ooms", "num_device_alloc", "num_device_free")}
    row["phase_reserved"] = [[p["name"], p.get("peak_reserved"), p.get("end_reserved")] for p in phases.rows]
    print(json.dumps(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
