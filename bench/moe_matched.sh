#!/usr/bin/env bash
# Whole experts removed (REAP, frequency) against sparsity inside the experts (Wanda, ACE) at matched
# parameters, on the SmolLM2 MoE of bench/moe_upcycle.py (docs/moe.md, "Measured"): one acetui prune per
# run into one store, niced (the cores are shared), then `acetui verdict` and `acetui figure experts`.
#
#   python -c "import sys; sys.path[:0] = ['bench']; from pathlib import Path; from moe_upcycle import upcycle; upcycle(Path('/tmp/smol-moe'), 4)"
#   bench/moe_matched.sh /tmp/smol-moe /tmp/matched.db "0 1 2" "0.5 0.25"
set -euo pipefail
model=${1:?the upcycled model folder} store=${2:?the run store} seeds=${3:-0 1 2} fractions=${4:-0.5}
common=(--nsamples 4 --seqlen 128 --eval-seqlen 256 --eval-limit 8 --device cpu --store "$store")
for fraction in $fractions; do
  for seed in $seeds; do
    nice -n 10 acetui prune "$model" "${common[@]}" -m wanda -s 0 --expert-sparsity "$fraction" --expert-score reap --seed "$seed"
    nice -n 10 acetui prune "$model" "${common[@]}" -m wanda -s "$fraction" --sparsity-scope experts --seed "$seed"
    nice -n 10 acetui prune "$model" "${common[@]}" -m wanda -s 0 --expert-sparsity "$fraction" --expert-score frequency --seed "$seed"
    nice -n 10 acetui prune "$model" "${common[@]}" -m ace -s "$fraction" --sparsity-scope experts --seed "$seed"
  done
done
acetui verdict --store "$store"
acetui figure experts -o "${store%.db}-experts.tex" --store "$store" --overwrite
