"""Features of a loop state read from its transform steps, without lowering it.

:func:`state_features` describes a :class:`~.loop_state.State` by what its steps choose:
the length of every level of every split (``log2``), per stage the product of each level
over its splits of the same depth (the ``S3`` product of a multi-level tiling is its
register tile, the ``S0`` product its parallel loop), the extent of each vectorized and
parallel loop, each ``auto_unroll_max_step`` value and which kinds of steps (cache write,
compute_at, rfactor ...) make the state's sketch. Two states of one sketch differ exactly
in these choices, so a rank model learns the search space from them as AutoTVM's
``knob`` features do; a state costs microseconds to describe, where lowering it (what
``kiln.autotvm.feature.get_itervar_feature`` needs) costs a tenth of a second or more.

Guarantee: the features depend on the state's steps only (equal steps, equal features),
and every value is finite.
"""

from __future__ import annotations

import math

from .loop_state import AnnotationStep, FuseStep, PragmaStep, SplitStep, State

__all__ = ["state_features"]


def state_features(state: State) -> dict[str, float]:
    """``{name: value}`` of ``state``'s choices (module docstring); names are stable
    across states of one task, so rows of several states line up by name."""
    feats: dict[str, float] = {}
    lengths: dict[tuple[str, str], int] = {}  # (stage, loop) -> extent, where known
    for step in state.steps:
        kind = step.to_json()[0]
        feats[f"step.{kind}"] = feats.get(f"step.{kind}", 0.0) + 1.0
        if isinstance(step, SplitStep):
            _split_features(step, feats, lengths)
        elif isinstance(step, FuseStep):
            parts = [lengths.get((step.stage, n)) for n in step.names]
            if all(p is not None for p in parts):
                lengths[(step.stage, step.fused_name)] = math.prod(parts)
        elif isinstance(step, PragmaStep):
            feats[f"{step.stage}.unroll"] = math.log2(1 + int(step.value or 0))
        elif isinstance(step, AnnotationStep):
            extent = lengths.get((step.stage, step.iter))
            if extent is not None:
                key = f"{step.stage}.{step.kind}"
                feats[key] = feats.get(key, 0.0) + math.log2(extent)
    return feats


def _split_features(step: SplitStep, feats: dict[str, float],
                    lengths: dict[tuple[str, str], int]) -> None:
    """The log2 length of each level of ``step`` and its share of the stage's per-level
    products; records each level's length in ``lengths``."""
    inner = [int(x) for x in step.lengths]
    levels = [max(-(-step.extent // max(math.prod(inner), 1)), 1), *inner]
    for k, n in enumerate(levels):
        lengths[(step.stage, f"{step.iter}.{k}")] = n
        feats[f"{step.stage}.{step.iter}.{k}"] = math.log2(n)
        level = f"{step.stage}.L{len(levels)}.{k}"
        feats[level] = feats.get(level, 0.0) + math.log2(n)
