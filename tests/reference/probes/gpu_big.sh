#!/usr/bin/env bash
# vramfit reference: GPT-2 350M, 774M and 1.5B shapes (`big_configs.json`) by the cuda method,
# past the layers, widths and activations measured before (`core::plan::MEASURED_MAX_*`). The
# largest needs about 60 GiB of GPU memory: run it on an H200 (or an 80 GB card, JOBS=1).
#
#     OUT=/some/dir bash tests/reference/probes/gpu_big.sh
#
# Writes $OUT/cuda-<gpu>-big.json and appends to $OUT/gpu_big.log.
#     OUT, JOBS (default 2), DEADLINE_S (default 200), GPU_PY (default python3)
set -u
HERE="tests/reference"
if [ ! -f "$HERE/run_all.py" ]; then
    echo "run me from the repository root (tests/reference/run_all.py not found)" >&2
    exit 2
fi
OUT="${OUT:?set OUT to the output folder}"
PY="${GPU_PY:-python3}"
mkdir -p "$OUT"
export OMP_NUM_THREADS=4 MKL_NUM_THREADS=4
"$PY" "$HERE/run_all.py" --method cuda --configs "$HERE/big_configs.json" --outdir "$OUT" --tag big \
    --cuda-jobs "${JOBS:-2}" --deadline-s "${DEADLINE_S:-200}" --timeout 180 --python "$PY" >> "$OUT/gpu_big.log" 2>&1
echo "gpu_big.sh: exit $?" | tee -a "$OUT/gpu_big.log"
tail -12 "$OUT/gpu_big.log"
