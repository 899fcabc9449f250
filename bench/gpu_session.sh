#!/usr/bin/env bash
# Every GPU check of the project in one command, sized for a short lease of one H100 (torch 2.11 + CUDA image,
# no network): the FP8 GEMM bench, the quantizer at the bandwidth floor, one training step of the h100 profile's
# model (bf16 vs simulated fp8_hybrid, eager and compiled), the CUDA cases of the compiled-vs-eager gradient tests,
# the accumulator cross-check and a short h100-profile run. Each step has its own time limit and a failing step
# does not stop the others. Packages the image lacks travel in .gpu/site.tar.gz (built by bench/gpu_site.sh:
# geoopt, torchao without its compiled extensions, datasets, the GPT-2 ranks, the licence texts). Logs and results
# go to $OUT.
#
#   run(command="bash bench/gpu_session.sh", carry=[".gpu"], timeout_s=590)
#   run(command="bash bench/gpu_session.sh peers", carry=[".gpu"], timeout_s=520)   # peers' steps + a compiled run
#   run(command="bash bench/gpu_session.sh blocks", carry=[".gpu"], timeout_s=450)  # block recipes' steps, <= 410 s
set -u
OUT=${OUT:-/tmp/gpu_out}
mkdir -p "$OUT"
T0=$SECONDS
SITE=/tmp/site
mkdir -p $SITE && tar -xzf .gpu/site.tar.gz -C $SITE || exit 3
export PYTHONPATH=$PWD:$SITE PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 ALTGRAD_OFFLINE=1
export ALTGRAD_OUTPUTS=/tmp/ag_out TORCHINDUCTOR_CACHE_DIR=/tmp/inductor
PY=python3
step() {   # step NAME LIMIT_S CMD...: run CMD under a time limit, log its exit code and wall time
    local name=$1 limit=$2 s=$SECONDS
    shift 2
    echo "=== $name: start at +$((SECONDS - T0)) s (limit $limit s)"
    timeout "$limit" "$@"
    echo "=== $name: rc=$? in $((SECONDS - s)) s"
}
nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
lscpu | grep "Model name"
$PY -c "import torch, torchao, geoopt, altgrad_lib; print('torch', torch.__version__, 'cuda', torch.version.cuda, \
'torchao', torchao.__version__, torch.cuda.get_device_name())" || exit 4

exec 3>&1                    # the call's own stdout, for a summary at the end
exec > "$OUT/log.txt" 2>&1   # a file, not a tee: `wait` would wait for a tee process substitution forever
if [ "${1:-}" = blocks ]; then   # the block recipes' compiled steps on the h100 model (bench/results/gpu_h100.md)
    nvidia-smi --query-gpu=timestamp,clocks.sm,clocks.mem,power.draw,temperature.gpu,utilization.gpu,memory.used \
        --format=csv -l 1 > "$OUT/smi.csv" 2>&1 &
    smi=$!
    A="--device cuda --precision bf16 --n-layer 6 --n-head 8 --n-embd 512 --block-size 512 --vocab 50304 --batch 32
       --steps 10 --warmup 3 --also-consecutive 10"
    # compile_scope=blocks first: one block's graph for all six (on the CPU a 4-layer nvfp4 built in 31 s against
    # 121 s whole; train_step.md), with the allocator's stats and each mode's steps in a row too. The whole-model
    # nvfp4 build was still running after 224 s on 2026-11-28's lease: it gets only what is left, in the pair.
    step blocks_three 300 $PY bench/train_step.py $A --modes fp32:compiled fp32:blocks nvfp4:blocks mxfp8:blocks \
        > "$OUT/blocks_three.txt" 2>&1
    left=$((405 - (SECONDS - T0)))   # the pair in what is left (its compiles may hit inductor's cache)
    if [ $left -ge 90 ]; then
        step blocks_pair $left $PY bench/train_step.py $A --modes fp32:compiled nvfp4:compiled \
            > "$OUT/blocks_pair.txt" 2>&1
    else
        echo "=== blocks_pair: skipped, $left s left"
    fi
    kill $smi
    echo "=== total $((SECONDS - T0)) s"
    cat "$OUT/log.txt" "$OUT/blocks_three.txt" "$OUT/blocks_pair.txt" >&3 2>/dev/null
    exit 0
