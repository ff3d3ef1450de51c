#!/usr/bin/env bash
# The GPU measurements of issue 35 in one run of at most 9 minutes, what is still open first: the LLaMA-2-70B
# shape's peak GPU memory on one layer (with the peak of each phase), then the paper's table (wanda, ria, ace
# at 0.5 and 2:4, seeds 0-2, with WikiText-2 perplexity) on the LLaMA-7B shape in one process, as
# `acetui compare` runs it; then the GPU tests, and with the time left, the fused statistics kernel against
# the eager sums and the 7B shape whole (32 layers) for ace-16 and wanda-FL (both measured on 2026-11-27).
# Everything goes to $OUT as it is made, so a timeout keeps what finished.
#
#   bash bench/gpu_session.sh                      # on the GPU machine, from the repository's root
#   ACETUI_GPU_DRY=1 OUT=/tmp/out bash bench/gpu_session.sh   # the same steps on a CPU with a tiny shape
#
# Needs, beside the checkout: .whl/ (the wheels of packages the machine lacks: pydantic and its needs,
# platformdirs) and .gpudata/ (data/: the C4 sample and WikiText-2 test split in shared/data's layout;
# tokenizer/: the bundled SmolLM2 tokenizer, saved), both git-ignored and carried.
set -u -o pipefail
OUT=${OUT:-/tmp/acetui-gpu-session}
mkdir -p "$OUT"
BUDGET=${ACETUI_GPU_BUDGET:-550}  # seconds of wall time for the whole script
began=$SECONDS
log() { echo "[$((SECONDS - began)) s] $*" | tee -a "$OUT/session.log"; }
left() { echo $((BUDGET - (SECONDS - began))); }

if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
        2>&1 | tee -a "$OUT/session.log"
fi
mkdir -p /tmp/site
ln -sfn "$PWD/themes" /tmp/site/acetui_themes  # what pip install -e would map, without fetching anything
export PYTHONPATH=/tmp/site:$PWD:$PWD/core${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
export ACETUI_DATA_DIR=$PWD/.gpudata/data ACETUI_TEST_TOKENIZER=$PWD/.gpudata/tokenizer
export HOME=${ACETUI_GPU_HOME:-/tmp/acetui-home}  # acetui's store and cache, away from the machine's own
mkdir -p "$HOME"
CKPT=/tmp/acetui-scale  # the 7B checkpoint, written once and reused by the grid
if [ "${ACETUI_GPU_DRY:-0}" = 1 ]; then
    DEVICE=cpu BIG=tiny HUGE=tiny LAYERS70="--layers 2" GRID_LIMIT="--eval-limit 2 --eval-seqlen 128"
else
    DEVICE=cuda BIG=llama-7b HUGE=llama-2-70b LAYERS70="--layers 1" GRID_LIMIT=""
fi
TOK="--tokenizer $PWD/.gpudata/tokenizer"

log "start; budget $BUDGET s; device $DEVICE"
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv 2>&1 || true
  python3 -c "import sys, torch, transformers, accelerate; print(sys.version.split()[0], torch.__version__, transformers.__version__, accelerate.__version__, torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no cuda')"
  git log -1 --format='%h %s' 2>/dev/null || true; nproc; free -g | head -2; df -h /tmp | tail -1
} 2>&1 | tee "$OUT/machine.txt"

log "1. $HUGE, one layer: wanda-16 and ace-16 peak GPU memory, by phase"
timeout 100 python3 bench/scale.py --shape $HUGE $LAYERS70 --methods wanda-16,ace-16 --device $DEVICE \
    --no-floor $TOK 2>&1 | tee "$OUT/scale_70b.log"
log "scale 70b exit ${PIPESTATUS[0]}"

log "2. the paper's table on $BIG: seeds 0, 1, 2 in one process (the checkpoint written first, not timed)"
timeout $(($(left) - 50)) python3 bench/scale.py --shape $BIG --grid --seeds 0,1,2 --device $DEVICE --dir $CKPT --keep \
    $GRID_LIMIT $TOK 2>&1 | tee "$OUT/grid.log"
log "grid exit ${PIPESTATUS[0]}"

log "3. pytest -m gpu tests/test_gpu.py"
timeout $(($(left) - 5)) python3 -m pytest -q -m gpu -n 0 -p no:cacheprovider tests/test_gpu.py 2>&1 | tee "$OUT/pytest_gpu.log"
log "pytest exit ${PIPESTATUS[0]}"

if [ "$(left)" -gt 90 ]; then
    if [ "$DEVICE" = cuda ]; then
        log "4. the statistics' column sums, eager and fused"
        timeout 60 python3 bench/column_sums.py 2>&1 | tee "$OUT/column_sums.log"
    fi
    log "5. $BIG, every layer: ace-16 and wanda-FL"
    timeout $(($(left) - 5)) python3 bench/scale.py --shape $BIG --methods ace-16,wanda-FL --device $DEVICE --no-floor \
        --dir $CKPT --keep $TOK 2>&1 | tee "$OUT/scale_7b.log"
    log "scale 7b exit ${PIPESTATUS[0]}"
fi
log "done"
