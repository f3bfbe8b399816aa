#!/usr/bin/env bash
# vramfit reference: PyTorch's allocator at a card's end, on a large GPU.
#
# Runs tests/reference/probes/capped.py over tests/reference/capped_configs.json (six configs of
# later_configs.json, each with a cap on the reserve between the model's reserve through the
# measured windows and after its later growth, or just above a reserve that does not grow; and
# where the model says a run runs out, the batch below that it says keeps fitting; written by
# `cargo run --release -p vramfit-core --example later_growth -- capped`), each in a
# fresh process, and writes $OUT/cuda-<gpu>-capped.json (rows plus provenance). Commit it to
# tests/reference/data/; core/tests/reference.rs compares each row's outcome with the model's.
# About 12 s per config (10 rows: 2 minutes on an H200). Knobs: GPU_PY (default python3), OUT, IDS=a,b, CYCLES (default 2).
set -u
HERE="tests/reference"
if [ ! -f "$HERE/measure.py" ]; then
    echo "run me from the repository root (tests/reference/measure.py not found)" >&2
    exit 2
fi
PY="${GPU_PY:-python3}"
OUT="${OUT:-$HERE/data}"
mkdir -p "$OUT"
exec "$PY" - "$PY" "$OUT" "${IDS:-}" "${CYCLES:-2}" <<'PYEOF'
import json, os, subprocess, sys, time
py, out, ids, cycles = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4]
sys.path.insert(0, "tests/reference")
import run_all
configs = json.load(open("tests/reference/capped_configs.json"))["configs"]
wanted = [c["id"] for c in configs if not ids or c["id"] in ids.split(",")]
rows, t0 = [], time.time()
for cid in wanted:
    try:
        p = subprocess.run([py, "tests/reference/probes/capped.py", "--config-id", cid, "--later-cycles", cycles],
                           capture_output=True, text=True, timeout=180)
        row = json.loads(p.stdout.strip().splitlines()[-1])
    except subprocess.TimeoutExpired:
        row = {"id": cid, "outcome": "error", "error": "timeout after 180 s"}
    except Exception:
        row = {"id": cid, "outcome": "error", "error": (p.stderr or p.stdout)[-2000:]}
    rows.append(row)
    print(f"[{time.time() - t0:6.1f}s] {cid}: {row['outcome']} {row.get('oom_phase', '')} "
          f"retries={row.get('allocator_stats_end', {}).get('num_alloc_retries')} "
          f"points={[(q[0], q[2] >> 20) for q in row.get('later_points', [])][:4]}", flush=True)
env = next((r.get("environment") for r in rows if r.get("environment")), {}) or {}
import torch
doc = {"provenance": {"method": "cuda-capped",
                      "method_description": "measure.py's loop with torch.cuda.set_per_process_memory_fraction(cap / total): "
                                            "the reserve capped as on a smaller card (tests/reference/probes/capped.py)",
                      "torch": torch.__version__, "device_name": env.get("device_name"),
                      "nvidia_smi_gpu": env.get("nvidia_smi_gpu"), "cuda_runtime": env.get("cuda_runtime"),
                      "date_utc": subprocess.run(["date", "-u"], capture_output=True, text=True).stdout.strip(),
                      "later_cycles": int(cycles), "total_wall_s": round(time.time() - t0, 1)},
       "rows": rows}
name = f"cuda-{run_all.gpu_slug()}-capped.json"
with open(os.path.join(out, name), "w") as f:
    json.dump(doc, f, indent=1)
print(f"wrote {os.path.join(out, name)}")
PYEOF