fi
if [ "${1:-}" = recheck ]; then   # the block recipes' CUDA cases, the FP8 GEMM bench, a short eager run
    step gemm_speedup 40 $PY bench/gemm_speedup.py --iters 30 && cp bench/results/gemm_speedup_* "$OUT"/
    step cuda_tests 80 $PY -m pytest -q -p no:cacheprovider -n 6 -k "cuda and (nvfp4 or mxfp4)" \
        tests/test_compile_grads.py > "$OUT/cuda_tests.txt" 2>&1 &
    tests=$!
    step h100_short 80 $PY -m altgrad_lib.cli train -f bench/gpu/h100_short.yaml --no-progress -p compile=false \
        -p max_steps=60 -p eval_interval=30 -p out_dir=/tmp/ag_out/runs > "$OUT/h100_short.txt" 2>&1
    wait $tests
    cp /tmp/ag_out/runs/*/metrics.csv "$OUT"/ 2>/dev/null
    echo "=== total $((SECONDS - T0)) s"
    exit 0
fi
if [ "${1:-}" = peers ]; then   # a second call: the FP8 peers and a 4-bit recipe against bf16, compiled
    step train_step_peers 280 $PY bench/train_step.py --device cuda --precision bf16 --n-layer 6 --n-head 8 \
        --n-embd 512 --block-size 512 --vocab 50304 --batch 32 --steps 10 --warmup 3 \
        --modes fp32:compiled torchao:compiled scaled_mm:compiled nvfp4:compiled mxfp8:compiled
    step h100_compiled 170 $PY -m altgrad_lib.cli train -f bench/gpu/h100_short.yaml --no-progress \
        -p out_dir=/tmp/ag_out/runs > "$OUT/h100_compiled.txt" 2>&1
    cp /tmp/ag_out/runs/*/metrics.csv "$OUT"/ 2>/dev/null
    echo "=== total $((SECONDS - T0)) s"
    exit 0
fi

# timed benches, one at a time (the GPU to itself)
step gemm_speedup 90 $PY bench/gemm_speedup.py --iters 30
step quantize 60 $PY bench/quantize.py --device cuda --n-log2 26 --reps 3
step train_step 170 $PY bench/train_step.py --device cuda --precision bf16 --n-layer 6 --n-head 8 --n-embd 512 \
    --block-size 512 --vocab 50304 --batch 32 --steps 10 --warmup 3 \
    --modes fp32:eager fp32:compiled sim:eager sim:compiled

# untimed checks side by side (their compiles are CPU work; 16 cores)
step cuda_tests 200 $PY -m pytest -q -p no:cacheprovider -n 6 -k cuda tests/test_compile_grads.py \
    tests/test_quantize_hw_fp8.py > "$OUT/cuda_tests.txt" 2>&1 &
tests=$!
step accum_crosscheck 150 $PY bench/gpu_accum_crosscheck.py > "$OUT/accum_crosscheck.txt" 2>&1 &
accum=$!
step h100_short 200 $PY -m altgrad_lib.cli train -f bench/gpu/h100_short.yaml --no-progress \
    -p out_dir=/tmp/ag_out/runs > "$OUT/h100_short.txt" 2>&1
wait $tests $accum
tail -3 "$OUT/cuda_tests.txt" "$OUT/accum_crosscheck.txt" "$OUT/h100_short.txt"
cp bench/results/gemm_speedup_* /tmp/ag_out/runs/*/metrics.csv "$OUT"/ 2>/dev/null
echo "=== total $((SECONDS - T0)) s"
