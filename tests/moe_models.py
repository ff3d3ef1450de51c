"""Tiny random mixture-of-experts (and GPT-NeoX) configurations from transformers' own config classes:
2 decoder layers, 4-8 experts."""

from __future__ import annotations

FAMILIES = ("mixtral", "qwen2_moe", "qwen3_moe", "deepseek_v3", "gpt_oss")


def moe_config(family: str, vocab_size: int, **overrides):
    import transformers

    common = dict(
        vocab_size=vocab_size,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=256,
    )
    made = {
        "mixtral": lambda: transformers.MixtralConfig(
            **common, intermediate_size=64, num_local_experts=4, num_experts_per_tok=2
        ),
        "qwen2_moe": lambda: transformers.Qwen2MoeConfig(
            **common,
            intermediate_size=128,
            moe_intermediate_size=32,
            shared_expert_intermediate_size=64,
            num_experts=8,
            num_experts_per_tok=2,
        ),
        "qwen3_moe": lambda: transformers.Qwen3MoeConfig(
            **common, intermediate_size=128, moe_intermediate_size=32, num_experts=8, num_experts_per_tok=2, head_dim=16
        ),
        "deepseek_v3": lambda: transformers.DeepseekV3Config(
            **common,
            intermediate_size=128,
            moe_intermediate_size=32,
            n_routed_experts=8,
            num_experts_per_tok=2,
            n_shared_experts=1,
            first_k_dense_replace=1,
            n_group=2,
            topk_group=1,
            q_lora_rank=32,
            kv_lora_rank=16,
            qk_rope_head_dim=8,
            qk_nope_head_dim=8,
            v_head_dim=16,
            rope_scaling=None,
        ),
        "gpt_oss": lambda: transformers.GptOssConfig(
            **common, intermediate_size=32, num_local_experts=4, num_experts_per_tok=2, head_dim=16
        ),
        "gpt_neox": lambda: transformers.GPTNeoXConfig(
            vocab_size=vocab_size,
            hidden_size=64,
            num_hidden_layers=2,
            num_attention_heads=4,
            intermediate_size=128,
            max_position_embeddings=256,
        ),
    }
    config = made[family]()
    for key, value in overrides.items():
        setattr(config, key, value)
    return config
