#!/usr/bin/env bash
# vramfit reference: flash-attention configs whose head size some of PyTorch's SDPA kernels
# refuse, measured by the cuda method: float32 heads that are not a multiple of 4 and
# bfloat16/float16 heads over 256 (`odd_head_configs.json`, hand-picked, each with a memory
# history snapshot; `random_configs_odd_heads_seed41.json`, `probes/random_configs.py --seed 41
# --n 80 --space odd-heads`). Rows record which attention ops ran (`attention_ops`).
#
# Run from the repository root on a machine with CUDA and PyTorch 2.11:
#
#     OUT=/some/dir bash tests/reference/probes/gpu_odd_heads.sh
#
# Writes $OUT/cuda-<gpu>-odd-heads-hand.json, $OUT/cuda-<gpu>-odd-heads-seed41.json,
# $OUT/cuda-<gpu>-flash-first-odd-heads-{hand,seed41}.json (the bfloat16/float16 rows again with
# TORCH_CUDNN_SDPA_DEPRIORITIZED=1), $OUT/odd-heads-snapshots.tar.gz and $OUT/gpu_odd_heads.log.
#     OUT, JOBS (default 14), DEADLINE_S (default 300: at 200 the flash-first part did not start), GPU_PY (default python3),
#     DRY_RUN=1 (no GPU: counters stubbed; then set IDS to a few tiny configs of the random draw)
set -u
HERE="tests/reference"
if [ ! -f "$HERE/run_all.py" ]; then
    echo "run me from the repository root (tests/reference/run_all.py not found)" >&2
    exit 2
fi
OUT="${OUT:?set OUT to the output folder}"
JOBS="${JOBS:-14}"
DEADLINE_S="${DEADLINE_S:-300}"
PY="${GPU_PY:-python3}"
mkdir -p "$OUT" "$OUT/snaps"
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1
EXTRA=()
if [ "${DRY_RUN:-0}" = "1" ]; then EXTRA+=(--measure-arg=--dry-run-cuda); fi
LOG="$OUT/gpu_odd_heads.log"
START=$(date +%s)
"$PY" -c "import torch; print('torch', torch.__version__, torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no cuda')" | tee -a "$LOG"
hand=$("$PY" -c "import json; print(','.join(c['id'] for c in json.load(open('$HERE/odd_head_configs.json'))['configs']))")
"$PY" "$HERE/run_all.py" --method cuda --configs "$HERE/odd_head_configs.json" --outdir "$OUT/snaps" --tag odd-heads-hand \
    --snapshot-ids "$hand" --cuda-jobs "$JOBS" --deadline-s "$DEADLINE_S" --timeout 120 --python "$PY" "${EXTRA[@]}" \
    >> "$LOG" 2>&1
echo "gpu_odd_heads.sh: hand-picked done, exit $? at $(( $(date +%s) - START )) s" | tee -a "$LOG"
mv "$OUT"/snaps/cuda-*.json "$OUT"/ 2>/dev/null
left=$(( DEADLINE_S - ($(date +%s) - START) ))
IDARG=()
if [ -n "${IDS:-}" ]; then IDARG+=(--ids "$IDS"); fi
"$PY" "$HERE/run_all.py" --method cuda --configs "$HERE/random_configs_odd_heads_seed41.json" --outdir "$OUT" \
    --tag odd-heads-seed41 "${IDARG[@]}" --cuda-jobs "$JOBS" --deadline-s "$left" --timeout 150 --python "$PY" "${EXTRA[@]}" \
    >> "$LOG" 2>&1
echo "gpu_odd_heads.sh: random draw done, exit $? at $(( $(date +%s) - START )) s" | tee -a "$LOG"
# bfloat16/float16 again with SDPA trying flash before cuDNN, as on every card but sm_90/sm_100
# (probes/gpu_flash_first.sh): which kernel a consumer card would run for heads over 256.
for f in odd_head_configs.json:hand random_configs_odd_heads_seed41.json:seed41; do
    file="${f%%:*}"; tag="flash-first-odd-heads-${f##*:}"
    left=$(( DEADLINE_S - ($(date +%s) - START) ))
    if [ "$left" -lt 20 ]; then echo "gpu_odd_heads.sh: $tag not started ($left s left)" | tee -a "$LOG"; continue; fi
    ids=$("$PY" -c "import json; print(','.join(c['id'] for c in json.load(open('$HERE/$file'))['configs'] if c['dtype'] != 'float32' and ('${IDS:-}' == '' or c['id'] in '${IDS:-}'.split(','))))")
    if [ -z "$ids" ]; then continue; fi
    TORCH_CUDNN_SDPA_DEPRIORITIZED=1 "$PY" "$HERE/run_all.py" --method cuda --configs "$HERE/$file" --ids "$ids" --outdir "$OUT" \
        --tag "$tag" --cuda-jobs "$JOBS" --deadline-s "$left" --timeout 120 --python "$PY" "${EXTRA[@]}" >> "$LOG" 2>&1
    echo "gpu_odd_heads.sh: $tag done, exit $? at $(( $(date +%s) - START )) s" | tee -a "$LOG"
done
(cd "$OUT/snaps" && tar czf ../odd-heads-snapshots.tar.gz snap-*.pickle) && rm -rf "$OUT/snaps"
ls -la "$OUT"
tail -30 "$LOG"
