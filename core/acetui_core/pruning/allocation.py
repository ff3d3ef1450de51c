"""Per-layer sparsity allocation: uniform (the target in every decoder layer) or OWL's (Yin et al.,
2024, "Outlier Weighed Layerwise sparsity"): layers with more outlier scores keep more weights.

OWL's definitions, computed with the chosen metric's scores:

- a decoder layer's outlier ratio ``r_l`` is the share of its scores (every linear of the layer
  together) above ``M`` times the layer's mean score;
- ``x_l = 2 lambda (r_l - min r) / (max r - min r)`` spreads the ratios over ``[0, 2 lambda]``;
- the layer's sparsity is ``s_l = s - (x_l - mean x)``, with OWL's code's plain mean over the layers
  (``prune_wanda_outlier``: ``all_layer_ratio - np.mean(all_layer_ratio) + (1 - sparsity_ratio)`` is
  the layer's share kept); ``--owl-mean weighted`` weighs each layer by its number of masked parameters
  instead, so the parameter-weighted mean of ``s_l`` is the target ``s`` exactly. The two agree when
  every layer the mask covers is equal in size (``layer_sizes``); they differ for a model whose layers
  differ, such as a MoE model with dense layers first;
- a layer whose sparsity comes out at 0 or below is pruned at 0.01, as OWL's code does; one at 1 or
  above is refused (OWL's code would prune every weight of the layer).

With ``--sparsity-scope experts`` the scores, ratios and sizes are the routed experts' alone, and a
layer without them takes no part.

``owl_allocation`` runs OWL's statistics pass over the dense model for the layer loop.
"""

from __future__ import annotations

import torch

from acetui_core.basics.choices import OwlMean, StageName
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


OWL_FLOOR = 0.01  # OWL's code prunes a layer whose sparsity comes out at 0 or below at this


def owl_sparsities(
    ratios: list[float], sizes: list[int], target: float, lam: float, mean: str = OwlMean.PLAIN
) -> list[float]:
    """Each layer's sparsity from its outlier ratio (module docstring); equal ratios give ``target``
    everywhere. A layer of size 0 (nothing masked) takes no part."""
    w = torch.tensor(sizes, dtype=torch.float64)
    masked = w > 0  # a layer the mask does not cover (no routed experts, --sparsity-scope experts) has no ratio
    r = torch.tensor(ratios, dtype=torch.float64).where(masked, 0.0)
    low, high = r[masked].min(), r[masked].max()
    if high == low:
        return [target] * len(ratios)
    x = (2 * lam * (r - low) / (high - low)).where(masked, 0.0)
    weights = w if mean == OwlMean.WEIGHTED else masked.double()
    s = target - (x - (x * weights).sum() / weights.sum())
    if s[masked].max() >= 1:
        raise UserError(
            f"OWL with --owl-lambda {lam:g} at sparsity {target:g} would give a layer a sparsity of "
            f"{s[masked].max().item():.3f}, pruning all of it; choose a smaller lambda."
        )
    return s.where(s > 0, OWL_FLOOR).tolist()


def highest_owl_sparsity(sizes: list[int], target: float, lam: float, mean: str = OwlMean.PLAIN) -> float:
    """The highest sparsity OWL can give a layer whatever the outlier ratios: the layer with the lowest ratio
    (``x = 0``) when every other has the highest (``x = 2 lambda``), ``target + 2 lambda (1 - w / W)`` with
    ``w`` its weight in the mean (1 each for the plain mean, its size for the weighted one) and ``W`` all of
    theirs; the smallest ``w`` gives the highest."""
    if len(sizes) < 2:
        return target  # one layer: OWL has no other to compare it with
    weights = sizes if mean == OwlMean.WEIGHTED else [1] * len(sizes)
    return target + 2 * lam * (1 - min(weights) / sum(weights))


def layer_sizes(layers, scope: str) -> list[int]:
    """Each decoder layer's weights that the mask covers (``--sparsity-scope``); 0 where it covers none."""
    return [sum(weight_matrix(m).numel() for m in masked_linears(layer, scope).values()) for layer in layers]


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
    sizes = layer_sizes(layers, config.sparsity_scope)
    allocated = owl_sparsities(ratios, sizes, sparsity.ratio, config.owl_lambda, config.owl_mean)
    return [LayerAllocation(i, r, s) for i, (r, s) in enumerate(zip(ratios, allocated, strict=True))]
