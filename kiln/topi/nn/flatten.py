"""Flatten all axes but the first."""

from __future__ import annotations

from kiln import te

from .. import tag
from ..utils import prod, unravel_index


def flatten(data):
    """``[N, d1, d2, ...]`` -> ``[N, d1*d2*...]`` (row-major)."""
    if data.ndim < 1:
        raise ValueError("flatten needs at least one dimension")
    rest = list(data.shape[1:])
    size = prod(rest) if rest else 1

    def f(n, j):
        return data(n, *unravel_index(j, rest)) if rest else data(n)

    return te.compute((data.shape[0], size), f, name="T_flatten", tag=tag.INJECTIVE)


__all__ = ["flatten"]
