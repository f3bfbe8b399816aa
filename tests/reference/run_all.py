#!/usr/bin/env python3
"""Runs every config of configs.json with one method, each in a fresh subprocess, and writes one
JSON file per method:  {"provenance": {...}, "rows": [...]}.

  cpu-fake (default): parallel workers (-j), output data/cpu-fake.json
  cuda              : sequential on one GPU unless --cuda-jobs N or, for compile=True configs,
                      --compile-jobs N (N fresh processes at once: the peak counters are per
                      process, so only the rows' mem_get_info points see the others), output
                      data/cuda-<gpu>.json unless --out;
                      --snapshot-ids A,B,... adds one extra run per listed id with
                      torch.cuda.memory history recorded, pickled to <outdir>/snap-<id>.pickle

A config that fails gets a row with status "error" and the error text; the run goes on.
Finishes by printing a compact table (MiB).

Examples
  .venv/bin/python run_all.py --method cpu-fake -j 2
  python3 run_all.py --method cuda --out $OUT/cuda-h100.json --snapshot-ids a,b,c,d --skip-gpu-only
"""

from __future__ import annotations

import argparse
import concurrent.futures as cf
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
MiB = 1024 * 1024

METHOD_DESCRIPTIONS = {
    "cpu-fake": (
        "nanoGPT train.py loop (measure.py) under torch._subclasses.fake_tensor.FakeTensorMode on "
        "device 'cpu' (CPU kernels' dispatch and autocast rules, meta shapes, no math); every ATen "
        "op output's untyped storage counted from birth to free (weakref) by a TorchDispatchMode "
        "(memtrack.LiveBytesTracker). Excludes kernel-internal workspaces, library handles, context."),
    "cpu-fake-cudalike": (
        "as cpu-fake, plus an emulation of CUDA's dispatch decisions (cudalike.py): CUDA autocast "
        "rules for cross_entropy_loss/log_softmax/softmax (incl. fp16 half_to_float), dropout via "
        "native_dropout (bool mask), SDPA with dropout via the flash kernel (no mask). A prediction "
        "of the CUDA tensor trace, validated against fake-CUDA forward passes (validate.py); "
        "the cuda method is the ground truth"),
    "cpu-real": "as cpu-fake but on real CPU tensors (validation only)",
    "cuda": (
        "nanoGPT train.py loop (measure.py) on a CUDA GPU, eager unless compile=true; "
        "torch.cuda.reset_peak_memory_stats() at the start of every phase, "
        "memory_stats() allocated/requested/reserved peaks, mem_get_info and nvidia-smi per-process "
        "used memory after iteration 1, after the eval and after iteration 2; each config in a "
        "fresh process"),
}
ROUNDING = {
    "cpu-fake": "allocated = each storage rounded up to a multiple of 512 bytes (0 stays 0); raw = exact nbytes",
    "cpu-fake-cudalike": "allocated = each storage rounded up to a multiple of 512 bytes (0 stays 0); raw = exact nbytes",
    "cpu-real": "allocated = each storage rounded up to a multiple of 512 bytes (0 stays 0); raw = exact nbytes",
    "cuda": ("allocated = CUDA caching allocator allocated_bytes (512-byte rounding; a large-pool block "
             "is not split when the remainder is <= 1 MiB, so allocated can exceed the 512-rounded sum); "
             "raw = requested_bytes"),
}


def load_configs(path):
    with open(path) as f:
        d = json.load(f)
    return d["configs"] if isinstance(d, dict) else d


def run_one(python, cfg, method, timeout, snapshot=None, extra=()):
    """Runs measure.py for one config in a fresh subprocess; returns its row."""
    with tempfile.TemporaryDirectory() as td:
        out = os.path.join(td, "row.json")
        cmd = [python, os.path.join(HERE, "measure.py"), "--method", method,
               "--config-json", json.dumps(cfg), "--out", out, *extra]
        if snapshot:
            cmd += ["--snapshot", snapshot]
        t0 = time.time()
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
            if os.path.exists(out):
                with open(out) as f:
                    row = json.load(f)
            else:
                row = {"id": cfg["id"], "config": cfg, "method": method, "status": "error",
                       "error": f"subprocess exit {p.returncode}: {p.stderr.strip()[-2000:]}",
                       "label": None, "labels": []}
        except subprocess.TimeoutExpired:
            row = {"id": cfg["id"], "config": cfg, "method": method, "status": "error",
                   "error": f"timeout after {timeout}s", "label": None, "labels": []}
        row["process_wall_s"] = round(time.time() - t0, 2)
        return row


