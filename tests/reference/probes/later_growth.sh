#!/usr/bin/env bash
# vramfit reference: the CUDA allocator's reserve past the two iterations the main run measures.
#
# core's allocator model, run on past iteration 2 (sim::simulate_exact_and_later), grows its
# reserve again in some configs (README: Accuracy, "After the two iterations"), and `plan` warns,
# marks fixes and lowers the largest lasting batch on that prediction. Run on an H200 on
# 2026-11-26 (tests/reference/data/cuda-h200-later.json; README: Accuracy).
# This runs measure.py's cuda method with --later-cycles 3 (iterations 3 to 50, an estimate_loss
# after every 16th) over tests/reference/later_configs.json (16 configs: the model's largest and
# latest growth on the H100 preset, GPT-2 124M at batch 8 accumulating 5, four that do not grow;
# written by `cargo run --release -p vramfit-core --example later_growth -- configs`).
#
# Run from the repository root on a machine with CUDA and PyTorch 2.11; about 15 s per config:
#
#     OUT=/some/dir bash tests/reference/probes/later_growth.sh
#
# Writes $OUT/cuda-<gpu>-later.json (OUT defaults to tests/reference/data). Commit it there and
# `cargo bench -p vramfit-core --bench plan` prints the `later_reserved` window beside the others
# (core/tests/reference_data.rs compares the reserve after iteration 2 with the windows' and the
# last with the continued simulation's). Knobs: GPU_PY (default python3), OUT, IDS=a,b (subset),
# DEADLINE_S (default 420: stop starting configs after that), DRY_RUN=1 (no GPU: torch.cuda
# stubbed by cuda_stub.py on CPU tensors; checks the plumbing only, use a small IDS).
set -u
HERE="tests/reference"
if [ ! -f "$HERE/measure.py" ]; then
    echo "run me from the repository root (tests/reference/measure.py not found)" >&2
    exit 2
fi
PY="${GPU_PY:-python3}"
if [ "${DRY_RUN:-0}" = "1" ] && [ -z "${OUT:-}" ]; then
    OUT="$(mktemp -d /tmp/vramfit-later-dry.XXXXXX)"   # a stub GPU's rows are no reference data
fi
OUT="${OUT:-$HERE/data}"
mkdir -p "$OUT"
ARGS=(--method cuda --configs "$HERE/later_configs.json" --outdir "$OUT" --tag later
      --measure-arg=--later-cycles=3 --deadline-s "${DEADLINE_S:-420}" --timeout 120 --python "$PY")
if [ -n "${IDS:-}" ]; then
    ARGS+=(--ids "$IDS")
fi
if [ "${DRY_RUN:-0}" = "1" ]; then
    ARGS+=(--measure-arg=--dry-run-cuda)
fi
exec "$PY" "$HERE/run_all.py" "${ARGS[@]}"
