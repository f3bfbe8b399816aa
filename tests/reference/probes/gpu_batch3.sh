#!/usr/bin/env bash
# Third GPU batch (2026-11-22): memory-history snapshots of the configs whose reserved or
# first-iteration peak the model misses most, and a subset run with
# PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to calibrate that setting's reserve.
export PYTHONUNBUFFERED=1
for id in L6H6C384-T512-B8-V50304-fp16-manual-ga2 L6H6C384-T256-B32-V65-fp32-flash-bias-ckpt L4H8C256-T256-B16-V1024-fp32-manual-eb4; do
  python3 tests/reference/measure.py --method cuda --config-id "$id" --snapshot "$OUT/snap-$id.pickle" --out "$OUT/row-$id.json" > /dev/null 2> "$OUT/err-$id.txt" &
done
X=shakespeare-char-d0,L6C384-T512-B16-fp16-V50304,gpt2-124M-B8-bf16,L12C576-T1024-B16-fp16-ga32,L8H8C512-T256-B8-V50304-fp32-flash,L24H8C512-T256-B4-V4096-fp32-flash-ga2,L4H8C256-T256-B16-V1024-bf16-flash-eb32,L6H6C384-T256-B32-V65-bf16-flash-ckpt
(PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True IDS=$X SNAPS= TAG=expandable DEADLINE_S=300 bash tests/reference/gpu_run.sh > "$OUT/log-x.txt" 2>&1) &
wait
tail -n 12 "$OUT/log-x.txt"
ls -la "$OUT"
