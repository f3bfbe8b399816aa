#!/usr/bin/env bash
# vramfit reference: bf16/fp16 flash-attention configs measured with PyTorch's SDPA trying flash
# before cuDNN, as it does on every card but sm_90/sm_100 (RTX 30xx/40xx, A100).
#
# On sm_90 PyTorch 2.11 prefers cuDNN's attention for heads that are multiples of 8
# (`check_prefer_cudnn_attention` in aten/src/ATen/native/transformers/cuda/sdp_utils.cpp);
# TORCH_CUDNN_SDPA_DEPRIORITIZED=1 restores the default order (flash, efficient, math, cuDNN),
# so an H100/H200 then runs the FlashAttention-2 kernels a consumer card runs. Rows record the
# variable in their environment and the attention ops that ran (`attention_ops`).
#
# Run from the repository root on a machine with CUDA and PyTorch 2.11:
#
#     OUT=/some/dir bash tests/reference/probes/gpu_flash_first.sh
#
# For each configs file below, the configs in bf16/fp16 with flash attention, a head size that
# is a multiple of 8 (others run flash either way), eager and the default allocator, JOBS
# processes at a time until DEADLINE_S: $OUT/cuda-<gpu>-flash-first-<tag>.json.
#     OUT, JOBS (default 14), DEADLINE_S (default 330), GPU_PY (default python3),
#     FILES="file:tag ..." (default below), DRY_RUN=1 (no GPU: counters stubbed, tiny configs only)
set -u
HERE="tests/reference"
if [ ! -f "$HERE/run_all.py" ]; then
    echo "run me from the repository root (tests/reference/run_all.py not found)" >&2
    exit 2
fi
OUT="${OUT:?set OUT to the output folder}"
JOBS="${JOBS:-14}"
DEADLINE_S="${DEADLINE_S:-330}"
PY="${GPU_PY:-python3}"
FILES="${FILES:-configs.json:hand-picked random_configs_seed13.json:random-seed13 random_configs_wide_mixed_seed31.json:random-wide-mixed-seed31 random_configs_seed7.json:random-seed7 random_configs_seed11.json:random-seed11}"
mkdir -p "$OUT"
export OMP_NUM_THREADS=1 MKL_NUM_THREADS=1 TORCH_CUDNN_SDPA_DEPRIORITIZED=1
EXTRA=()
if [ "${DRY_RUN:-0}" = "1" ]; then EXTRA+=(--measure-arg=--dry-run-cuda); fi
START=$(date +%s)
for f in $FILES; do
    file="${f%%:*}"; tag="flash-first-${f##*:}"
    left=$(( DEADLINE_S - ($(date +%s) - START) ))
    if [ "$left" -lt 30 ]; then
        echo "gpu_flash_first.sh: $file not started ($left s left)" | tee -a "$OUT/gpu_flash_first.log"
        continue
    fi
    ids=$("$PY" - "$HERE/$file" <<'PYEOF'
import json, sys
doc = json.load(open(sys.argv[1]))
cfgs = doc["configs"] if isinstance(doc, dict) else doc
print(",".join(c["id"] for c in cfgs
               if c.get("dtype") in ("bfloat16", "float16") and c.get("attention") == "flash"
               and (c["n_embd"] // c["n_head"]) % 8 == 0
               and not c.get("compile") and not c.get("expandable_segments")))
PYEOF
)
    if [ -z "$ids" ]; then continue; fi
    echo "gpu_flash_first.sh: $file -> tag $tag, $(echo "$ids" | tr ',' '\n' | wc -l) configs, $left s left" | tee -a "$OUT/gpu_flash_first.log"
    "$PY" "$HERE/run_all.py" --method cuda --configs "$HERE/$file" --ids "$ids" --outdir "$OUT" --tag "$tag" \
        --cuda-jobs "$JOBS" --deadline-s "$left" --timeout 150 --python "$PY" "${EXTRA[@]}" \
        >> "$OUT/gpu_flash_first.log" 2>&1
    echo "gpu_flash_first.sh: $file done, exit $? at $(( $(date +%s) - START )) s" | tee -a "$OUT/gpu_flash_first.log"
done
ls -la "$OUT"
