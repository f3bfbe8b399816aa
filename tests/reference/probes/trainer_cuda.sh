#!/usr/bin/env bash
# vramfit's own trainer on a GPU: does it train, how much CUDA memory do its tensors take against
# core's trainer model, and how fast is it beside PyTorch eager on the same card.
#
# Run from the repository root on the GPU machine, with the binaries built elsewhere by
# `scripts/check-cuda-build 90` (H100) and copied into $BIN:
#     $BIN/vramfit          target/cuda-sm90/release/vramfit
#     $BIN/trainer_memory   the trainer_memory bench executable of the same build
#                           (cargo bench --no-run -p vramfit --features cuda --bench trainer_memory)
# Needs python3 with torch (the PyTorch side of the speed comparison) and the CUDA 13 libraries
# (cuBLAS, cuRAND, NVRTC), and transformers for part 5. Writes to $OUT (fetch at most 8 at once): runs.log
# (environment, three short training runs), dropout.txt, trainer-cuda-{f32,bf16,f16}.txt (bench
# tables, then the JSON rows), speed.txt, weights.txt, resume.txt and ckpt-cuda.safetensors.
# PARTS="4 5" runs only those parts.
set -u
BIN="${BIN:-.cuda-bin}"
OUT="${OUT:-/tmp/trainer-cuda}"
mkdir -p "$OUT"
chmod +x "$BIN"/* 2>/dev/null

# The CUDA 13 libraries candle loads: the toolkit's.
LIBS=$(dirname "$(find /usr/local /opt -name 'libcublasLt.so.13*' 2>/dev/null | head -n 1)")
export LD_LIBRARY_PATH="$LIBS:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}"
PARTS=" ${PARTS:-1 2 3 4 5} "   # which numbered parts below to run
part() { [[ "$PARTS" == *" $1 "* ]]; }
{
    date -u
    nvidia-smi --query-gpu=name,driver_version,memory.total,memory.used --format=csv
    echo "libraries: $LIBS"
    ldd "$BIN/vramfit" | grep -E 'cuda|cublas|curand|nvrtc|not found'
    python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda)'
    # 1. Short training runs: the built-in corpus, a small char model, each dtype, dropout 0.1.
    part 1 && for dtype in float32 bfloat16 float16; do
        echo "== train --dtype $dtype --dropout 0.1"
        timeout 120 "$BIN/vramfit" train --device cuda --dtype "$dtype" --dropout 0.1 --max-iters 100 \
            --eval-interval 50 --eval-iters 5 --log-interval 25 --out-dir "/tmp/run-$dtype" 2>&1
    done
} >"$OUT/runs.log" 2>&1
tail -n 30 "$OUT/runs.log"

# 2. The GPU's dropout masks against the host's, and its AdamW step against the CPU's.
part 2 && { timeout 60 "$BIN/trainer_memory" --probe-dropout; timeout 120 "$BIN/trainer_memory" --probe-adamw; } 2>&1 | tee "$OUT/dropout.txt"

# 3. Memory: core's trainer model against the CUDA pool's high-water marks, per window.
part 3 && for dtype in f32 bf16 f16; do
    echo "== trainer_memory --cuda $dtype"
    timeout 150 "$BIN/trainer_memory" --cuda "$dtype" --json >"$OUT/trainer-cuda-$dtype.txt" 2>&1
    echo "exit $?"
    grep -E '^[a-zA-Z+]' "$OUT/trainer-cuda-$dtype.txt" | head -n 20
done

# 4. Speed and memory of whole runs, beside PyTorch eager (nanoGPT's loop) on the same GPU:
# nanoGPT's shakespeare-char model (6 layers, 384 wide, context 256, batch 64, dropout 0.2) and
# GPT-2 124M (context 1024, batch 8, no dropout). nvidia-smi's line for vramfit's process is
# sampled while it trains (the only process on the GPU).
run_pair() {  # name dtype iters vramfit-flags json-config
    echo "== vramfit train, $1, $2"
    timeout 150 "$BIN/vramfit" train --device cuda --dtype "$2" $4 --gradient-accumulation-steps 1 --max-iters "$3" \
        --eval-interval 100000 --eval-iters 2 --log-interval 10 --out-dir "/tmp/speed-$1-$2" 2>&1 &
    local pid=$! most=0
    while kill -0 "$pid" 2>/dev/null; do
        # The only process on the GPU (vramfit, under timeout's pid).
        used=$(nvidia-smi --query-compute-apps=used_memory --format=csv,noheader,nounits 2>/dev/null | awk '{s += $1} END {print s + 0}')
        [ -n "$used" ] && [ "$used" -gt "$most" ] && most=$used
        sleep 0.5
    done
    wait "$pid"
    echo "nvidia-smi: vramfit's process used at most $most MiB"
    echo "== PyTorch eager, $1, $2"
    (cd tests/reference && timeout 120 python3 train_speed.py "{$5,\"iters\":30,\"warmup\":5,\"device\":\"cuda\",\"dtype\":\"$2\",\"attention\":\"flash\"}")
}
part 4 && {
    CHAR='--n-layer 6 --n-head 6 --n-embd 384 --block-size 256 --batch-size 64 --dropout 0.2'
    CHAR_JSON='"n_layer":6,"n_head":6,"n_embd":384,"block_size":256,"vocab_size":65,"batch_size":64,"gradient_accumulation_steps":1,"dropout":0.2'
    GPT2='--n-layer 12 --n-head 12 --n-embd 768 --block-size 1024 --batch-size 8 --dropout 0 --vocab-size 50304 --data /tmp/gpt2-tokens'
    GPT2_JSON='"n_layer":12,"n_head":12,"n_embd":768,"block_size":1024,"vocab_size":50304,"batch_size":8,"gradient_accumulation_steps":1,"dropout":0.0'
    # GPT-2's run reads nanoGPT-style train.bin / val.bin of random token ids (speed and memory
    # do not depend on the text).
    mkdir -p /tmp/gpt2-tokens
    python3 -c 'import numpy as n; r=n.random.default_rng(1); [r.integers(0,50257,s,dtype=n.uint16).tofile(f"/tmp/gpt2-tokens/{f}.bin") for f,s in (("train",2_000_000),("val",200_000))]'
    for dtype in float32 bfloat16; do run_pair char "$dtype" 60 "$CHAR" "$CHAR_JSON"; done
    for dtype in bfloat16 float32; do run_pair gpt2 "$dtype" 30 "$GPT2" "$GPT2_JSON"; done
} 2>&1 | tee "$OUT/speed.txt"

# 5. `--weights` on CUDA with a real Hugging Face GPT-2 file (made by transformers here, trained on
# a repeating pattern: see pretrained_check.py): vramfit's step-0 val loss must match the file's.
if part 5; then
    {
        echo "== pretrained_check.py"
        python3 tests/reference/probes/pretrained_check.py /tmp/hf-tiny
        echo "== vramfit train --weights (cuda, float32)"
        timeout 120 "$BIN/vramfit" train --device cuda --dtype float32 --weights /tmp/hf-tiny/model/model.safetensors \
            --data /tmp/hf-tiny/data --n-layer 2 --n-head 4 --n-embd 128 --bias true --vocab-size 50257 --dropout 0 \
            --block-size 128 --batch-size 32 --gradient-accumulation-steps 1 --max-iters 2 --eval-interval 1 \
            --eval-iters 20 --learning-rate 1e-5 --out-dir /tmp/weights-run 2>&1
        echo "== the same without --weights (random init)"
        timeout 120 "$BIN/vramfit" train --device cuda --dtype float32 \
            --data /tmp/hf-tiny/data --n-layer 2 --n-head 4 --n-embd 128 --bias true --vocab-size 50257 --dropout 0 \
            --block-size 128 --batch-size 32 --gradient-accumulation-steps 1 --max-iters 1 --eval-interval 1 \
            --eval-iters 20 --out-dir /tmp/random-run 2>&1 | grep -E 'step 0'
        echo "== GPT-2 124M bf16 (T1024, B8), 12 iterations: the pool's counters in its last records"
        mkdir -p /tmp/gpt2-tokens
        python3 -c 'import numpy as n; r=n.random.default_rng(1); [r.integers(0,50257,s,dtype=n.uint16).tofile(f"/tmp/gpt2-tokens/{f}.bin") for f,s in (("train",2_000_000),("val",200_000))]'
        timeout 120 "$BIN/vramfit" train --device cuda --dtype bfloat16 --n-layer 12 --n-head 12 --n-embd 768 \
            --block-size 1024 --batch-size 8 --dropout 0 --vocab-size 50304 --data /tmp/gpt2-tokens \
            --gradient-accumulation-steps 1 --max-iters 12 --eval-interval 100000 --eval-iters 2 --log-interval 4 \
            --out-dir /tmp/pool-gpt2 2>&1 | grep -E 'pre-flight|memory:|iter 8'
        tail -n 3 /tmp/pool-gpt2/log.jsonl
    } 2>&1 | tee "$OUT/weights.txt"
fi

# 6. Resume and sample on CUDA: 40 iterations straight against 20 + --resume 20 (dropout 0.1, so
# the GPU's masks must follow the seeds too), then sampling from the CUDA checkpoint on CUDA; the
# checkpoint is copied to $OUT for sampling on a CPU elsewhere.
if part 6; then
    {
        common="--device cuda --dtype float32 --dropout 0.1 --eval-interval 20 --eval-iters 5 --log-interval 20"
        echo "== 40 straight"
        timeout 120 "$BIN/vramfit" train $common --max-iters 40 --out-dir /tmp/straight 2>&1 | grep -E 'step|done'
        echo "== 20, then --resume to 40"
        timeout 120 "$BIN/vramfit" train $common --max-iters 20 --out-dir /tmp/halves 2>&1 | grep -E 'step|done'
        timeout 120 "$BIN/vramfit" train --resume --device cuda --max-iters 40 --out-dir /tmp/halves 2>&1 | grep -E 'step|done'
        echo "== sample on CUDA from the resumed run"
        timeout 60 "$BIN/vramfit" sample --device cuda --out-dir /tmp/halves --num-samples 1 --max-new-tokens 80 --temperature 0.8 --seed 7 2>&1
        cp /tmp/halves/ckpt.safetensors "$OUT/ckpt-cuda.safetensors"
    } 2>&1 | tee "$OUT/resume.txt"
fi

# 7. Whole runs of bigger models with the memory savers: the memory line (pool high-water mark vs
# prediction) of GPT-2 124M with checkpointing, the chunked loss and accumulation, and of GPT-2
# 350M's shape (24 layers, 1024 wide), in bf16 and f16.
if part 7; then
    {
        mkdir -p /tmp/gpt2-tokens
        python3 -c 'import numpy as n; r=n.random.default_rng(1); [r.integers(0,50257,s,dtype=n.uint16).tofile(f"/tmp/gpt2-tokens/{f}.bin") for f,s in (("train",2_000_000),("val",200_000))]'
        run() {  # name dtype flags
            echo "== $1, $2"
            timeout 150 "$BIN/vramfit" train --device cuda --dtype "$2" --data /tmp/gpt2-tokens --vocab-size 50304 \
                --dropout 0.1 --max-iters 4 --eval-interval 2 --eval-iters 2 --log-interval 2 --out-dir "/tmp/big-$1-$2" $3 2>&1 |
                grep -E 'model:|pre-flight|memory:|done:|error'
        }
        for dtype in bfloat16 float16; do
            run gpt2-savers "$dtype" "--n-layer 12 --n-head 12 --n-embd 768 --block-size 1024 --batch-size 16 --gradient-accumulation-steps 4 --activation-checkpointing true --chunked-loss true --eval-chunk-rows 4096 --eval-batch-size 32"
            run gpt2-350m "$dtype" "--n-layer 24 --n-head 16 --n-embd 1024 --block-size 1024 --batch-size 8 --gradient-accumulation-steps 2"
        done
    } 2>&1 | tee "$OUT/big.txt"
fi
