"""Perplexity of a small real mixture-of-experts model, dense and pruned (docs/moe.md, "Measured").

The model is SmolLM2-135M sparsely upcycled into a Mixtral: every decoder layer's MLP copied into each of
``--experts`` experts (gate and up stacked as transformers' fused ``gate_up_proj``), attention, norms and
embeddings as they are, and a random router (normal, std 0.02) choosing the top 2. Identical experts whose
router weights sum to 1 make the dense MoE compute exactly what SmolLM2 computes, so its perplexity is
SmolLM2's; pruning then treats each expert on its own routed tokens and the experts drift apart.

    python bench/moe_upcycle.py --out /tmp/smol-moe --methods magnitude,wanda,sparsegpt,ace
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from acetui_core.basics.paths import default_model
from acetui_core.modeling.data import wikitext2_test_ids
from acetui_core.modeling.layouts import decoder_layers
from acetui_core.modeling.models import load_model
from acetui_core.pruning import pipeline
from acetui_core.pruning.evaluate import perplexity, ppl
from acetui_core.run.config import RunConfig


def upcycle(out: Path, experts: int) -> None:
    from transformers import AutoModelForCausalLM, MixtralConfig

    dense = load_model(default_model(), device="cpu")
    source = dense.model.config
    config = MixtralConfig(
        vocab_size=source.vocab_size,
        hidden_size=source.hidden_size,
        intermediate_size=source.intermediate_size,
        num_hidden_layers=source.num_hidden_layers,
        num_attention_heads=source.num_attention_heads,
        num_key_value_heads=source.num_key_value_heads,
        head_dim=source.hidden_size // source.num_attention_heads,
        max_position_embeddings=source.max_position_embeddings,
        rms_norm_eps=source.rms_norm_eps,
        rope_parameters=source.rope_parameters,
        tie_word_embeddings=source.tie_word_embeddings,
        num_local_experts=experts,
        num_experts_per_tok=2,
        bos_token_id=source.bos_token_id,
        eos_token_id=source.eos_token_id,
    )
    torch.manual_seed(0)
    moe = AutoModelForCausalLM.from_config(config)
    moe.model.embed_tokens.weight.data.copy_(dense.model.model.embed_tokens.weight)
    moe.model.norm.weight.data.copy_(dense.model.model.norm.weight)
    moe.tie_weights()
    for mine, theirs in zip(decoder_layers(moe), decoder_layers(dense.model), strict=True):
        for name in ("q_proj", "k_proj", "v_proj", "o_proj"):
            getattr(mine.self_attn, name).weight.data.copy_(getattr(theirs.self_attn, name).weight)
        mine.input_layernorm.weight.data.copy_(theirs.input_layernorm.weight)
        mine.post_attention_layernorm.weight.data.copy_(theirs.post_attention_layernorm.weight)
        gate_up = torch.cat([theirs.mlp.gate_proj.weight, theirs.mlp.up_proj.weight])
        mine.mlp.experts.gate_up_proj.data.copy_(gate_up.expand(experts, *gate_up.shape))
        down = theirs.mlp.down_proj.weight
        mine.mlp.experts.down_proj.data.copy_(down.expand(experts, *down.shape))
        mine.mlp.gate.weight.data.normal_(0, 0.02)
    moe.save_pretrained(out)
    dense.tokenizer.save_pretrained(out)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, default=Path("/tmp/smol-moe"))
    parser.add_argument("--experts", type=int, default=4)
    parser.add_argument("--methods", default="magnitude,wanda,sparsegpt,ace")
    parser.add_argument("--sparsity", default="0.5")
    parser.add_argument("--nsamples", type=int, default=32)
    parser.add_argument("--seqlen", type=int, default=128)
    parser.add_argument("--eval-seqlen", type=int, default=512)
    parser.add_argument("--eval-limit", type=int, default=40)
    parser.add_argument("--json", type=Path, help="also write the rows here, for docs/moe.md to be read from")
    args = parser.parse_args()
    torch.set_num_threads(2)
    if not (args.out / "config.json").is_file():
        upcycle(args.out, args.experts)
    rows = []
    for name, source in (("SmolLM2-135M", default_model()), ("upcycled MoE", str(args.out))):
        loaded = load_model(source, device="cpu")
        losses, _ = perplexity(loaded.model, wikitext2_test_ids(loaded.tokenizer), args.eval_seqlen, args.eval_limit)
        rows.append((name, "dense", "-", ppl(losses), 0.0, None))
    loaded = load_model(str(args.out), device="cpu")
    loaded.snapshot()
    for method in args.methods.split(","):
        for calibration in ("routed", "all") if method != "magnitude" else ("routed",):
            loaded.reset()
            config = RunConfig(
                model=str(args.out), method=method, sparsity=args.sparsity, calib="c4", nsamples=args.nsamples,
                seqlen=args.seqlen, eval_seqlen=args.eval_seqlen, eval_limit=args.eval_limit, device="cpu",
                moe_calibration=calibration,
            )  # fmt: skip
            started = time.perf_counter()
            result = pipeline.run(config, loaded=loaded)
            seconds = time.perf_counter() - started
            label = calibration if method != "magnitude" else "-"
            rows.append(("upcycled MoE", method, label, result.ppl_wikitext2, result.overall_sparsity, seconds))
            print(rows[-1], flush=True)
            if args.json:  # after every row: a run cut short keeps what it measured
                keys = ("model", "method", "calibration", "ppl_wikitext2", "overall_sparsity", "seconds")
                rows_json = [dict(zip(keys, row, strict=True)) for row in rows]
                args.json.write_text(json.dumps({"args": vars(args), "rows": rows_json}, default=str, indent=1))
    print("| model | method | expert calibration | WikiText-2 ppl | sparsity |")
    print("| --- | --- | --- | --- | --- |")
    for model, method, calibration, value, sparsity, _ in rows:
        print(f"| {model} | {method} | {calibration} | {value:.2f} | {sparsity:.3f} |")


if __name__ == "__main__":
    main()
