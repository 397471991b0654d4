"""The AutoTVM knob of horizontal fusion: whether a template fuses independent stages with
``Schedule.create_fused_loop``, in which branch order, and how their rows are laid out (end
to end, or interleaved in blocks of ``k`` rows).

One knob, so that the space holds no configs that differ only in an unused value (an order
or a block size when the branches are not fused)::

    @autotvm.template("two_branches")
    def two_branches(M, N):
        ...                                   # X, Y independent; Z reads both
        s = te.create_schedule(Z.op)
        cfg = autotvm.get_config()
        fused = autotvm.fused_loop.fuse_branches(cfg, s, [X, Y])
        if fused is not None:                 # the knob chose to fuse
            s[fused[0]].parallel(fused[0].op.loop_axis)
        return s, [A, B, Z]

The knob's candidates are ``[]`` (do not fuse; the default of an untuned workload), then for
every order of the branches (``[1, 0]``: ``Y``'s rows first) ``[order, None]`` (end to end)
and ``[order, k]`` (blocks of ``k`` rows round-robin, ``k`` in :data:`INTERLEAVE_BLOCKS`)
for each ``k`` that lays the rows out differently from end to end: some branch but the last
has more than ``k`` rows (else each branch's rows come in one block, end to end). Branches of
symbolic extent are only placed end to end. Which candidate wins depends on the machine: with
unequal branches, the longer one first lets the threads that take the short rows pick up the
tail (seed 002's odd/even oscillation); interleaving gives every thread of a ``parallel``
chunking a share of every branch.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import permutations

from kiln.ir.expr import IntImm
from kiln.ir.op import convert
from kiln.te.tensor import Tensor

#: the most branches whose every order is a candidate (n! orders)
MAX_ORDERED_BRANCHES = 5

#: the block sizes (rows of a branch per round) the knob tries for interleaving
INTERLEAVE_BLOCKS = (1, 2, 4, 8)


def candidates(extents: Sequence) -> list[list]:
    """The knob's values for branches of ``extents``: ``[]``, then ``[order, None]`` and
    ``[order, k]`` for each order and each block size ``k`` that differs from end to end."""
    sizes = [convert(e) for e in extents]
    constant = all(isinstance(e, IntImm) for e in sizes)
    out: list[list] = [[]]
    for order in permutations(range(len(sizes))):
        out.append([list(order), None])
        if constant:
            longest_but_last = max(sizes[i].value for i in order[:-1])
            out += [[list(order), k] for k in INTERLEAVE_BLOCKS if k < longest_but_last]
    return out


def fuse_branches(cfg, sch, branches: Sequence[Tensor], extents: Sequence | None = None,
                  knob: str = "fuse_branches", name: str = "fused") -> list[Tensor] | None:
    """Define knob ``knob`` on ``cfg`` and apply it to schedule ``sch``: fuse ``branches``
    (their first dimensions, or ``extents``) in the chosen order and layout, or leave them.

    Returns the fused outputs in the order of ``branches`` (``out[0].op.loop_axis`` is the
    fused loop), or None when the config does not fuse.
    """
    branches = list(branches)
    if not 2 <= len(branches) <= MAX_ORDERED_BRANCHES:
        raise ValueError(
            f"fuse_branches: give 2 to {MAX_ORDERED_BRANCHES} branches (their every order "
            f"is a candidate), got {len(branches)}")
    sizes = list(extents) if extents is not None else [t.shape[0] for t in branches]
    cfg.define_knob(knob, candidates(sizes))
    choice = cfg[knob].val
    if not choice:
        return None
    order, interleave = list(choice[0]), choice[1]
    picked = [branches[i] for i in order]
    fused = sch.create_fused_loop([[t] for t in picked], picked, [sizes[i] for i in order],
                                  name=name, interleave=interleave)
    out: list[Tensor] = list(fused)
    for position, i in enumerate(order):
        out[i] = fused[position]
    return out
