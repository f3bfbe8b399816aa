#!/usr/bin/env bash
# vramfit reference: the randomly drawn configs (probes/random_configs.py) measured on one GPU.
#
# Run from the repository root on a machine with CUDA and PyTorch 2.11 (no internet needed):
#
#     OUT=/some/dir bash tests/reference/probes/gpu_random.sh
#
# Measures the draws in the order below, JOBS processes at a time (each config in its own fresh
# process; the peak counters are per process, so running several at once changes no peak, only
# the mem_get_info totals in the rows' points), until DEADLINE_S seconds have gone: a draw not
# reached, or configs not started in time, become rows with status "skipped". Writes
# $OUT/cuda-<gpu>-<tag>.json per draw and $OUT/gpu_random.log. Order: the bf16/fp16 draw first
# (CUDA's autocast, fp32 softmax and dropout masks, which no CPU trace holds), then the mixed
# draws, then the fp32 ones (one head, batch 1, eval blocks).
#     OUT, JOBS (default 14), DEADLINE_S (default 420), GPU_PY (default python3),
#     DRAWS="file:tag ..." (default: all six), DRY_RUN=1 (no GPU: counters stubbed, tiny configs only)
set -u
HERE="tests/reference"
if [ ! -f "$HERE/run_all.py" ]; then
    echo "run me from the repository root (tests/reference/run_all.py not found)" >&2
    exit 2
fi
OUT="${OUT:?set OUT to the output folder}"
JOBS="${JOBS:-14}"
DEADLINE_S="${DEADLINE_S:-420}"
PY="${GPU_PY:-python3}"
DRAWS="${DRAWS:-random_configs_wide_mixed_seed27.json:random-wide-mixed-seed27 random_configs.json:random random_configs_seed11.json:random-seed11 random_configs_seed7.json:random-seed7 random_configs_wide_seed26.json:random-wide-seed26 random_configs_wide_seed28.json:random-wide-seed28}"
mkdir -p "$OUT"
# one thread each: JOBS processes share the machine's cores, and the GPU does the work
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
EXTRA=()
if [ "${DRY_RUN:-0}" = "1" ]; then EXTRA+=(--measure-arg=--dry-run-cuda); fi
START=$(date +%s)
for d in $DRAWS; do
    file="${d%%:*}"; tag="${d##*:}"
    left=$(( DEADLINE_S - ($(date +%s) - START) ))
    if [ "$left" -lt 30 ]; then
        echo "gpu_random.sh: $file not started ($left s left)" | tee -a "$OUT/gpu_random.log"
        continue
    fi
    echo "gpu_random.sh: $file -> tag $tag, $left s left" | tee -a "$OUT/gpu_random.log"
    "$PY" "$HERE/run_all.py" --method cuda --configs "$HERE/$file" --outdir "$OUT" --tag "$tag" \
        --cuda-jobs "$JOBS" --deadline-s "$left" --timeout 150 --python "$PY" "${EXTRA[@]}" \
        >> "$OUT/gpu_random.log" 2>&1
    rc=$?
    echo "gpu_random.sh: $file done, exit $rc at $(( $(date +%s) - START )) s" | tee -a "$OUT/gpu_random.log"
done
ls -la "$OUT"
