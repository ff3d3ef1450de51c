"""Scores and masks: the metrics and their registry, plug-ins, SparseGPT, the target sparsity, masks, the channel permutation, kept masks."""
