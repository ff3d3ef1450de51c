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
    # DeepSeek-V3's routed experts behind a dense first layer, which GLM-4-MoE shares
    dense_first = dict(
        intermediate_size=128,
        moe_intermediate_size=32,
        n_routed_experts=8,
        num_experts_per_tok=2,
        n_shared_experts=1,
        first_k_dense_replace=1,
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
            **dense_first,
            n_group=2,
            topk_group=1,
            q_lora_rank=32,
            kv_lora_rank=16,
            qk_rope_head_dim=8,
            qk_nope_head_dim=8,
            v_head_dim=16,
            rope_scaling=None,
        ),
        "glm4_moe": lambda: transformers.Glm4MoeConfig(**common, **dense_first, head_dim=16),
        "gpt_oss": lambda: transformers.GptOssConfig(
            **common, intermediate_size=32, num_local_experts=4, num_experts_per_tok=2, head_dim=16
        ),
        "ernie4_5_moe": lambda: transformers.Ernie4_5_MoeConfig(  # a correction bias of shape [1, experts]
            **common,
            intermediate_size=128,
            moe_intermediate_size=32,
            moe_num_experts=8,
            moe_k=2,
            moe_layer_start_index=0,
        ),
        # Families built the same way, tested for expert removal (test_expert_removal.py)
        "olmoe": lambda: transformers.OlmoeConfig(**common, intermediate_size=32, num_experts=8, num_experts_per_tok=2),
        "phimoe": lambda: transformers.PhimoeConfig(
            **common, intermediate_size=32, num_local_experts=4, num_experts_per_tok=2
        ),
        "granitemoe": lambda: transformers.GraniteMoeConfig(
            **common, intermediate_size=32, num_local_experts=4, num_experts_per_tok=2
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


def split_experts(model) -> None:
    """Rebuild every fused Mixtral experts module as one module per expert with ``w1`` (gate), ``w3`` (up)
    and ``w2`` (down) linears, the layout of transformers 4 and of remote-code MoE models, computing the
    same function from the same weights."""
    import torch
    from torch import nn

    class ExpertMLP(nn.Module):
        def __init__(self, gate_up: torch.Tensor, down: torch.Tensor, act):
            super().__init__()
            gate, up = gate_up.chunk(2, dim=0)
            self.w1, self.w3 = nn.Linear(*gate.shape[::-1], bias=False), nn.Linear(*up.shape[::-1], bias=False)
            self.w2 = nn.Linear(*down.shape[::-1], bias=False)
            for linear, weight in ((self.w1, gate), (self.w3, up), (self.w2, down)):
                linear.weight.data = weight.detach().clone()
            self.act = act

        def forward(self, x):
            return self.w2(self.act(self.w1(x)) * self.w3(x))

    class PerExpertExperts(nn.ModuleList):
        """Called by the block like the fused module; each expert sees only its routed tokens."""

        def forward(self, hidden, top_k_index, top_k_weights):
            out = torch.zeros_like(hidden)
            for e, expert in enumerate(self):
                rows, slot = (top_k_index == e).nonzero(as_tuple=True)
                if rows.numel():
                    out.index_add_(0, rows, expert(hidden[rows]) * top_k_weights[rows, slot, None])
            return out

    for layer in model.model.layers:
        fused = layer.mlp.experts
        layer.mlp.experts = PerExpertExperts(
            ExpertMLP(fused.gate_up_proj[e], fused.down_proj[e], fused.act_fn)
            for e in range(fused.gate_up_proj.shape[0])
        )
