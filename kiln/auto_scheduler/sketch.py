"""Sketch generation: the loop structures the search considers, derived from the DAG by rules.

A :class:`Sketch` is a list of transform steps whose tile sizes and unroll limits are left
open (``None``); :mod:`.annotation` fills them. The rules (Ansor's, for CPUs) visit the
compute stages from the outputs back to the inputs:

* **inline**: an elementwise stage that is not an output is ``compute_inline``-d, unless
  it chooses between values (a padding: computed apart, as a skipped stage);
* **multi-level tiling** (``SSRSRS``): a reduction with data reuse (GEMM, conv) splits each
  spatial loop in four and each reduction loop in two and orders them
  ``S0 S1 R0 S2 R1 S3``;
* **tiling with fusion**: when such a stage has one elementwise consumer of its shape (after
  inlining), the consumer is tiled ``S0 S1 S2 S3`` and the reduction is computed at its
  last ``S1`` loop with ``R0 S2 R1 S3`` (its ``S3`` sizes follow the consumer's);
* **cache write**: an output reduction gets a second sketch where a ``local`` write cache
  computes, tiled and fused into the output stage as above;
* **rfactor**: a reduction with fewer outputs than reduced elements (a long vector's sum,
  a softmax's max, a matrix-vector product) gets two more sketches beside the others: its
  reduction loops are fused and split in two, and ``rfactor`` over the inner part makes a
  stage of vector-wide partial sums (the inner part vectorized, computed in each
  iteration of the stage's parallel loop), over the outer part a stage of partial sums
  computed in parallel; the stage itself then reduces those;
* **skip**: any other stage keeps its loops.

Annotation is part of the sketch: the ``S0`` loops of each root stage are fused and run in
parallel with an ``auto_unroll_max_step`` pragma, the innermost spatial tile is vectorized;
a skipped elementwise stage runs its outer loops fused in parallel and vectorizes the last
(split, its inner part in whole vectors, when longer than :data:`MAX_VECTORIZE_EXTENT`).

A tiled stage's tile sizes are bounded by the target's CPU (:func:`cpu_budget`, read from
``kiln.target``, no per-machine constant): its vectorized innermost tile is drawn in whole
vectors where the extent allows, its innermost ``S3`` tile holds at most half the vector
registers of accumulators, its ``S2 S3`` tile at most the L1 data cache, and its unroll
pragma unrolls at most :data:`MAX_UNROLLED_VECTORS` vector statements (the C compiler's
time). A *filled* candidate (:meth:`Sketch.fills`) also has an ``S3`` tile of at least a
quarter of the registers and a parallel loop of at least one iteration per core.

These are the CPU rules; a ``cuda`` target gets the GPU rules of :mod:`.sketch_gpu`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from kiln.autotvm.measure.cuda import is_cuda_target
from kiln.ir.expr import Call, Select
from kiln.ir.functor import post_order_visit
from kiln.target import Target
from kiln.target.memory import host_memory

from .compute_dag import ComputeDAG
from .loop_state import (
    AnnotationStep,
    CacheWriteStep,
    ComputeAtStep,
    ComputeInlineStep,
    FuseStep,
    PragmaStep,
    ReorderStep,
    RfactorStep,
    SplitStep,
    root_iter_name,
)

__all__ = ["Sketch", "generate_sketches", "tile_product"]

#: the largest extent a skipped stage's last loop is vectorized with
MAX_VECTORIZE_EXTENT = 64
#: the values of ``auto_unroll_max_step`` the search picks from (Ansor's CPU choices)
UNROLL_CHOICES = (0, 16, 64, 512)
#: the most vector statements an unroll pragma may unroll a tiled stage into (its value
#: times the vectors of the vectorized innermost tile): a budget of the C compiler's time,
#: not of the machine (30 GEMM 1024 states built two at a time, load average 11: at most
#: 256 each within 5 s, 512 in 2-23 s, 1024 in 10-38 s)
MAX_UNROLLED_VECTORS = 256


@dataclass
class Sketch:
    """Steps with open tile sizes (``SplitStep.lengths`` of ``None``) and unroll limits
    (``PragmaStep.value`` of ``None``); ``follows[i] = j`` makes split ``i`` take the
    innermost length of split ``j``; ``fused_follows[i] = ((j, level), ...)`` makes split
    ``i``'s one length the product of those levels' lengths (the threads of a block that
    fetch a shared tile together); ``limits`` are ``(((j, level), ...), bound)``: the
    product of those lengths is at most ``bound`` (threads per block, virtual threads; a
    reference ``(j, level, lanes)`` counts that length in whole vectors of ``lanes``);
    ``rules`` names the rule applied to each stage; ``unroll_choices`` are the values an
    open unroll limit takes; ``vector_lanes[i]``: split ``i``'s innermost level is
    vectorized, drawn as a multiple of that many lanes (the target's) where the extent
    allows; ``unroll_limits`` are ``(i, j, lanes, bound)``: the value of pragma ``i``
    times the vectors of split ``j``'s innermost (vectorized) length is at most ``bound``
    (the vector statements an ``auto_unroll_max_step`` may unroll into); ``floors`` are
    ``(((j, level), ...), bound)`` that a *filled* candidate's products reach
    (:meth:`fills`; the search draws half its random candidates filled);
    ``pure_stages`` compute each element once, without reduction (a cache write's copy-out
    stage, an elementwise consumer): a tile of theirs may shift inwards over its loop's
    end (``split(..., tail="shift_inwards")``)."""

    steps: list
    follows: dict = field(default_factory=dict)
    rules: list = field(default_factory=list)
    fused_follows: dict = field(default_factory=dict)
    limits: list = field(default_factory=list)
    unroll_choices: tuple[int, ...] = UNROLL_CHOICES
    vector_lanes: dict = field(default_factory=dict)
    unroll_limits: list = field(default_factory=list)
    floors: list = field(default_factory=list)
    pure_stages: frozenset = frozenset()

    def allows(self, tiles: dict, unrolls: dict | None = None) -> bool:
        """Whether the tile sizes ``tiles`` (split -> full factorization) keep every
        limit and, given ``unrolls`` (pragma step -> value), every unroll limit."""
        return (all(tile_product(tiles, refs) <= bound for refs, bound in self.limits)
                and all(unrolls[i] * -(-tiles[j][-1] // lanes) <= bound
                        for i, j, lanes, bound in self.unroll_limits if unrolls))

    def fills(self, tiles: dict) -> bool:
        """Whether the tile sizes ``tiles`` reach every floor (a register tile at least
        half full, a parallel loop of at least one iteration per core)."""
        return all(tile_product(tiles, refs) >= bound for refs, bound in self.floors)

    def __str__(self) -> str:
        return "; ".join(self.rules)


def tile_product(tiles: dict, refs: tuple) -> int:
    """The product of the tile lengths ``refs`` name: ``(j, level)`` the length of level
    ``level`` of split ``j``, ``(j, level, lanes)`` its whole vectors of ``lanes``."""
    return math.prod(-(-tiles[ref[0]][ref[1]] // (ref[2] if len(ref) > 2 else 1))
                     for ref in refs)


@dataclass
class PartialSketch:
    """A sketch being built: its steps and each visited stage's role."""

    dag: ComputeDAG
    steps: list = field(default_factory=list)
    follows: dict = field(default_factory=dict)
    rules: list = field(default_factory=list)
    role: dict = field(default_factory=dict)  # op name -> "inline" | "skip" | "tiled" | ...
    loops: dict = field(default_factory=dict)  # op name -> [(loop name, extent, is_reduce)]
    annotations: list = field(default_factory=list)
    fused_follows: dict = field(default_factory=dict)
    limits: list = field(default_factory=list)
    splits: dict = field(default_factory=dict)  # (stage, innermost loop) -> split step

    def copy(self) -> PartialSketch:
        return PartialSketch(self.dag, list(self.steps), dict(self.follows), list(self.rules),
                        dict(self.role), dict(self.loops), list(self.annotations),
                        dict(self.fused_follows), list(self.limits), dict(self.splits))

    def add(self, step) -> int:
        self.steps.append(step)
        return len(self.steps) - 1


def root_loops(op) -> list[tuple[str, int, bool]]:
    """``(name, extent, is_reduce)`` of an operation's root loops, as the replay names
    them."""
    axes = list(op.axis) + list(op.reduce_axis)
    return [(root_iter_name(axes, k), int(iv.dom.extent.value), k >= len(op.axis))
            for k, iv in enumerate(axes)]


def generate_sketches(dag: ComputeDAG, target: str = "llvm", hardware_params=None
                      ) -> list[Sketch]:
    """The sketches of ``dag`` (module docstring; for a ``cuda`` target the GPU rules of
    :mod:`.sketch_gpu`, within ``hardware_params``' limits; for a CPU, its vector width
    where ``hardware_params`` gives one), at least one."""
    if is_cuda_target(target):
        from .sketch_gpu import generate_gpu_sketches  # its rules build on this module's

        return generate_gpu_sketches(dag, target, hardware_params)
    partials = [PartialSketch(dag)]
    for op in reversed(dag.compute_ops):
        partials = [q for p in partials for q in _expand(p, op)]
    budget = cpu_budget(target, np.dtype(dag.outputs[0].dtype).itemsize,
                        getattr(hardware_params, "vector_unit_bytes", None))
    return [_finish(p, budget) for p in partials]


class CPUBudget(NamedTuple):
    """What the target's CPU gives a multi-level tiling: ``lanes`` of a vector (elements
    of the computation's type), ``register_tile`` vector registers of accumulators of the
    innermost tile (the ``S3`` levels: half the vector registers, the rest holding
    operands), ``cache_tile`` elements of the ``S2 S3`` tile (the L1 data cache); and the
    ``cores`` its parallel loop is shared among."""

    lanes: int
    register_tile: int
    cache_tile: int
    cores: int


def cpu_budget(target: str, itemsize: int, vector_unit_bytes: int | None = None
               ) -> CPUBudget:
    """The :class:`CPUBudget` of ``target``'s CPU (``kiln.target``) for ``itemsize``-byte
    elements; its vectors ``vector_unit_bytes`` wide where given (``HardwareParams``')."""
    cpu = Target(target).cpu
    lanes = max(1, vector_unit_bytes // itemsize) if vector_unit_bytes else \
        cpu.vector_lanes(itemsize)
    memory = host_memory()
    return CPUBudget(lanes, max(1, cpu.vector_registers // 2),
                     memory.caches[0].size_bytes // itemsize, memory.cores)


def _expand(p: PartialSketch, op) -> list[PartialSketch]:
    """The partial sketches after applying every rule that fits ``op``."""
    dag = p.dag
    name = dag.stage_name(op)
    if dag.is_inlinable(op) and not dag.has_data_reuse(op) and not _has_condition(op):
        p.add(ComputeInlineStep(name))
        p.role[name] = "inline"
        p.rules.append(f"{name}: inline")
        return [p]
    rfactors = ([_rfactor(p.copy(), op, inner) for inner in (True, False)]
                if _needs_rfactor(op) else [])
    if dag.has_data_reuse(op):
        consumer = fusable_consumer(p, op)
        if consumer is not None:
            return [_tile_with_fusion(p.copy(), name, root_loops(op),
                                      dag.stage_name(consumer)), *rfactors]
        out = [_tile(p.copy(), op)]
        if dag.is_output(op):
            out.append(_cache_write_and_tile(p.copy(), op))
        return out + rfactors
    _skip(p, name, root_loops(op))
    return [p, *rfactors]


def _has_condition(op) -> bool:
    """Whether ``op`` chooses between values (``if_then_else``, ``select``: a padding):
    inlined into a tiled reduction, its conditions would split every loop around the
    read into condition-free versions (a padded conv state: 130 kB of C, over a minute to
    build), so it is computed into its own buffer, as the hand schedules do."""
    found = False

    def visit(node) -> None:
        nonlocal found
        found = found or isinstance(node, Select) or (
            isinstance(node, Call) and node.op == "tvm_if_then_else")

    for body in op.body:
        post_order_visit(body, visit)
    return found


def _skip(p: PartialSketch, name: str, loops: list, rule: str = "skip") -> None:
    """Leave stage ``name`` (its root ``loops``) as it is, to the final annotation."""
    p.role[name] = "skip"
    p.loops[name] = loops
    p.rules.append(f"{name}: {rule}")


def _needs_rfactor(op) -> bool:
    """A reduction with fewer outputs than elements reduced into each: its spatial loops
    alone leave the machine's cores and vector lanes idle."""
    return bool(op.reduce_axis) and _size(op.axis) < _size(op.reduce_axis)


def _size(axes) -> int:
    return math.prod(int(iv.dom.extent.value) for iv in axes)


def _rfactor(p: PartialSketch, op, inner: bool) -> PartialSketch:
    """Fuse ``op``'s reduction loops into ``r``, split it into ``r.0 r.1`` and rfactor over
    ``r.1`` (``inner``: ``C.rf(S, r.1) += ... over r.0``, ``r.1`` innermost and vectorized,
    computed in each iteration of ``C``'s spatial loops, fused in parallel: one parallel
    loop, one output's partial sums in a vector, as topi's reduction schedule) or ``r.0``
    (``C.rf(r.0, S) += ... over r.1``, ``r.0`` and ``S`` fused in parallel); ``C`` then
    reduces ``C.rf`` over ``r.k.v``."""
    name = p.dag.stage_name(op)
    loops = root_loops(op)
    spatial = [n for n, _, r in loops if not r]
    reduce = [(n, e) for n, e, r in loops if r]
    r, extent = reduce[0]
    if len(reduce) > 1:
        fuse = FuseStep(name, tuple(n for n, _ in reduce))
        p.add(fuse)
        r, extent = fuse.fused_name, math.prod(e for _, e in reduce)
    split_loop(p, name, r, extent, 2)
    step = RfactorStep(name, f"{r}.1", len(spatial)) if inner else RfactorStep(name, f"{r}.0")
    p.add(step)
    rf = step.new_stage
    rule = f"rfactor {'inner' if inner else 'outer'}"
    p.role[rf] = "rfactor"
    p.splits[(rf, f"{r}.1")] = p.splits[(name, f"{r}.1")]  # C.rf's loop r.1 is C's
    if inner:
        p.add(ReorderStep(rf, (*spatial, f"{r}.0", f"{r}.1")))
        p.annotations.append((rf, [], [f"{r}.1"]))
    else:
        p.annotations.append((rf, [f"{r}.0", *spatial], []))
    if not (inner and spatial):
        # the annotation reads the extents of spatial loops only; the factored one's is open
        _skip(p, name, [x for x in loops if not x[2]] + [(f"{step.iter}.v", None, True)],
              rule)
        return p
    at = _fuse(p, name, spatial)
    p.add(AnnotationStep(name, at, "parallel"))
    p.add(ComputeAtStep(rf, name, at))
    p.role[name] = "parallel"
    p.rules.append(f"{name}: {rule}")
    return p


def fusable_consumer(p: PartialSketch, op):
    """The one stage that reads ``op`` once inlined stages are looked through, when it is
    a skipped elementwise stage of ``op``'s spatial shape; else None."""
    readers, todo = set(), list(p.dag.consumers(op))
    while todo:
        c = todo.pop()
        if p.role.get(p.dag.stage_name(c)) == "inline":
            todo.extend(p.dag.consumers(c))
        else:
            readers.add(c)
    if len(readers) != 1:
        return None
    (c,) = readers
    shape = [int(iv.dom.extent.value) for iv in op.axis]
    if (p.role.get(p.dag.stage_name(c)) != "skip" or c.reduce_axis
            or [int(iv.dom.extent.value) for iv in c.axis] != shape):
        return None
    return c


def split_loop(p: PartialSketch, stage: str, name: str, extent: int, parts: int) -> int:
    """Split loop ``name`` of ``stage`` into ``parts`` loops of open lengths; the step."""
    i = p.add(SplitStep(stage, name, extent, (None,) * (parts - 1)))
    p.splits[(stage, f"{name}.{parts - 1}")] = i
    return i


def _tile(p: PartialSketch, op) -> PartialSketch:
    """``S0 S1 R0 S2 R1 S3`` tiling of ``op`` as a root stage."""
    name = p.dag.stage_name(op)
    loops = root_loops(op)
    spatial = [(n, e) for n, e, r in loops if not r]
    reduce = [(n, e) for n, e, r in loops if r]
    for n, e in spatial:
        split_loop(p, name, n, e, 4)
    for n, e in reduce:
        split_loop(p, name, n, e, 2)
    level = lambda axes, k: [f"{n}.{k}" for n, _ in axes]  # noqa: E731
    p.add(ReorderStep(name, tuple(level(spatial, 0) + level(spatial, 1) + level(reduce, 0)
                                     + level(spatial, 2) + level(reduce, 1)
                                  + level(spatial, 3))))
    p.role[name] = "tiled"
    p.annotations.append((name, level(spatial, 0), level(spatial, 3)[-1:]))
    p.rules.append(f"{name}: multi-level tiling SSRSRS")
    return p


def _tile_with_fusion(p: PartialSketch, producer: str, producer_loops: list, consumer: str
                      ) -> PartialSketch:
    """Tile ``consumer`` ``S0 S1 S2 S3`` and compute ``producer`` (tiled ``R0 S2 R1 S3``)
    at its last ``S1`` loop."""
    c_spatial = [(n, e) for n, e, _ in p.loops[consumer]]
    c_splits = [split_loop(p, consumer, n, e, 4) for n, e in c_spatial]
    level = lambda axes, k: [f"{n}.{k}" for n, _ in axes]  # noqa: E731
    p.add(ReorderStep(consumer, tuple(sum((level(c_spatial, k) for k in range(4)), []))))
    p.add(ComputeAtStep(producer, consumer, level(c_spatial, 1)[-1]))
    spatial = [(n, e) for n, e, r in producer_loops if not r]
    reduce = [(n, e) for n, e, r in producer_loops if r]
    for (n, e), src in zip(spatial, c_splits, strict=True):
        p.follows[split_loop(p, producer, n, e, 2)] = src
    for n, e in reduce:
        split_loop(p, producer, n, e, 2)
    p.add(ReorderStep(producer, tuple(level(reduce, 0) + level(spatial, 0) + level(reduce, 1)
                                      + level(spatial, 1))))
    p.role[producer], p.role[consumer] = "fused", "tiled"
    p.annotations.append((consumer, level(c_spatial, 0), level(c_spatial, 3)[-1:]))
    p.annotations.append((producer, [], level(spatial, 1)[-1:]))
    p.rules.append(f"{producer}: multi-level tiling fused into {consumer}")
    return p


def _cache_write_and_tile(p: PartialSketch, op) -> PartialSketch:
    """A ``local`` write cache of output ``op`` computes, tiled and fused into ``op``."""
    name = p.dag.stage_name(op)
    step = CacheWriteStep(name)
    p.add(step)
    loops = root_loops(op)
    p.loops[name] = [x for x in loops if not x[2]]
    p.role[name] = "skip"
    p.rules.append(f"{name}: cache write")
    return _tile_with_fusion(p, step.new_stage, loops, name)


def _finish(p: PartialSketch, budget: CPUBudget) -> Sketch:
    """Add the annotation steps: parallel outer loops, unroll pragma, vectorize; a split
    whose innermost level is vectorized draws it as a multiple of the vector lanes
    (:attr:`Sketch.vector_lanes`), each multi-level tiling keeps its innermost tile
    within ``budget`` (:func:`_tile_limits`), and its unroll pragma unrolls at most
    :data:`MAX_UNROLLED_VECTORS` vector statements (:attr:`Sketch.unroll_limits`)."""
    lanes = budget.lanes
    vector_lanes, unroll_limits = {}, []
    for stage, outer, inner in p.annotations:
        pragma = _parallel(p, stage, outer, pragma=True)
        for name in inner:
            p.add(AnnotationStep(stage, name, "vectorize"))
            split = _innermost_split(p, stage, name)
            if split is None:
                continue
            source = p.follows.get(split, split)
            vector_lanes[source] = lanes
            if pragma is not None:
                unroll_limits.append((pragma, source, lanes, MAX_UNROLLED_VECTORS))
    for stage, role in p.role.items():
        if role == "skip":
            vector_lanes.update(_annotate_skipped(p, stage, lanes))
    limits, floors = _tile_limits(p, budget, vector_lanes)
    return Sketch(p.steps, p.follows, p.rules, limits=limits, vector_lanes=vector_lanes,
                  unroll_limits=unroll_limits, floors=floors, pure_stages=_pure_stages(p))


def _pure_stages(p: PartialSketch) -> frozenset[str]:
    """The stages of ``p`` that compute each element once from their inputs: compute
    operations without reduction (not rfactor'ed), and the copy-out stage a cache write
    leaves."""
    written = {s.stage for s in p.steps if isinstance(s, CacheWriteStep)}
    reducing = {s.stage for s in p.steps if isinstance(s, RfactorStep)}
    elementwise = {p.dag.stage_name(op) for op in p.dag.compute_ops if not op.reduce_axis}
    return frozenset((elementwise - reducing) | written)


def _annotate_skipped(p: PartialSketch, stage: str, lanes: int) -> dict[int, int]:
    """Parallel outer loops and a vectorized last loop for a skipped stage: its last loop
    as it is when at most :data:`MAX_VECTORIZE_EXTENT` long, else split in two, the inner
    part (whole vectors of ``lanes``) vectorized, the outer one fused into the parallel
    loop; a stage with a reduction loop runs its spatial loops in parallel only. Returns
    the ``vector_lanes`` of the split it adds."""
    loops = p.loops[stage]
    spatial = [(n, e) for n, e, r in loops if not r]
    names = [n for n, _ in spatial]
    if not spatial or len(spatial) < len(loops):
        _parallel(p, stage, names, pragma=False)
        return {}
    last, extent = spatial[-1]
    if extent > MAX_VECTORIZE_EXTENT and extent % lanes == 0:
        split = split_loop(p, stage, last, extent, 2)
        _parallel(p, stage, [*names[:-1], f"{last}.0"], pragma=False)
        p.add(AnnotationStep(stage, f"{last}.1", "vectorize"))
        return {split: lanes}
    if len(spatial) > 1 and extent <= MAX_VECTORIZE_EXTENT:
        _parallel(p, stage, names[:-1], pragma=False)
        p.add(AnnotationStep(stage, last, "vectorize"))
    else:
        _parallel(p, stage, names, pragma=False)
    return {}


def _tile_limits(p: PartialSketch, budget: CPUBudget, vector_lanes: dict[int, int]
                 ) -> tuple[list, list]:
    """The limits and floors of every stage tiled ``S0 S1 S2 S3`` (its spatial splits in
    four): its ``S3`` tile (the vectorized length in whole vectors, ``vector_lanes``) at
    most ``budget.register_tile`` vector registers, its ``S2 S3`` tile at most
    ``budget.cache_tile`` elements; filled (the floors), its ``S3`` tile at least half the
    registers (the hand schedules' register block of vector accumulators) and its ``S0``
    product (the parallel loop) ``budget.cores``."""
    by_stage: dict[str, list[int]] = {}
    for i, s in enumerate(p.steps):
        if isinstance(s, SplitStep) and len(s.lengths) == 3 and i not in p.follows:
            by_stage.setdefault(s.stage, []).append(i)
    limits, floors = [], []
    for splits in by_stage.values():
        registers = tuple((i, 3, vector_lanes[i]) if i in vector_lanes else (i, 3)
                          for i in splits)
        limits.append((registers, budget.register_tile))
        limits.append((tuple((i, k) for i in splits for k in (2, 3)), budget.cache_tile))
        floors.append((registers, budget.register_tile // 2))
        floors.append((tuple((i, 0) for i in splits), budget.cores))
    return limits, floors


def _innermost_split(p: PartialSketch, stage: str, loop: str) -> int | None:
    """The split step whose innermost level is ``stage``'s loop ``loop``, or None."""
    return p.splits.get((stage, loop))


def _parallel(p: PartialSketch, stage: str, outer: list[str], pragma: bool) -> int | None:
    """Fuse the loops ``outer`` of ``stage``, run the result in parallel and, with
    ``pragma``, put an open ``auto_unroll_max_step`` on it; the pragma's step, if any."""
    if not outer:
        return None
    name = _fuse(p, stage, outer)
    p.add(AnnotationStep(stage, name, "parallel"))
    return p.add(PragmaStep(stage, name, None)) if pragma else None


def _fuse(p: PartialSketch, stage: str, loops: list[str]) -> str:
    """Fuse the adjacent ``loops`` of ``stage`` (one loop stays as it is); the loop's
    name."""
    if len(loops) == 1:
        return loops[0]
    fuse = FuseStep(stage, tuple(loops))
    p.add(fuse)
    return fuse.fused_name
