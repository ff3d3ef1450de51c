#!/usr/bin/env bash
# What bench/gpu_session.sh needs beside the checkout, made on this (networked) machine before a GPU session:
# .whl/ (wheels the lent machine lacks, for its Python 3.12: pydantic and its needs, platformdirs, at the
# versions of constraints.txt) and .gpudata/ (the C4 sample and WikiText-2 in shared/data's layout, and the
# bundled SmolLM2 tokenizer saved as files). Both are git-ignored; pass them to the device tool's `carry`.
#
#   ACETUI_DATA_DIR=../shared/data bash bench/gpu_prepare.sh
set -euo pipefail
cd "$(dirname "$0")/.."
data=${ACETUI_DATA_DIR:?set ACETUI_DATA_DIR to the shared data folder}

rm -rf .whl .gpudata
pins=$(grep -iE '^(pydantic|pydantic_core|annotated-types|typing-inspection|platformdirs)==' constraints.txt)
# shellcheck disable=SC2086  # one argument per pin
.venv/bin/pip download -q --no-deps --only-binary=:all: --python-version 3.12 --platform manylinux2014_x86_64 \
    --implementation cp -d .whl $pins

mkdir -p .gpudata/data
cp -r "$data/c4" "$data/wikitext-2-raw" .gpudata/data/
chmod -R u+w .gpudata
.venv/bin/python - <<'EOF'
from transformers import AutoTokenizer

from acetui_core.basics.paths import bundled_model

gguf = bundled_model()
AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name).save_pretrained(".gpudata/tokenizer")
EOF
du -sh .whl .gpudata
