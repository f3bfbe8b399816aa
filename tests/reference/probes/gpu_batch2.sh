#!/usr/bin/env bash
# Second GPU batch of this session (2026-11-22): the configs the first gpu_run.sh pass did not
# reach (two groups in parallel processes: peaks are per process, so concurrency does not mix
# them), the bf16/fp16 flash configs again with cuDNN attention disabled (FlashAttention-2, the
# kernel consumer cards use), and the compile configs.
export PYTHONUNBUFFERED=1
A=L8H8C512-T256-B8-V50304-bf16-flash-bias,L8H8C512-T256-B8-V50304-fp16-flash,L8H8C512-T512-B4-V8192-bf16-flash-ga4,L8H8C512-T512-B4-V8192-fp32-manual-bias,L8H16C512-T1024-B2-V50304-bf16-manual,L10H10C640-T128-B32-V32000-bf16-flash-eb8,L10H10C640-T128-B32-V32000-fp16-flash-ga2-eb64,L12H12C768-T512-B8-V50304-bf16-flash-ckpt,L12H12C768-T256-B8-V50304-fp32-flash-bias-ga2,L12H12C768-T1024-B2-V50304-bf16-manual-bias,L16H16C1024-T128-B4-V50304-bf16-flash,L16H16C1024-T256-B4-V50304-fp32-flash
B=L20H16C1024-T256-B2-V50304-fp16-flash-bias,gpt2-medium-T512-B2-bf16,gpt2-medium-T1024-B1-bf16-ckpt,L24H8C512-T256-B4-V4096-fp32-flash-ga2,L2H8C1024-T1024-B4-V50304-bf16-flash,L2H2C256-T1024-B16-V65-fp32-flash,L3H3C192-T512-B32-V65-fp16-flash-drop0.1,shakespeare-char-d0-eb256,trace-fp32-flash,trace-bf16-flash,trace-bf16-manual
C=shakespeare-char-d0,shakespeare-char,L6C384-T512-B16-fp16-V50304,gpt2-124M-B4-bf16,gpt2-124M-B8-bf16,L12C576-T1024-B16-fp16-ga32,L2H2C128-T64-B4-V65-bf16-flash,L4H4C256-T128-B8-V512-bf16-flash-ga2,L4H8C256-T256-B16-V1024-bf16-flash-eb32,L6H6C384-T256-B32-V65-bf16-flash-ckpt,L8H8C512-T256-B8-V50304-bf16-flash-bias,L8H8C512-T512-B4-V8192-bf16-flash-ga4,L10H10C640-T128-B32-V32000-bf16-flash-eb8,L16H16C1024-T128-B4-V50304-bf16-flash,gpt2-medium-T512-B2-bf16,L2H8C1024-T1024-B4-V50304-bf16-flash,L4H4C256-T128-B8-V512-bf16-flash-bias-drop0.1,L3H3C192-T512-B32-V65-fp16-flash-drop0.1
D=L6C384-T512-B16-fp16-V50304-compile,gpt2-124M-B8-bf16-compile,gpt2-124M-B64-bf16-compile
(IDS=$A TAG=p2a DEADLINE_S=420 bash tests/reference/gpu_run.sh > "$OUT/log-a.txt" 2>&1) &
(IDS=$B SNAPS= TAG=p2b DEADLINE_S=420 bash tests/reference/gpu_run.sh > "$OUT/log-b.txt" 2>&1) &
(GPU_PY=tests/reference/probes/python-flash-only IDS=$C SNAPS= TAG=flash-only DEADLINE_S=420 bash tests/reference/gpu_run.sh > "$OUT/log-c.txt" 2>&1) &
(IDS=$D SNAPS= TAG=compile DEADLINE_S=400 TIMEOUT_S=300 bash tests/reference/gpu_run.sh > "$OUT/log-d.txt" 2>&1) &
wait
tail -n 3 "$OUT"/log-*.txt
ls -la "$OUT"
