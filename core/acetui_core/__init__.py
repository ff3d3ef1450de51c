"""The acetui pruning engine: scores, masks, the layer-by-layer pipeline, evaluation and the run store.

Nothing here imports the user interface (textual, typer, acetui); the faces import this.
"""

__version__ = "0.1.0"
