"""The AutoTVM knob of horizontal fusion: whether a template fuses independent stages with
``Schedule.create_fused_loop``, and in which branch order.

One knob, so that the space holds no configs that differ only in an unused order::

    @autotvm.template("two_branches")
    def two_branches(M, N):
        ...                                   # X, Y independent; Z reads both
        s = te.create_schedule(Z.op)
        cfg = autotvm.get_config()
        fused = autotvm.fused_loop.fuse_branches(cfg, s, [X, Y])
        if fused is not None:                 # the knob chose to fuse
            s[fused[0]].parallel(fused[0].op.loop_axis)
        return s, [A, B, Z]

The knob's candidates are ``[]`` (do not fuse; the default of an untuned workload) and every
order of the branches (``[1, 0]``: ``Y``'s rows first). Which order wins depends on the
machine: with unequal branches, the longer one first lets the threads that take the short
rows pick up the tail (seed 002's odd/even oscillation).
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import permutations

from kiln.te.tensor import Tensor

#: the most branches whose every order is a candidate (n! orders)
MAX_ORDERED_BRANCHES = 5


def fuse_branches(cfg, sch, branches: Sequence[Tensor], extents: Sequence | None = None,
                  knob: str = "fuse_branches", name: str = "fused") -> list[Tensor] | None:
    """Define knob ``knob`` on ``cfg`` and apply it to schedule ``sch``: fuse ``branches``
    (their first dimensions, or ``extents``) in the chosen order, or leave them.

    Returns the fused outputs in the order of ``branches`` (``out[0].op.loop_axis`` is the
    fused loop), or None when the config does not fuse.
    """
    branches = list(branches)
    if not 2 <= len(branches) <= MAX_ORDERED_BRANCHES:
        raise ValueError(
            f"fuse_branches: give 2 to {MAX_ORDERED_BRANCHES} branches (their every order "
            f"is a candidate), got {len(branches)}")
    cfg.define_knob(knob, [[]] + [list(p) for p in permutations(range(len(branches)))])
    order = list(cfg[knob].val)
    if not order:
        return None
    sizes = list(extents) if extents is not None else [t.shape[0] for t in branches]
    picked = [branches[i] for i in order]
    fused = sch.create_fused_loop([[t] for t in picked], picked, [sizes[i] for i in order],
                                  name=name)
    out: list[Tensor] = list(fused)
    for position, i in enumerate(order):
        out[i] = fused[position]
    return out
