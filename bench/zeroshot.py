"""Zero-shot accuracy of a model dense and pruned, as a Markdown table (the README's benchmark).

    ACETUI_DATA_DIR=../shared/data .venv/bin/python bench/zeroshot.py --limit 100

Defaults: the bundled SmolLM2-135M, dense against Wanda-16 and CosP+VarP-16 (ACE) at 2:4, the
paper's seven tasks, lm-evaluation-harness through ``acetui_core.pruning.zeroshot``. The model is loaded once and
reset to its dense weights before each pruning run.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run from a checkout without installing

from acetui_core.basics.paths import default_model
from acetui_core.modeling.models import load_model
from acetui_core.pruning import pipeline
from acetui_core.pruning.zeroshot import evaluate_zeroshot, validate_tasks
from acetui_core.run.basic_settings import ZEROSHOT_TASKS
from acetui_core.run.config import RunConfig
from acetui_core.run.records import mean_accuracy

SHORT = {
    "arc_easy": "arc_e",
    "arc_challenge": "arc_c",
    "openbookqa": "obqa",
    "winogrande": "wino",
    "hellaswag": "hswag",
}


def markdown(rows: list[tuple[str, dict]], tasks: list[str]) -> str:
    """One row per model variant: acc per task and their mean (the paper's summary), in percent."""
    header = ["model", *(SHORT.get(t, t) for t in tasks), "mean"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for name, zeroshot in rows:
        cells = [f"{100 * zeroshot[t].acc:.1f}" for t in tasks] + [f"{100 * mean_accuracy(zeroshot):.1f}"]
        lines.append("| " + " | ".join([name, *cells]) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=None, help="model to load (default: the bundled SmolLM2-135M GGUF)")
    parser.add_argument("--methods", default="wanda,ace", help="pruning methods, comma-separated")
    parser.add_argument("--sparsity", default="2:4")
    parser.add_argument("--seqlen", default="16", help="calibration window length, or 'full'")
    parser.add_argument("--tasks", default=",".join(ZEROSHOT_TASKS))
    parser.add_argument("--limit", type=int, default=None, help="examples per task (the first N)")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--device", default="auto")
    args = parser.parse_args()

    tasks = validate_tasks(args.tasks, args.limit)
    model = args.model or default_model()
    loaded = load_model(model, device=args.device)
    loaded.snapshot()
    seqlen = args.seqlen if args.seqlen == "full" else int(args.seqlen)

    started = time.perf_counter()
    rows = [
        (
            "Dense",
            evaluate_zeroshot(loaded.model, loaded.tokenizer, tasks, limit=args.limit, batch_size=args.batch_size),
        )
    ]
    print(f"dense done in {time.perf_counter() - started:.0f}s", file=sys.stderr)
    for method in args.methods.split(","):
        loaded.reset()
        config = RunConfig(
            model=model,
            method=method,
            sparsity=args.sparsity,
            seqlen=seqlen,
            evals=["zeroshot"],
            tasks=tasks,
            zeroshot_limit=args.limit,
            batch_size=args.batch_size,
            device=args.device,
        )
        result = pipeline.run(config, loaded=loaded)
        rows.append((f"{config.label} ({args.sparsity})", result.zeroshot))
        print(f"{config.label} done in {time.perf_counter() - started:.0f}s", file=sys.stderr)

    first = rows[0][1]
    scope = f"first {args.limit} examples per task" if args.limit else "full splits"
    print(
        f"Zero-shot acc (%) of {Path(model).name}, lm-evaluation-harness, {scope}; "
        f"sources: {', '.join(sorted({'hub' if e.source == 'hub' else 'local' for e in first.values()}))}; "
        f"{time.perf_counter() - started:.0f}s on {loaded.device}.\n"
    )
    print(markdown(rows, tasks))
    for task, entry in first.items():
        if entry.note:
            print(f"\nNote ({task}): {entry.note}.")


if __name__ == "__main__":
    main()
