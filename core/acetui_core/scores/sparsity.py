"""The sparsity target: an unstructured ratio or an N:M pattern."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from acetui_core.basics.errors import UserError


@dataclass(frozen=True)
class Sparsity:
    """Either ``ratio`` (unstructured, 0 < ratio < 1) or ``n``:``m`` (keep N of every M); the unused
    fields stay 0."""

    ratio: float = 0.0
    n: int = 0
    m: int = 0

    @property
    def is_nm(self) -> bool:
        return self.m > 0

    @property
    def fraction(self) -> float:
        """The fraction of weights removed."""
        return 1 - self.n / self.m if self.is_nm else self.ratio

    def __str__(self) -> str:
        return f"{self.n}:{self.m}" if self.is_nm else repr(self.ratio)  # exact: :g would round 0.9999999 to 1


def parse_sparsity(text: str, allow_zero: bool = False) -> Sparsity:
    """Parse ``0.5`` or ``2:4``; anything else is a UserError with one sentence. ``allow_zero``: a ratio of 0
    (no weight inside the experts pruned: ``--expert-sparsity`` alone; ``validate`` checks that pairing)."""
    text = str(text).strip()
    # int() and float() also read other scripts' digits and "1_0"; a recorded sparsity is what was typed
    plain = text.isascii() and "_" not in text
    if ":" in text:
        left, _, right = text.partition(":")
        try:
            if not plain:
                raise ValueError(text)
            n, m = int(left), int(right)
        except ValueError:
            raise UserError(
                f"Sparsity '{text}' is not a valid N:M pattern; use two whole numbers such as 2:4."
            ) from None
        if not 0 < n < m:
            raise UserError(
                f"Sparsity '{text}' is not a valid N:M pattern; N must be at least 1 and smaller than M (for example 2:4)."
            )
        return Sparsity(n=n, m=m)
    try:
        if not plain:
            raise ValueError(text)
        ratio = float(text)
    except ValueError:
        raise UserError(f"Sparsity '{text}' is neither a ratio such as 0.5 nor an N:M pattern such as 2:4.") from None
    underflow = ratio == 0 and Decimal(text) != 0  # 1e-400 reads as 0.0, and would be named so
    if not (ratio >= 0 if allow_zero else ratio > 0) or not ratio < 1 or underflow:
        raise UserError(
            f"Sparsity {text} is out of range; a ratio must lie strictly between 0 and 1 (0 only with "
            f"--expert-sparsity, to remove whole experts and prune nothing else)."
        )
    return Sparsity(ratio=ratio)
