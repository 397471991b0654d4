"""Layout rewrite (Ansor's ``layout_rewrite_option``): a constant weight stored in the
order its multi-level tiled reader walks it.

A placeholder that a computation declares *layout free* (TVM's
``te.compute(..., attrs={"layout_free_placeholders": [B]})``: a weight whose values are
known before the kernel runs) may be stored in any layout. Given a state, each
layout-free placeholder read by a multi-level tiled stage with one loop variable per
index (``B[k, j]`` of a GEMM, ``W[f, rc, ry, rx]`` of a conv) gets the layout of the loops
that index it, in the stage's loop order: the GEMM tiled ``i.0 j.0 i.1 j.1 k.0 i.2 j.2 k.1
i.3 j.3`` reads ``B`` as ``B_rw[j.0, j.1, k.0, j.2, k.1, j.3]`` (levels of extent 1
dropped), so its innermost loops read consecutive addresses. A stage computed at a
consumer's loop (tiling with fusion, cache write) takes its outer levels from the
consumer's loops above the attach point.

:class:`LayoutRewriteOption` (TVM's names) says what the rewritten computation takes:

* ``NO_REWRITE``: the original layout;
* ``INSERT_TRANSFORM_STAGE``: the original weight, copied into the new layout by a stage
  of the kernel (run in parallel at the root) that the tiled stage reads;
* ``REWRITE_FOR_PRE_TRANSFORMED``: the weight already in the new layout (its
  placeholder ``<name>_rewritten`` replaces the original argument); the caller transforms
  it once, ahead of time, with :meth:`LayoutRewrite.transform`.

Guarantee: for any state, the rewritten computation computes the same values as the
original one (only where the weight is stored changes); the state's steps replay on it
unchanged, since the rewritten operations keep their names and loop variables.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from enum import IntEnum

import numpy as np

from kiln import te
from kiln.ir.expr import ProducerLoad, Var
from kiln.ir.functor import Mutator, post_order_visit
from kiln.ir.op import floordiv, floormod
from kiln.te.tensor import ComputeOp, PlaceholderOp, Tensor

from .loop_state import (
    CacheWriteStep,
    ComputeAtStep,
    ReorderStep,
    RfactorStep,
    SplitStep,
    State,
    root_iter_name,
)

__all__ = ["LayoutRewriteOption", "LayoutRewrite", "LAYOUT_FREE_ATTR", "plan_layout_rewrites",
           "rewrite_tensors", "apply_steps_with_rewrites"]

#: the compute attribute listing the placeholders a computation lets the compiler re-lay out
LAYOUT_FREE_ATTR = "layout_free_placeholders"


class LayoutRewriteOption(IntEnum):
    """How a tuned computation takes its layout-free weights (module docstring)."""

    NO_REWRITE = 0
    INSERT_TRANSFORM_STAGE = 1
    REWRITE_FOR_PRE_TRANSFORMED = 2

    @staticmethod
    def get_target_default(target, in_relay_integration: bool = False
                           ) -> LayoutRewriteOption:
        """TVM's default: rewrite on CPUs (weights pre-transformed when a graph compiler
        folds the transform into its constants), not on GPUs."""
        from kiln.autotvm.measure.cuda import is_cuda_target  # the measurement's test

        if is_cuda_target(str(target)):
            return LayoutRewriteOption.NO_REWRITE
        if in_relay_integration:
            return LayoutRewriteOption.REWRITE_FOR_PRE_TRANSFORMED
        return LayoutRewriteOption.INSERT_TRANSFORM_STAGE


@dataclass(frozen=True)
class Level:
    """One loop of the tiled stage that indexes the weight: a level of the split of the
    weight's dimension ``dim``, of ``extent`` iterations, each ``stride`` elements of that
    dimension apart."""

    dim: int
    extent: int
    stride: int


@dataclass(frozen=True)
class LayoutRewrite:
    """The new layout of placeholder ``placeholder`` (of ``shape``) read by stage
    ``stage``: one dimension per :class:`Level`, outermost first."""

    placeholder: str
    stage: str
    shape: tuple[int, ...]
    levels: tuple[Level, ...]

    @property
    def new_shape(self) -> tuple[int, ...]:
        return tuple(lv.extent for lv in self.levels)

    @property
    def new_name(self) -> str:
        return f"{self.placeholder}_rewritten"

    def new_indices(self, indices: list) -> list:
        """The indices into the new layout of the element at ``indices`` of the original."""
        out = []
        for lv in self.levels:
            e = floordiv(indices[lv.dim], lv.stride)
            outermost = lv.extent * lv.stride == self.shape[lv.dim]
            out.append(e if outermost else floormod(e, lv.extent))
        return out

    def old_indices(self, new: list) -> list:
        """The indices into the original of the element at ``new`` of the new layout."""
        out = [0] * len(self.shape)
        for lv, v in zip(self.levels, new, strict=True):
            out[lv.dim] = out[lv.dim] + v * lv.stride
        return out

    def transform(self, array: np.ndarray) -> np.ndarray:
        """``array`` (the weight in its original layout) in the new layout."""
        split: list[tuple[int, Level]] = []  # (position in the split view, level)
        radices = []
        for d, n in enumerate(self.shape):
            mine = sorted((lv for lv in self.levels if lv.dim == d), key=lambda lv: -lv.stride)
            for lv in mine:
                split.append((len(radices), lv))
                radices.append(lv.extent)
            if not mine:  # a dimension of extent 1
                radices.append(n)
        view = np.asarray(array).reshape(radices)
        order = [next(p for p, lv in split if lv is want) for want in self.levels]
        rest = [p for p in range(len(radices)) if p not in order]  # extent-1 axes
        return np.ascontiguousarray(view.transpose(order + rest).reshape(self.new_shape))


def plan_layout_rewrites(dag, state: State) -> list[LayoutRewrite]:
    """The layout rewrites of ``dag``'s layout-free placeholders under ``state`` (none for
    a placeholder whose reader ``state`` does not tile, or that it reads through an index
    expression other than one loop variable)."""
    out = []
    for op in dag.compute_ops:
        free = {id(t.op) for t in op.attrs.get(LAYOUT_FREE_ATTR, ())}
        if not free or not op.reduce_axis or len(op.body) != 1:
            continue
        for load in _loads(op.body[0]):
            if id(load.producer.op) not in free or not isinstance(load.producer.op,
                                                                  PlaceholderOp):
                continue
            if any(r.placeholder == load.producer.op.name for r in out):
                continue
            rewrite = _plan_one(dag, state, op, load)
            if rewrite is not None:
                out.append(rewrite)
    return out


def rewrite_tensors(dag, choices: list[tuple[LayoutRewrite, LayoutRewriteOption]]
                    ) -> tuple[list[Tensor], list[Tensor]]:
    """``(tensors, transform stages)``: ``dag``'s tensors (arguments, in order) computed
    with each rewrite applied as its option says (``NO_REWRITE``: not at all), and the
    stages that copy a weight into its new layout (those of ``INSERT_TRANSFORM_STAGE``)."""
    by_name = {r.placeholder: (r, o) for r, o in choices
               if o != LayoutRewriteOption.NO_REWRITE}
    new_of: dict[Tensor, Tensor] = {}  # original tensor -> its replacement
    rewrites: dict[str, LayoutRewrite] = {}  # placeholder name -> its rewrite
    stages = []
    for op in dag.ops:
        if isinstance(op, PlaceholderOp) and op.name in by_name:
            r, option = by_name[op.name]
            t = op.output(0)
            rewrites[op.name] = r
            if option == LayoutRewriteOption.REWRITE_FOR_PRE_TRANSFORMED:
                new_of[t] = te.placeholder(r.new_shape, name=r.new_name, dtype=t.dtype)
            else:
                new_of[t] = te.compute(r.new_shape, _copy_into(t, r), name=r.new_name)
                stages.append(new_of[t])
        elif isinstance(op, ComputeOp):
            body = [_RewriteLoads(new_of, rewrites).visit(b) for b in op.body]
            if any(a is not b for a, b in zip(body, op.body, strict=True)):
                attrs = {k: v for k, v in op.attrs.items() if k != LAYOUT_FREE_ATTR}
                new_op = ComputeOp(op.name, op.tag, attrs, op.axis, body)
                new_of.update(zip(op.outputs, new_op.outputs, strict=True))
    inserted = {t.op for t in stages}
    return [t if new_of.get(t, t).op in inserted else new_of.get(t, t)
            for t in dag.tensors], stages


def apply_steps_with_rewrites(dag, state: State,
                              choose: Callable[[LayoutRewrite], LayoutRewriteOption]):
    """``(schedule, tensors)`` of ``state`` on ``dag`` with each of its layout rewrites
    applied as ``choose(rewrite)`` says; a transform stage runs at the root, its outer loop
    in parallel."""
    choices = [(r, choose(r)) for r in plan_layout_rewrites(dag, state)]
    if not choices:
        return dag.apply_steps_from_state(state)
    tensors, stages = rewrite_tensors(dag, choices)
    sch, args = type(dag)(tensors).apply_steps_from_state(state)
    for t in stages:
        sch[t].parallel(sch[t].op.axis[0])
    return sch, args


# ---- planning ------------------------------------------------------------------------
def _loads(expr) -> list[ProducerLoad]:
    found: list[ProducerLoad] = []
    post_order_visit(expr, lambda n: found.append(n) if isinstance(n, ProducerLoad) else None)
    return found


def _plan_one(dag, state: State, op: ComputeOp, load: ProducerLoad) -> LayoutRewrite | None:
    """The rewrite of the placeholder ``load`` reads, or None."""
    axes = list(op.axis) + list(op.reduce_axis)
    loop_of = {id(iv.var): root_iter_name(axes, k) for k, iv in enumerate(axes)}
    if not all(isinstance(i, Var) and id(i) in loop_of for i in load.indices):
        return None
    dims = [loop_of[id(i)] for i in load.indices]
    if len(set(dims)) != len(dims):
        return None
    name = dag.stage_name(op)
    if any(isinstance(s, CacheWriteStep) and s.stage == name for s in state.steps):
        name = f"{name}.local"
    tiling = _tiling(dag, state, op, name)
    if tiling is None:
        return None
    order, radices = tiling
    if not any(len(radices[d]) > 1 for d in dims):
        return None  # the reader's loops over the weight are not tiled
    shape = tuple(int(x) for x in load.producer.shape)
    levels = []
    for key in order:
        loop, k = key
        if loop not in dims:
            continue
        extents = radices[loop]
        if extents[k] > 1:
            levels.append(Level(dims.index(loop), extents[k], math.prod(extents[k + 1:])))
    if not levels:
        return None
    return LayoutRewrite(load.producer.op.name, name, shape, tuple(levels))


def _stage_tiling(steps: list, stage: str, root: list[tuple[str, int]]
                  ) -> tuple[list[tuple[str, int]], dict[str, list[int]]] | None:
    """``(order, radices)`` of ``stage``'s loops: its root loops ``root`` (name, extent)
    split by its split steps, ``order`` the loops as ``(root loop, level)`` outermost first
    (its last reorder), ``radices[root loop]`` the extents of its levels; None when its
    loops are other than single splits of root loops (a fused or rfactor'ed stage, a
    split with a partial tile)."""
    radices = {n: [e] for n, e in root}
    for s in steps:
        if s.stage != stage:
            continue
        if isinstance(s, RfactorStep):
            return None
        if isinstance(s, SplitStep):
            if s.iter not in radices or len(radices[s.iter]) > 1 or s.tail:
                return None
            radices[s.iter] = [s.extent // math.prod(s.lengths), *s.lengths]
    levels = {f"{n}.{k}" if len(r) > 1 else n: (n, k)
              for n, r in radices.items() for k in range(len(r))}
    reorders = [s for s in steps if isinstance(s, ReorderStep) and s.stage == stage]
    if reorders:
        if any(n not in levels for n in reorders[-1].order):
            return None
        order = [levels[n] for n in reorders[-1].order]
    else:
        order = list(levels.values())
    return order, radices


def _tiling(dag, state: State, op: ComputeOp, name: str):
    """``(order, radices)`` of the loops over ``op``'s root loops that compute it in
    ``state`` (stage ``name``), with the loops of the stage it is computed at, above the
    attach point, as outer levels of its spatial loops (that stage's spatial loops
    correspond to ``op``'s by position)."""
    axes = list(op.axis) + list(op.reduce_axis)
    root = [(root_iter_name(axes, k), int(iv.dom.extent.value)) for k, iv in enumerate(axes)]
    own = _stage_tiling(state.steps, name, root)
    attach = [s for s in state.steps if isinstance(s, ComputeAtStep) and s.stage == name]
    if own is None or not attach:
        return own
    order, radices = own
    target = next((t for t in dag.compute_ops if dag.stage_name(t) == attach[-1].target),
                  None)
    if target is None or len(target.axis) != len(op.axis):
        return None
    t_root = [(root_iter_name(list(target.axis), k), int(iv.dom.extent.value))
              for k, iv in enumerate(target.axis)]
    outer = _stage_tiling(state.steps, attach[-1].target, t_root)
    if outer is None:
        return None
    t_order, t_radices = outer
    names = {(n, k): f"{n}.{k}" if len(t_radices[n]) > 1 else n
             for n, r in t_radices.items() for k in range(len(r))}
    stop = next((i for i, key in enumerate(t_order) if names[key] == attach[-1].iter), None)
    if stop is None:
        return None
    prefix = t_order[:stop + 1]
    to_own = {t: o for (t, _), (o, _) in zip(t_root, root, strict=False)}
    full = {n: list(r) for n, r in radices.items()}
    for t_name, own_name in to_own.items():
        outer_levels = [t_radices[t_name][k] for t, k in prefix if t == t_name]
        covered = math.prod(outer_levels)
        if full[own_name][0] % covered:
            return None
        full[own_name] = [*outer_levels, full[own_name][0] // covered, *full[own_name][1:]]
    shift = {n: sum(1 for t, _ in prefix if to_own.get(t) == n) for n in full}
    return ([(to_own[t], k) for t, k in prefix]
            + [(n, k + shift[n]) for n, k in order]), full


# ---- rewriting -----------------------------------------------------------------------
def _copy_into(t: Tensor, r: LayoutRewrite):
    """The body of the stage that copies ``t`` into the layout ``r``."""
    return lambda *new: t[tuple(r.old_indices(list(new)))]


class _RewriteLoads(Mutator):
    """Loads of replaced tensors read the replacement; a re-laid-out weight's element at
    its new indices."""

    def __init__(self, new_of: dict[Tensor, Tensor], rewrites: dict[str, LayoutRewrite]):
        super().__init__()
        self.new_of = new_of
        self.rewrites = rewrites

    def visit_ProducerLoad(self, node: ProducerLoad):
        indices = [self.visit(i) for i in node.indices]
        new = self.new_of.get(node.producer)
        if new is None:
            if all(a is b for a, b in zip(indices, node.indices, strict=True)):
                return node
            return ProducerLoad(node.producer, indices)
        r = self.rewrites.get(node.producer.op.name)
        return ProducerLoad(new, r.new_indices(indices) if r is not None else indices)