def gpu_name_smi():
    """GPU name from nvidia-smi (the parent process must not create a CUDA context: it would
    hold GPU memory while the measured children run)."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20).stdout.strip()
        return out.splitlines()[0] if out else None
    except Exception:
        return None


def gpu_slug(dry_run=False):
    if dry_run:
        return "dryrun"
    name = gpu_name_smi() or "unknown"
    m = re.search(r"(GH200|H100|H200|A100|L40S?|A10G?|L4|T4|V100|B200|RTX\s*\w+)", name)
    s = (m.group(1) if m else name).lower()
    return re.sub(r"[^a-z0-9]+", "", s)


def provenance(method, args, wall_s, rows):
    import torch
    prov = {
        "method": method,
        "method_description": METHOD_DESCRIPTIONS[method],
        "rounding": ROUNDING[method],
        "torch": torch.__version__,
        "python": platform.python_version(),
        "date_utc": subprocess.run(["date", "-u"], capture_output=True, text=True).stdout.strip(),
        "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
        "configs_file": os.path.relpath(args.configs, HERE),
        "n_rows": len(rows),
        "total_wall_s": round(wall_s, 1),
        "loop": ("init; eval0 = estimate_loss() before any step; iteration 1 (AdamW state created "
                 "in its step); eval = estimate_loss() after the first step (previous training "
                 "logits alive, grads None); iteration 2 = steady state (train_peak)"),
        "hyperparameters": {"lr": 6e-4, "weight_decay": 0.1, "betas": [0.9, 0.95], "grad_clip": 1.0},
    }
    if method == "cuda":
        prov["cuda_jobs"] = max(1, args.cuda_jobs)
        prov["compile_jobs"] = max(1, args.compile_jobs)
        # device facts as seen by the measured processes (the parent never touches CUDA)
        env = next((r.get("environment") for r in rows if r and r.get("environment")), None) or {}
        for k in ("device_name", "capability", "total_memory", "cuda_runtime", "cudnn",
                  "nvidia_smi_gpu", "sdpa_defaults", "PYTORCH_CUDA_ALLOC_CONF",
                  "TORCH_CUDNN_SDPA_DEPRIORITIZED"):
            prov[k] = env.get(k)
        prov["driver"] = (env.get("nvidia_smi_gpu") or "").split(",")[1].strip() \
            if isinstance(env.get("nvidia_smi_gpu"), str) and env.get("nvidia_smi_gpu").count(",") >= 2 else None
    else:
        prov["device_name"] = (f"cpu ({platform.machine()}), FakeTensorMode"
                               if method.startswith("cpu-fake") else "cpu")
        prov["optimizer_note"] = ("AdamW(fused=True) as on CUDA: torch._fused_adamw_ runs under "
                                  "FakeTensorMode on 'cpu'; SGD(momentum=0) where optimizer='sgd'")
        prov["autocast"] = "torch.autocast('cpu', dtype) for bfloat16/float16; nullcontext for float32"
        sys.path.insert(0, HERE)
        from measure import CPU_METHOD_CAVEATS, LABEL_REASONS
        if method != "cpu-fake-cudalike":
            prov["label_reasons"] = LABEL_REASONS
        prov["caveats_all_rows"] = CPU_METHOD_CAVEATS
    return prov


def write_doc(path, doc):
    """Pretty provenance, one row per line (readable diffs, compact file)."""
    with open(path, "w") as f:
        f.write('{\n"provenance": ' + json.dumps(doc["provenance"], indent=1) + ',\n"rows": [\n')
        f.write(",\n".join(json.dumps(r, separators=(",", ":")) for r in doc["rows"]))
        f.write("\n]\n}\n")
    with open(path) as f:
        json.load(f)  # must stay valid JSON


def fmt_mib(v):
    return "" if v is None else f"{v / MiB:.1f}"


def print_table(rows, method):
    cols = [("train", "train_peak_allocated_bytes"), ("eval", "eval_peak_allocated_bytes"),
            ("first_it", "first_iter_peak_allocated_bytes"), ("eval0", "eval0_peak_allocated_bytes")]
    extra = method == "cuda"
    head = f"{'id':44s} " + " ".join(f"{c:>9s}" for c, _ in cols)
    if extra:
        head += f" {'resv_max':>9s} {'smi_eval':>8s} {'smi_train':>9s}"
    head += "  labels/status"
    print(head)
    for r in rows:
        line = f"{r['id'][:44]:44s} " + " ".join(f"{fmt_mib(r.get(k)):>9s}" for _, k in cols)
        if extra:
            line += (f" {fmt_mib(r.get('max_reserved_bytes_overall')):>9s}"
                     f" {str(r.get('nvidia_smi_after_eval_mib') or ''):>8s}"
                     f" {str(r.get('nvidia_smi_after_train_mib') or ''):>9s}")
        tail = ",".join(r.get("labels") or [])
        if r.get("status") != "ok":
            tail = f"{r.get('status')}: {str(r.get('error'))[:60]}"
        print(line + "  " + tail)
    print("(MiB; peaks of live tensor bytes per stage: train = iteration 2, eval = estimate_loss "
          "after the first step, first_it = iteration 1, eval0 = estimate_loss before any step)")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--method", choices=["cpu-fake", "cpu-fake-cudalike", "cpu-real", "cuda"], default="cpu-fake")
    ap.add_argument("--configs", default=os.path.join(HERE, "configs.json"))
    ap.add_argument("--out", help="output JSON (default <outdir>/<method>.json, cuda: <outdir>/cuda-<gpu>.json)")
    ap.add_argument("--outdir", default=os.path.join(HERE, "data"), help="directory for the default output name")
    ap.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 1,
                    help="parallel workers for cpu methods (cuda: see --cuda-jobs and --compile-jobs)")
    ap.add_argument("--ids", help="comma-separated subset of config ids")
    ap.add_argument("--skip-gpu-only", action="store_true", help="skip configs tagged gpu_only (compile)")
    ap.add_argument("--snapshot-ids", default="", help="cuda: ids to re-run with memory history recorded")
    ap.add_argument("--timeout", type=int, default=600, help="per-config timeout, seconds")
    ap.add_argument("--python", default=sys.executable, help="interpreter for the subprocesses")
    ap.add_argument("--cuda-jobs", type=int, default=1,
                    help="cuda: eager configs measured N processes at a time (default 1); each "
                         "row records how many ran at once in concurrent_processes")
    ap.add_argument("--compile-jobs", type=int, default=1,
                    help="cuda: compile=True configs measured N processes at a time (default 1), "
                         "recorded in concurrent_processes like --cuda-jobs")
    ap.add_argument("--deadline-s", type=float, default=None,
                    help="cuda: start no new config after this many seconds (the rest become 'skipped')")
    ap.add_argument("--measure-arg", action="append",
                    help="extra argument passed to every measure.py call (e.g. --dry-run-cuda)")
    ap.add_argument("--tag", help="suffix for the default output and snapshot names (e.g. flash-only)")
    ap.add_argument("--update", action="store_true",
                    help="keep the rows of an existing output file and replace/add only the configs run now")
    ap.add_argument("--quiet", action="store_true")
    args = ap.parse_args()

    cfgs = load_configs(args.configs)
    if args.ids:
        want = args.ids.split(",")
        cfgs = [c for c in cfgs if c["id"] in want]
    if args.skip_gpu_only:
        cfgs = [c for c in cfgs if not c.get("gpu_only")]
    out = args.out
    if not out:
        dry = "--dry-run-cuda" in (args.measure_arg or ())
        tag = f"-{args.tag}" if args.tag else ""
        name = f"cuda-{gpu_slug(dry)}{tag}.json" if args.method == "cuda" else f"{args.method}{tag}.json"
        out = os.path.join(args.outdir, name)
    os.makedirs(os.path.dirname(os.path.abspath(out)), exist_ok=True)

    t0 = time.time()
    rows = [None] * len(cfgs)
    extra = tuple(args.measure_arg or ())
    if args.method == "cuda":
        # One GPU: strictly sequential, one fresh process per config. Order: eager configs,
        # then the memory-history snapshot runs, then torch.compile configs (slowest) last, so a
        # time budget (--deadline-s) cuts the least important work.
        def budget_left(need_s=10.0):
            """True if a run expected to take need_s still fits before the deadline."""
            return args.deadline_s is None or time.time() - t0 + need_s < args.deadline_s

        def tmo():
            """Per-run timeout, capped so that no run ends after the deadline."""
            if args.deadline_s is None:
                return args.timeout
            return max(1, int(min(args.timeout, args.deadline_s - (time.time() - t0))))

        def skipped(c):
            return {"id": c["id"], "config": c, "method": "cuda", "status": "skipped",
                    "error": f"time budget of {args.deadline_s}s used up", "label": None, "labels": []}

        order = [i for i, c in enumerate(cfgs) if not c.get("compile")]
        later = [i for i, c in enumerate(cfgs) if c.get("compile")]
        def eager(i):
            c = cfgs[i]
            # the budget is checked when the run starts, not when it was queued
            r = run_one(args.python, c, "cuda", tmo(), extra=extra) if budget_left(10) else skipped(c)
            r["concurrent_processes"] = max(1, args.cuda_jobs)
            return r

        def report(r):
            if not args.quiet:
                print(f"[{time.time() - t0:6.1f}s] {r['id']}: {r['status']} "
                      f"train={fmt_mib(r.get('train_peak_allocated_bytes'))} "
                      f"eval={fmt_mib(r.get('eval_peak_allocated_bytes'))} MiB"
                      + (f" ERROR {str(r.get('error'))[:300]}" if r["status"] == "error" else ""), flush=True)

        def run_rows(indices, run, jobs):
            """rows[i] = run(i) for every index, `jobs` fresh processes at a time, each reported."""
            with cf.ThreadPoolExecutor(max_workers=max(1, jobs)) as ex:
                futs = {ex.submit(run, i): i for i in indices}
                for f in cf.as_completed(futs):
                    rows[futs[f]] = f.result()
                    report(rows[futs[f]])

        run_rows(order, eager, args.cuda_jobs)
        for sid in [s for s in args.snapshot_ids.split(",") if s]:
            c = next((c for c in cfgs if c["id"] == sid), None)
            if c is None:
                print(f"snapshot id {sid!r} not among the configs run", file=sys.stderr)
                continue
            if not budget_left(20):
                print(f"snapshot {sid}: skipped (time budget)", flush=True)
                continue
            snap = os.path.join(os.path.dirname(os.path.abspath(out)),
                                f"snap-{sid}{'-' + args.tag if args.tag else ''}.pickle")
            r = run_one(args.python, c, "cuda", tmo(), snapshot=snap, extra=extra)
            i = cfgs.index(c)
            rows[i]["snapshot_run"] = {k: r.get(k) for k in (
                "status", "error", "snapshot", "train_peak_allocated_bytes", "eval_peak_allocated_bytes",
                "first_iter_peak_allocated_bytes", "process_wall_s")}
            if not args.quiet:
                print(f"[{time.time() - t0:6.1f}s] snapshot {sid}: {r['status']} -> {snap}"
                      + (f" ERROR {str(r.get('error'))[:300]}" if r["status"] == "error" else ""), flush=True)
        def compiled(i):
            c = cfgs[i]
            # torch.compile needs ~1-2 min (train and eval graphs): start it only with room left
            r = run_one(args.python, c, "cuda", tmo(), extra=extra) if budget_left(100) else skipped(c)
            r["concurrent_processes"] = max(1, args.compile_jobs)
            return r

        # inductor compiles on the CPU, so on a many-core machine several configs can compile at
        # once; the peak counters stay per process, as with --cuda-jobs
        run_rows(later, compiled, args.compile_jobs)
    else:
        with cf.ThreadPoolExecutor(max_workers=max(1, args.jobs)) as ex:
            futs = {ex.submit(run_one, args.python, c, args.method, args.timeout, None, extra): i
                    for i, c in enumerate(cfgs)}
            for f in cf.as_completed(futs):
                i = futs[f]
                rows[i] = f.result()
                if not args.quiet:
                    r = rows[i]
                    print(f"[{time.time() - t0:6.1f}s] {r['id']}: {r['status']} ({r.get('wall_s')}s)", flush=True)
    wall = time.time() - t0
    if args.update and os.path.exists(out):
        with open(out) as f:
            old = {r["id"]: r for r in json.load(f)["rows"]}
        new = {r["id"]: r for r in rows}
        order = [c["id"] for c in load_configs(args.configs)]
        merged = {**old, **new}
        rows = [merged[i] for i in order if i in merged] + [r for i, r in merged.items() if i not in order]
    prov = provenance(args.method, args, wall, rows)
    if args.update and os.path.exists(out):
        # keep the original run's provenance; record this partial run as an update
        with open(out) as f:
            old_prov = json.load(f)["provenance"]
        upd = {k: prov.get(k) for k in ("date_utc", "command", "total_wall_s", "torch", "device_name", "driver", "compile_jobs")}
        upd["ids"] = [c["id"] for c in cfgs]
        prov = {**old_prov, "n_rows": len(rows), "updates": old_prov.get("updates", []) + [upd]}
    doc = {"provenance": prov, "rows": rows}
    write_doc(out, doc)
    print(f"wrote {out} ({len(rows)} rows, {wall:.0f}s)")
    print_table(rows, args.method)
    return 0


if __name__ == "__main__":
    sys.exit(main())
