"""A run's work from check to evaluation: the checks, the plan, the layer loop and a layer's statistics, expert removal, OWL, DSnoT, fidelity, perplexity and zero-shot accuracy, the whole run."""
