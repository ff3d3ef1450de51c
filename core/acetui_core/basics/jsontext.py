"""JSON as acetui writes it for people and their scripts (every ``--json``, a CSV's nested records): valid
JSON, which has no NaN or Infinity (JavaScript's JSON.parse, jq, Go and serde refuse them). A number that
is not finite, such as the perplexity of a model pruned to noise, is written ``null``; the run store keeps
its own."""

from __future__ import annotations

import json
import math


def json_text(value, indent: int | None = 2) -> str:
    """``value`` as JSON text, with ``null`` for every float that is not finite."""
    return json.dumps(_finite(value), indent=indent, allow_nan=False)


def _finite(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(item) for item in value]
    return value
