#!/usr/bin/env bash
# vramfit reference: the cuda method over every config, on one GPU.
#
# Run from the repository root on a machine with CUDA and PyTorch (2.11) installed; needs only
# python3 + torch (+ nvidia-smi for the per-process numbers), no internet:
#
#     OUT=/some/dir bash tests/reference/gpu_run.sh            # everything (compile configs last)
#     SKIP_COMPILE=1 OUT=/some/dir bash tests/reference/gpu_run.sh   # without the 3 gpu_only ones
#
# Writes  $OUT/cuda-<gpu>.json (e.g. cuda-h100.json; OUT defaults to tests/reference/data) and
# memory-history snapshots $OUT/snap-<id>.pickle for 4 configs, then prints a compact table.
# Each config runs in a fresh python3 process, strictly one after another. A time budget
# (DEADLINE_S, default 460 s) stops starting new configs and caps the running one, so the whole
# run stays under 8 minutes;
# anything not run is recorded as "skipped". Environment knobs:
#     GPU_PY (interpreter, default python3), OUT, SKIP_COMPILE=1, DEADLINE_S, TIMEOUT_S (per run, default 240),
#     IDS=a,b,c (subset of configs), SNAPS=a,b (snapshot configs), TAG=x (output names
#     cuda-<gpu>-x.json / snap-<id>-x.pickle, e.g. with GPU_PY=tests/reference/probes/python-flash-only),
#     DRY_RUN=1 (offline test without a GPU: torch.cuda counters stubbed, see cuda_stub.py; real
#     CPU math, so only with small IDS/SNAPS).
set -u
HERE="tests/reference"
if [ ! -f "$HERE/measure.py" ]; then
    echo "run me from the repository root (tests/reference/measure.py not found)" >&2
    exit 2
fi
PY="${GPU_PY:-python3}"   # not PYTHON: probes/python-flash-only reads PYTHON itself
OUT="${OUT:-$HERE/data}"
DEADLINE_S="${DEADLINE_S:-460}"
TIMEOUT_S="${TIMEOUT_S:-240}"
mkdir -p "$OUT"

# The four snapshot configs: fp32 flash GA1, bf16 flash GA2, fp16 flash, bf16 manual.
SNAPS="${SNAPS-shakespeare-char-fp32-d0,L4H4C256-T128-B8-V512-bf16-flash-ga2,L6C384-T512-B16-fp16-V50304,L6H6C384-T512-B8-V50304-bf16-manual}"

ARGS=(--method cuda --outdir "$OUT" --snapshot-ids "$SNAPS" --deadline-s "$DEADLINE_S" --timeout "$TIMEOUT_S" --python "$PY")
if [ -n "${TAG:-}" ]; then
    ARGS+=(--tag "$TAG")   # output cuda-<gpu>-<TAG>.json, snap-<id>-<TAG>.pickle
fi
if [ -n "${IDS:-}" ]; then
    ARGS+=(--ids "$IDS")   # a comma-separated subset of config ids
fi
if [ "${SKIP_COMPILE:-0}" = "1" ]; then
    ARGS+=(--skip-gpu-only)
fi
if [ "${DRY_RUN:-0}" = "1" ]; then
    ARGS+=(--measure-arg=--dry-run-cuda)
else
    # preflight: fail early and clearly if this python has no CUDA torch (no CUDA context kept).
    # Run from a file, not stdin, so that wrapper interpreters (probes/python-flash-only) work.
    PRE="$(mktemp /tmp/vramfit-preflight.XXXXXX)"
    cat > "$PRE" <<'EOF'
import sys, subprocess
import torch
print(f"torch {torch.__version__}, CUDA runtime {torch.version.cuda}")
if not torch.cuda.is_available():
    sys.exit("torch.cuda.is_available() is False: the cuda method needs a GPU")
if not torch.__version__.startswith("2.11"):
    print(f"WARNING: torch {torch.__version__}; the reference data were prepared for 2.11", file=sys.stderr)
try:
    print(subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version,memory.total,memory.used",
                          "--format=csv"], capture_output=True, text=True, timeout=20).stdout.strip())
except Exception as e:
    print(f"nvidia-smi unavailable: {e!r}")
EOF
    "$PY" "$PRE" || { rm -f "$PRE"; exit 3; }
    rm -f "$PRE"
fi

START=$(date +%s)
"$PY" "$HERE/run_all.py" "${ARGS[@]}"
RC=$?
echo "gpu_run.sh: run_all exit $RC after $(( $(date +%s) - START ))s; outputs in $OUT:"
ls -la "$OUT" | grep -E 'cuda-|snap-' || true
exit $RC
