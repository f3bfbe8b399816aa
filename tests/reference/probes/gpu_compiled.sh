#!/usr/bin/env bash
# vramfit reference: `compile=True` (nanoGPT's default) out of sample. core's compile model is
# fitted to the three compiled rows of cuda-h100-compile.json; this measures 16 configs drawn by
# `probes/random_configs.py --space compiled --seed 43` (random_configs_compiled_seed43.json)
# with the cuda method, JOBS processes at a time (inductor compiles each on the CPU first; before
# run_all.py's --compile-jobs, which this passes, the compiled configs ran one at a time whatever
# JOBS said).
#
#     OUT=/some/dir bash tests/reference/probes/gpu_compiled.sh
#
# Writes $OUT/cuda-<gpu>-compiled-seed43<TAG>.json and $OUT/gpu_compiled.log.
#     OUT, JOBS (default 8), DEADLINE_S (default 280), GPU_PY (default python3),
#     IDS=a,b (a subset of the configs), TAG=-x (suffix of the output's tag)
set -u
HERE="tests/reference"
if [ ! -f "$HERE/run_all.py" ]; then
    echo "run me from the repository root (tests/reference/run_all.py not found)" >&2
    exit 2
fi
OUT="${OUT:?set OUT to the output folder}"
PY="${GPU_PY:-python3}"
mkdir -p "$OUT"
# JOBS processes share the CPU's cores: two threads each for the math, two compile workers each
export OMP_NUM_THREADS=2 MKL_NUM_THREADS=2 TORCHINDUCTOR_COMPILE_THREADS=2
SUBSET=()
if [ -n "${IDS:-}" ]; then
    SUBSET=(--ids "$IDS")
fi
"$PY" "$HERE/run_all.py" --method cuda --configs "$HERE/random_configs_compiled_seed43.json" --outdir "$OUT" \
    "${SUBSET[@]}" --tag "compiled-seed43${TAG:-}" --compile-jobs "${JOBS:-8}" --deadline-s "${DEADLINE_S:-280}" \
    --timeout "${TIMEOUT_S:-240}" --python "$PY" >> "$OUT/gpu_compiled.log" 2>&1
echo "gpu_compiled.sh: exit $?" | tee -a "$OUT/gpu_compiled.log"
tail -22 "$OUT/gpu_compiled.log"
