#!/usr/bin/env bash
# The matched-compute study of issue #20 (docs/evidence.md, "Matched compute"): Wanda, RIA,
# CosP+VarP (ACE) and SparseGPT at 50% on SmolLM2-135M, calibrated on C4 windows of 16, 128 and 2048
# tokens with the same number of calibration tokens at every length (128 x 16 = 16 x 128 = 1 x 2048 =
# 2048, the paper's ACE-16 budget), three seeds each, every run evaluated on the same WikiText-2 windows
# so the paired verdicts apply. Then the table with intervals and verdicts, and the pgfplots figures.
#
#   ACETUI_DATA_DIR=/work/shared/data bench/matched_compute.sh [runs16|runs128|runs2048|report|all]
#
# STORE (bench-out/matched_compute.db), OUT (bench-out), ACETUI (acetui on PATH), SEEDS (0 1 2), METHODS and the
# windows per length (SAMPLES_16=128, SAMPLES_128=16, SAMPLES_2048=1; the paper takes 128 at every length,
# 262,144 tokens at 2048, hours per run on a 2-core CPU) can be set in the environment. Each stage runs
# one seed at a time over all four methods, so a stage cut short still leaves every method with the seeds
# that finished; stages of different seeds (SEEDS=1 ... runs16) may run side by side on one store.
set -euo pipefail

ACETUI=${ACETUI:-acetui}
OUT=${OUT:-bench-out}
STORE=${STORE:-$OUT/matched_compute.db}
SAMPLES_16=${SAMPLES_16:-128}
SAMPLES_128=${SAMPLES_128:-16}
SAMPLES_2048=${SAMPLES_2048:-1}
SEEDS=${SEEDS:-0 1 2}
METHODS=${METHODS:-wanda,ria,ace,sparsegpt}
COMMON=(--methods "$METHODS" --sparsity 0.5 --eval-seqlen 512 --eval-limit 16 --store "$STORE")
mkdir -p "$OUT"

calibrate() { # seqlen nsamples: every method at that calibration length, one seed after the other
    for seed in $SEEDS; do
        "$ACETUI" compare "${COMMON[@]}" --seqlen "$1" --nsamples "$2" --seeds "$seed"
    done
}

report() {
    "$ACETUI" verdict --store "$STORE"
    "$ACETUI" export --format markdown --ci interval --cells ppl-time --store "$STORE" -o "$OUT/matched_compute.md"
    "$ACETUI" export --format csv --store "$STORE" -o "$OUT/matched_compute.csv"
    "$ACETUI" figure pareto --x tokens --store "$STORE" -o "$OUT/matched_compute_pareto.tex"
    "$ACETUI" figure seqlen --store "$STORE" -o "$OUT/matched_compute_seqlen.tex"
}

case "${1:-all}" in
runs16) calibrate 16 "$SAMPLES_16" ;;
runs128) calibrate 128 "$SAMPLES_128" ;;
runs2048) calibrate 2048 "$SAMPLES_2048" ;;
report) report ;;
all) calibrate 16 "$SAMPLES_16" && calibrate 128 "$SAMPLES_128" && calibrate 2048 "$SAMPLES_2048" && report ;;
*) echo "usage: $0 [runs16|runs128|runs2048|report|all]" >&2 && exit 2 ;;
esac
