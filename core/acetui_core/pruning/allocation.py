"""Per-layer sparsity allocation: uniform (the target in every decoder layer) or OWL's (Yin et al.,
2024, "Outlier Weighed Layerwise sparsity"): layers with more outlier scores keep more weights.

OWL's definitions, computed with the chosen metric's scores:

- a decoder layer's outlier ratio ``r_l`` is the share of its scores (every linear of the layer
  together) above ``M`` times the layer's mean score;
- ``x_l = 2 lambda (r_l - min r) / (max r - min r)`` spreads the ratios over ``[0, 2 lambda]``;
- the layer's sparsity is ``s_l = s - (x_l - mean_w x)``, where ``mean_w`` weighs each layer by its
  number of masked parameters, so the parameter-weighted mean of ``s_l`` is the target ``s`` exactly
  (OWL's code takes the plain mean, the same thing when all layers are equal in size). With
  ``--sparsity-scope experts`` the scores, ratios and sizes are the routed experts' alone, and a layer
  without them takes no part, so the experts are pruned to ``s`` as without OWL.

``owl_allocation`` runs OWL's statistics pass over the dense model for the layer loop.
"""

from __future__ import annotations

import torch

from acetui_core.basics.choices import StageName
from acetui_core.basics.errors import UserError, check_stop
from acetui_core.modeling.layouts import masked_linears, weight_matrix
from acetui_core.modeling.placement import advance, layer_feed, module_device
from acetui_core.pruning.layerstats import LayerWork, dense_weight, layer_stats, method_scores
from acetui_core.run.events import Stage
from acetui_core.run.records import LayerAllocation


def outlier_ratio(scores: list[torch.Tensor], m: float) -> float:
    """The share of the scores (all tensors together) above ``m`` times their mean."""
    count = sum(s.numel() for s in scores)
    mean = sum(s.double().sum().item() for s in scores) / count
    return sum((s > m * mean).sum().item() for s in scores) / count


def owl_sparsities(ratios: list[float], sizes: list[int], target: float, lam: float) -> list[float]:
    """Each layer's sparsity from its outlier ratio (module docstring); equal ratios give ``target``
    everywhere. A spread that leaves (0, 1) is refused."""
    w = torch.tensor(sizes, dtype=torch.float64)
    masked = w > 0  # a layer the mask does not cover (no routed experts, --sparsity-scope experts) has no ratio
    r = torch.tensor(ratios, dtype=torch.float64).where(masked, 0.0)
    low, high = r[masked].min(), r[masked].max()
    if high == low:
        return [target] * len(ratios)
    x = (2 * lam * (r - low) / (high - low)).where(masked, 0.0)
    s = target - (x - (x * w).sum() / w.sum())
    if s[masked].min() <= 0 or s[masked].max() >= 1:
        raise UserError(
            f"OWL with --owl-lambda {lam:g} at sparsity {target:g} would give a layer sparsity of "
            f"{s[masked].min().item():.3f} to {s[masked].max().item():.3f}; choose a smaller lambda."
        )
    return s.tolist()


@torch.no_grad()
def owl_allocation(loaded, layers, inputs, config, method, sparsity, emit, cancel=None) -> list[LayerAllocation]:
    """OWL's statistics pass (as OWL's code does it): every decoder layer, dense, on the outputs of the
    dense layers before it, scored with the chosen metric; then each layer's sparsity from its outlier
    ratio (``acetui_core.pruning.allocation``). Costs one more pass of statistics and forwards than pruning."""
    ratios = []
    inputs = [(hidden.clone(), kwargs) for hidden, kwargs in inputs]  # advanced here; pruning starts from layer 0's
    feed = layer_feed(loaded)  # layers reach the compute device as in the pruning loop (streamed, or to a GPU)
    try:
        for index, layer in enumerate(layers):
            check_stop(
                cancel, f"during OWL's statistics pass (layer {index} of {len(layers)}), before any layer was pruned"
            )
            emit(Stage(StageName.OUTLIER_RATIOS, index, len(layers)))
            device = module_device(layer) if feed is None else loaded.device
            if feed is not None:
                feed.enter(index)
            linears = masked_linears(layer, config.sparsity_scope)  # the mask's share is the target's
            if linears:
                stats = layer_stats(LayerWork(index, layer, inputs, loaded, config, method, device), linears)
                scores = [
                    method_scores(method, dense_weight(index, n, m), stats.get(n), config, f"layer {index} {n}")
                    for n, m in linears.items()
                ]
                ratios.append(outlier_ratio(scores, config.owl_m))
                del scores
            else:
                ratios.append(float("nan"))  # nothing masked here (owl_sparsities leaves it out)
            advance(layer, inputs, device)
            if feed is not None:
                feed.leave(index)
    finally:
        if feed is not None:
            feed.close()
    emit(Stage(StageName.OUTLIER_RATIOS, len(layers), len(layers)))
    sizes = [
        sum(weight_matrix(m).numel() for m in masked_linears(layer, config.sparsity_scope).values()) for layer in layers
    ]
    allocated = owl_sparsities(ratios, sizes, sparsity.ratio, config.owl_lambda)
    return [LayerAllocation(i, r, s) for i, (r, s) in enumerate(zip(ratios, allocated, strict=True))]
