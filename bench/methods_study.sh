#!/usr/bin/env bash
# The methods study of issue #24 (docs/methods.md, "Measured on SmolLM2-135M"): Wanda, RIA and CosP+VarP
# (ACE) at each sparsity, alone, with RIA's channel permutation (--permute lsa, N:M only), with DSnoT
# (--refine dsnot) and with both, on SmolLM2-135M; every run evaluated on the same WikiText-2 windows so
# the paired verdicts apply. Then the table, the verdicts per metric and the cost summary.
#
#   ACETUI_DATA_DIR=/path/to/data bench/methods_study.sh [runs|report|all]
#
# STORE (bench-out/methods.db), OUT (bench-out), ACETUI (acetui on PATH), SPARSITIES (2:4 4:8 0.5), SEQLEN
# (16) and NSAMPLES (128), SEEDS (0,1,2) and METHODS (wanda,ria,ace) can be set in the environment. One
# `acetui compare` per sparsity and variant, all seeds of it, so a study cut short leaves whole cells.
set -euo pipefail

ACETUI=${ACETUI:-acetui}
OUT=${OUT:-bench-out}
STORE=${STORE:-$OUT/methods.db}
SPARSITIES=${SPARSITIES:-2:4 4:8 0.5}
SEQLEN=${SEQLEN:-16}
NSAMPLES=${NSAMPLES:-128}
SEEDS=${SEEDS:-0,1,2}
METHODS=${METHODS:-wanda,ria,ace}
COMMON=(--methods "$METHODS" --seqlen "$SEQLEN" --nsamples "$NSAMPLES" --seeds "$SEEDS" --eval-seqlen 512
    --eval-limit 16 --store "$STORE")
mkdir -p "$OUT"

runs() {
    for sparsity in $SPARSITIES; do
        variants=("" "--refine dsnot")
        if [[ $sparsity == *:* ]]; then # the permutation is defined for N:M patterns only
            variants+=("--permute lsa" "--permute lsa --refine dsnot")
        fi
        for variant in "${variants[@]}"; do
            # shellcheck disable=SC2086  # a variant is zero, one or two options
            "$ACETUI" compare "${COMMON[@]}" --sparsity "$sparsity" $variant
        done
    done
}

report() {
    "$ACETUI" export --format markdown --ci pm --cells ppl-time --store "$STORE" -o "$OUT/methods.md"
    for method in ${METHODS//,/ }; do
        "$ACETUI" verdict --method "$method" --store "$STORE"
    done
    python "$(dirname "$0")/methods_summary.py" "$STORE"
}

case "${1:-all}" in
runs) runs ;;
report) report ;;
all) runs && report ;;
*) echo "usage: $0 [runs|report|all]" >&2 && exit 2 ;;
esac
