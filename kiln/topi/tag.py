"""Operator tags: how a graph compiler classifies a TE computation.

Every compute in ``kiln.topi`` carries a ``tag``. The tags name the operator (``"conv2d_nchw"``,
``"dense"``, ``"pool_max"``) or, for the simple ones, the kind of access pattern
(``"elemwise"``, ``"broadcast"``, ``"injective"``, ``"comm_reduce"``). A graph compiler fuses
operators by these kinds, as TVM does with its four operator kinds:

=====================  ==============================================================
kind                   what it means for fusion
=====================  ==============================================================
injective              each output element depends on one input element (elementwise,
                       broadcast, reshape, transpose, pad, concatenate ...): fusable
                       into anything
reduction              reduces over some axes (sum, max, mean ...); injective
                       producers fuse into it
complex-out-fusable    convolution, dense, matmul, pooling: elementwise consumers
                       (bias, relu, add) fuse after it
opaque                 not fusable (softmax, layer norm, argmax, anything untagged)
=====================  ==============================================================

:func:`op_pattern` gives TVM's numeric pattern (``ELEMWISE=0 ... OPAQUE=8``) and
:func:`op_kind` the name of the kind.
"""

from __future__ import annotations

ELEMWISE = "elemwise"
BROADCAST = "broadcast"
INJECTIVE = "injective"
COMM_REDUCE = "comm_reduce"
COMM_REDUCE_IDX = "comm_reduce_idx"

# TVM's relay.op.OpPattern values
PATTERN_ELEMWISE = 0
PATTERN_BROADCAST = 1
PATTERN_INJECTIVE = 2
PATTERN_COMM_REDUCE = 3
PATTERN_OUT_ELEMWISE_FUSABLE = 4
PATTERN_TUPLE = 7
PATTERN_OPAQUE = 8

#: Tags of the complex-out-fusable operators (an elementwise epilogue fuses after them).
OUT_ELEMWISE_FUSABLE_TAGS = (
    "conv2d_nchw", "conv2d_nhwc", "conv2d_NCHWc", "group_conv2d_nchw",
    "depthwise_conv2d_nchw", "depthwise_conv2d_NCHWc", "dense", "matmul", "batch_matmul",
    "pool_max", "pool_avg", "pool_sum", "global_pool_max", "global_pool_avg",
    "adaptive_pool_max", "adaptive_pool_avg", "adaptive_pool_sum",
)


def _first(tag: str) -> str:
    return tag.split(",")[0] if tag else ""


def is_broadcast(tag: str) -> bool:
    """True for elementwise and broadcast tags (``"elemwise"``, ``"broadcast"``, and
    ``"elemwise,..."``/``"broadcast,..."`` variants)."""
    return _first(tag) in (ELEMWISE, BROADCAST)


def is_injective(tag: str) -> bool:
    """True for any injective tag: elementwise, broadcast or ``"injective[,...]"``."""
    return _first(tag) in (ELEMWISE, BROADCAST, INJECTIVE)


def is_reduce(tag: str) -> bool:
    return _first(tag) in (COMM_REDUCE, COMM_REDUCE_IDX)


def _tag_of(x) -> str:
    if isinstance(x, str):
        return x
    op = getattr(x, "op", x)
    return getattr(op, "tag", "") or ""


def op_pattern(x) -> int:
    """TVM's operator pattern (``relay.op.OpPattern``) of a tag, an operation or a tensor."""
    tag = _tag_of(x)
    first = _first(tag)
    if first == ELEMWISE:
        return PATTERN_ELEMWISE
    if first == BROADCAST:
        return PATTERN_BROADCAST
    if first == INJECTIVE:
        return PATTERN_INJECTIVE
    if first in (COMM_REDUCE, COMM_REDUCE_IDX):
        return PATTERN_COMM_REDUCE
    if first in OUT_ELEMWISE_FUSABLE_TAGS:
        return PATTERN_OUT_ELEMWISE_FUSABLE
    return PATTERN_OPAQUE


_KIND_NAMES = {
    PATTERN_ELEMWISE: "injective",
    PATTERN_BROADCAST: "injective",
    PATTERN_INJECTIVE: "injective",
    PATTERN_COMM_REDUCE: "reduction",
    PATTERN_OUT_ELEMWISE_FUSABLE: "complex-out-fusable",
    PATTERN_OPAQUE: "opaque",
}


def op_kind(x) -> str:
    """One of ``"injective"``, ``"reduction"``, ``"complex-out-fusable"``, ``"opaque"``."""
    return _KIND_NAMES[op_pattern(x)]


__all__ = [
    "ELEMWISE", "BROADCAST", "INJECTIVE", "COMM_REDUCE", "COMM_REDUCE_IDX",
    "PATTERN_ELEMWISE", "PATTERN_BROADCAST", "PATTERN_INJECTIVE", "PATTERN_COMM_REDUCE",
    "PATTERN_OUT_ELEMWISE_FUSABLE", "PATTERN_TUPLE", "PATTERN_OPAQUE",
    "OUT_ELEMWISE_FUSABLE_TAGS", "is_broadcast", "is_injective", "is_reduce", "op_pattern",
    "op_kind",
]
