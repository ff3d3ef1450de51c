"""Run by test_streaming in a fresh process: prune MODEL with --offload disk into OUT and print, as one JSON
line, the interpreter's baseline RSS, the run's peak RSS, what ``acetui plan`` predicted, and the row
sparsities of the saved checkpoint (none without --save). SETTINGS (JSON) replaces RunConfig fields, e.g.
to load the model whole and evaluate it.

    python tests/stream_memory.py MODEL OUT [SETTINGS]
"""

from __future__ import annotations

import json
import sys

import psutil
import torch
from transformers import AutoTokenizer

from acetui_core.basics.resources import peak_rss_mb
from acetui_core.modeling.data import tokenized_calibration
from acetui_core.pruning import pipeline
from acetui_core.pruning.plan import plan_run
from acetui_core.run.config import RunConfig

model, out = sys.argv[1:3]
torch.set_num_threads(2)
settings = dict(
    model=model,
    method="wanda",
    sparsity="0.5",
    nsamples=16,
    seqlen=16,
    evals=[],
    device="cpu",
    offload="disk",
    save=out,
)
config = RunConfig(**{**settings, **json.loads(sys.argv[3] if len(sys.argv) > 3 else "{}")})
# The calibration corpus is tokenized (and cached) before the baseline is taken: its lists of token ids
# are the same whatever the model's size, and lazy tokenization is another change's business.
tokenized_calibration(AutoTokenizer.from_pretrained(model), config.calib)
planned = plan_run(config)  # measures this process's RSS as its baseline, as the run will start from it
baseline = psutil.Process().memory_info().rss
result = pipeline.run(config)
peak = peak_rss_mb() * 2**20  # not ru_maxrss: that keeps the pytest parent's high-water mark

from transformers import AutoModelForCausalLM  # noqa: E402

from acetui_core.modeling.layouts import decoder_layers, prunable_linears  # noqa: E402

rows = set()
if config.save:
    pruned = AutoModelForCausalLM.from_pretrained(out, dtype=torch.bfloat16)
    for layer in decoder_layers(pruned):
        for module in prunable_linears(layer).values():
            rows.update(((module.weight == 0).sum(dim=1) / module.weight.shape[1]).unique().tolist())
print(
    json.dumps(
        {
            "baseline_rss": baseline,
            "peak_rss": peak,
            "planned_cpu": planned.peak_cpu_bytes,
            "planned_calibration": planned.calibration_bytes,
            "weights": planned.parameters * getattr(torch, result.dtype).itemsize,
            "reported_rss": result.peak_rss_mb * 2**20,
            "row_sparsities": sorted(rows),
        }
    )
)
