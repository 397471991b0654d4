"""GPU sketches (``target="cuda"``): Ansor's rules for a GPU's blocks, threads and memories.

The rules visit the compute stages from the outputs back to the inputs, as the CPU rules
of :mod:`.sketch` do:

* **inline**: an elementwise stage that is not an output is ``compute_inline``-d;
* **multi-level tiling** ``SSSRRSRS`` with a **local write cache**: a reduction with data
  reuse (GEMM, conv) that is an output computes in a ``local`` cache stage ``C.local``
  (registers). The output stage ``C`` splits each spatial loop in five and orders them
  ``S0 S1 S2 S3 S4``; its ``S0`` loops are fused and bound to ``blockIdx.x``, its ``S1``
  loops to ``vthread``, its ``S2`` loops to ``threadIdx.x``; ``C.local`` is computed at
  the thread loop, each reduction loop split in three, ordered ``R0 R1 S3 R2 S4`` (its
  ``S4`` sizes following ``C``'s);
* **fusion**: such a reduction whose only reader (through inlined stages) is an
  elementwise stage of its shape is computed at that reader's thread loop instead (the
  reader tiled and bound as ``C`` above, no cache stage);
* **shared-memory cache reads with cooperative fetching**: every input ``A`` of a tiled
  reduction is read through ``A.shared``, computed at the reduction's last ``R0`` loop;
  its loops are fused and split by the number of threads of the block, the inner part
  bound to ``threadIdx.x``, so that the block's threads fetch the tile together;
* **cross-thread reduction** (:func:`needs_cross_thread`: a reduction over more than a
  warp of elements with few outputs, or without data reuse): one block per output
  element, ``rfactor`` into one partial result per thread in shared memory, combined by
  every thread (:func:`_cross_thread`); a reduction with data reuse gets it as a second
  sketch beside the tiling;
* **skip**: any other stage fuses its spatial loops, splits them in two and binds the
  outer part to ``blockIdx.x`` and the inner to ``threadIdx.x``; its reduction loops run
  in each thread.

Annotation: the outermost reduction loop of each reduction gets an open
``auto_unroll_max_step`` pragma, drawn from :data:`GPU_UNROLL_CHOICES`.

:func:`reference_state` is the simplest GPU schedule of a DAG (every stage a kernel of one
thread per output element): what a GPU task's candidates are checked against, since the
unscheduled computation does not run on a GPU.

A sketch limits its tile sizes (:attr:`.sketch.Sketch.limits`) to the
:class:`.hardware_params.HardwareParams` (the target's where not given): the threads of a
block at most ``max_threads_per_block``, the virtual threads at most
``max_vthread_extent``. Shared memory depends on how the tiles meet the index
expressions; the search checks it on each lowered state
(:func:`.hardware_params.fits_gpu`) before measuring.
"""

from __future__ import annotations

import math

from .compute_dag import ComputeDAG
from .hardware_params import HardwareParams
from .loop_state import (
    THREAD_AXES,
    AnnotationStep,
    CacheReadStep,
    CacheWriteStep,
    ComputeAtStep,
    ComputeInlineStep,
    FuseStep,
    PragmaStep,
    ReorderStep,
    RfactorStep,
    SetScopeStep,
    SplitStep,
    State,
)
from .sketch import PartialSketch, Sketch, fusable_consumer, root_loops, split_loop

__all__ = ["generate_gpu_sketches", "reference_state", "needs_cross_thread",
           "GPU_UNROLL_CHOICES"]

#: the values of ``auto_unroll_max_step`` a GPU state picks from (Ansor's GPU choices)
GPU_UNROLL_CHOICES = (0, 16, 64, 512, 1024)
#: the most threads a block of :func:`reference_state` has
REFERENCE_THREADS = 64


def generate_gpu_sketches(dag: ComputeDAG, target: str = "cuda",
                          hardware_params: HardwareParams | None = None) -> list[Sketch]:
    """The GPU sketches of ``dag`` (module docstring) within ``hardware_params``' limits
    (the ``target``'s where a field is None)."""
    hw = (hardware_params or HardwareParams()).for_target(target)
    partials = [PartialSketch(dag)]
    for op in reversed(dag.compute_ops):
        partials = [q for p in partials for q in _expand(p, op, hw)]
    return [_finish(p, hw) for p in partials]


def reference_state(dag: ComputeDAG) -> State:
    """Every compute stage of ``dag`` its own kernel: its spatial loops fused and split by
    their largest divisor up to :data:`REFERENCE_THREADS` (the threads of a block), the
    parts bound to ``blockIdx.x`` and ``threadIdx.x``; reductions run in each thread."""
    p = PartialSketch(dag)
    for op in dag.compute_ops:
        name = dag.stage_name(op)
        spatial = [(n, e) for n, e, r in root_loops(op) if not r]
        fused = _fuse(p, name, [n for n, _ in spatial])
        extent = math.prod(e for _, e in spatial)
        threads = max(d for d in range(1, min(extent, REFERENCE_THREADS) + 1) if extent % d == 0)
        p.add(SplitStep(name, fused, extent, (threads,)))
        p.add(AnnotationStep(name, f"{fused}.0", "blockIdx.x"))
        p.add(AnnotationStep(name, f"{fused}.1", "threadIdx.x"))
    return State(p.steps)


def _expand(p: PartialSketch, op, hw: HardwareParams) -> list[PartialSketch]:
    """The partial sketches after applying every rule that fits ``op``."""
    dag = p.dag
    name = dag.stage_name(op)
    if dag.is_inlinable(op) and not dag.has_data_reuse(op):
        p.add(ComputeInlineStep(name))
        p.role[name] = "inline"
        p.rules.append(f"{name}: inline")
        return [p]
    cross_thread = needs_cross_thread(dag, op, hw.warp_size)
    if dag.has_data_reuse(op):
        tiled = _tile_or_cache_write(p.copy(), op, hw)
        return [tiled, _cross_thread(p, op, hw)] if cross_thread else [tiled]
    if cross_thread:
        return [_cross_thread(p, op, hw)]
    p.role[name] = "skip"
    p.loops[name] = root_loops(op)
    p.rules.append(f"{name}: skip")
    return [p]


def needs_cross_thread(dag: ComputeDAG, op, warp_size: int) -> bool:
    """A reduction over more than a warp of elements whose outputs alone give few threads:
    without data reuse (a row's norm, a global pooling), or with data reuse but fewer
    outputs than elements reduced into each or at most a warp of outputs (a dense layer of
    batch 1)."""
    loops = root_loops(op)
    space = math.prod(e for _, e, r in loops if not r)
    reduce = math.prod(e for _, e, r in loops if r)
    if not op.axis or not op.reduce_axis or reduce <= warp_size:
        return False
    return not dag.has_data_reuse(op) or space < reduce or space <= warp_size


def _tile_or_cache_write(p: PartialSketch, op, hw: HardwareParams) -> PartialSketch:
    """Multi-level tiling of ``op``, fused into its elementwise consumer or into the copy
    of a ``local`` write cache."""
    dag = p.dag
    name = dag.stage_name(op)
    inputs = list(dict.fromkeys(t.op.name for t in op.input_tensors))
    consumer = fusable_consumer(p, op)
    if consumer is not None:
        _tile(p, name, root_loops(op), dag.stage_name(consumer), inputs, hw)
        return p
    step = CacheWriteStep(name)
    p.add(step)
    loops = root_loops(op)
    p.loops[name] = [x for x in loops if not x[2]]
    p.rules.append(f"{name}: cache write")
    _tile(p, step.new_stage, loops, name, inputs, hw)
    return p


def _cross_thread(p: PartialSketch, op, hw: HardwareParams) -> PartialSketch:
    """One block per output element of ``op``: the block's threads each reduce a strided
    part of the reduction into shared memory (``rfactor``), then combine the parts.

    The reduction computes in a ``local`` stage ``R`` at the block loop of ``B``: ``R`` is
    ``op`` itself (``set_scope("local")``) when ``B`` is its elementwise consumer, else
    ``B`` is ``op`` and ``R`` its write cache ``C.local``. ``R``'s reduction loops are
    fused into ``r``, split ``r.0 r.1``, and ``rfactor`` over ``r.1`` makes ``R.rf``
    (shared, its axis ``r.1`` bound to ``threadIdx.x``)::

        blockIdx.x: b                                    (B's spatial loops, fused)
          threadIdx.x: r.1
            R.rf[r.1] = reduce(... for r.0)              // shared
          R = reduce(R.rf[t] for t)                      // every thread, in registers
          B[b] = epilogue(R)                             // every thread, the same value
    """
    dag = p.dag
    name = dag.stage_name(op)
    loops = root_loops(op)
    consumer = fusable_consumer(p, op)
    if consumer is not None:
        block, red = dag.stage_name(consumer), name
        p.add(SetScopeStep(name, "local"))
        rule = f"{name}: cross-thread reduction fused into {block}"
    else:
        step = CacheWriteStep(name)
        p.add(step)
        block, red = name, step.new_stage
        p.loops[name] = [x for x in loops if not x[2]]
        rule = f"{name}: cache write; {red}: cross-thread reduction"
    block_loop = _fuse(p, block, [n for n, _, r in p.loops[block] if not r])
    p.add(AnnotationStep(block, block_loop, "blockIdx.x"))
    p.add(ComputeAtStep(red, block, block_loop))
    reduce = [(n, e) for n, e, r in loops if r]
    r = _fuse(p, red, [n for n, _ in reduce])
    threads = split_loop(p, red, r, math.prod(e for _, e in reduce), 2)
    p.limits.append((((threads, 1),), hw.max_threads_per_block))
    rf = RfactorStep(red, f"{r}.1")
    p.add(rf)
    p.add(SetScopeStep(rf.new_stage, "shared"))
    p.add(ComputeAtStep(rf.new_stage, block, block_loop))
    p.add(AnnotationStep(rf.new_stage, f"{r}.1", "threadIdx.x"))
    p.annotations.append((rf.new_stage, f"{r}.0"))
    p.role[red], p.role[block] = "cross-thread", "block"
    p.rules.append(rule)
    return p


def _tile(p: PartialSketch, producer: str, producer_loops: list, consumer: str, inputs: list,
          hw: HardwareParams) -> None:
    """Tile ``consumer`` ``S0 S1 S2 S3 S4`` bound to blocks, virtual threads and threads;
    compute ``producer`` (``R0 R1 S3 R2 S4``) at its thread loop and read each of
    ``inputs`` through shared memory fetched by all threads of the block."""
    c_spatial = [(n, e) for n, e, _ in p.loops[consumer]]
    c_splits = [split_loop(p, consumer, n, e, 5) for n, e in c_spatial]
    level = lambda axes, k: [f"{n}.{k}" for n, _ in axes]  # noqa: E731
    p.add(ReorderStep(consumer, tuple(sum((level(c_spatial, k) for k in range(5)), []))))
    bound = [_fuse(p, consumer, level(c_spatial, k)) for k in range(3)]
    for loop, axis in zip(bound, THREAD_AXES, strict=True):
        p.add(AnnotationStep(consumer, loop, axis))
    p.limits.append((tuple((s, 1) for s in c_splits), hw.max_vthread_extent))
    p.limits.append((tuple((s, 2) for s in c_splits), hw.max_threads_per_block))
    p.add(ComputeAtStep(producer, consumer, bound[2]))
    spatial = [(n, e) for n, e, r in producer_loops if not r]
    reduce = [(n, e) for n, e, r in producer_loops if r]
    for (n, e), src in zip(spatial, c_splits, strict=True):
        p.follows[split_loop(p, producer, n, e, 2)] = src
    for n, e in reduce:
        split_loop(p, producer, n, e, 3)
    p.add(ReorderStep(producer, tuple(level(reduce, 0) + level(reduce, 1) + level(spatial, 0)
                                      + level(reduce, 2) + level(spatial, 1))))
    p.annotations.append((producer, level(reduce, 0)[0]))
    p.role[producer], p.role[consumer] = "fused", "tiled"
    p.rules.append(f"{producer}: multi-level tiling SSSRRSRS fused into {consumer}")
    threads = tuple((s, 2) for s in c_splits)
    for name in inputs:
        _cache_read_shared(p, name, producer, level(reduce, 0)[-1], threads)


def _cache_read_shared(p: PartialSketch, name: str, reader: str, at: str, threads: tuple) -> None:
    """``name.shared`` computed at ``reader``'s loop ``at``, fetched by ``threads`` (the
    tile levels whose product is the block's thread count) together."""
    step = CacheReadStep(name, "shared", (reader,))
    p.add(step)
    shared = step.new_stage
    tensor = next(t for t in p.dag.ops if t.name == name).output(0)
    shape = [int(d) for d in tensor.shape]
    p.add(ComputeAtStep(shared, reader, at))
    fused = _fuse(p, shared, [f"ax{d}" for d in range(len(shape))])
    p.fused_follows[split_loop(p, shared, fused, math.prod(shape), 2)] = threads
    p.add(AnnotationStep(shared, f"{fused}.1", "threadIdx.x"))
    p.rules.append(f"{name}: cache read shared at {reader}")


def _finish(p: PartialSketch, hw: HardwareParams) -> Sketch:
    """Bind the skipped stages and put an open ``auto_unroll_max_step`` on the outermost
    reduction loop of each reduction (drawn from :data:`GPU_UNROLL_CHOICES`)."""
    for name, role in p.role.items():
        if role == "skip":
            _bind_flat(p, name, hw.max_threads_per_block)
    for stage, loop in p.annotations:
        p.add(PragmaStep(stage, loop, None))
    return Sketch(p.steps, p.follows, p.rules, p.fused_follows, p.limits, GPU_UNROLL_CHOICES)


def _bind_flat(p: PartialSketch, name: str, max_threads: int) -> None:
    """Fuse the spatial loops of skipped stage ``name``, split them in two and bind the
    parts to ``blockIdx.x`` and ``threadIdx.x``; its reduction loops run in each thread."""
    spatial = [(n, e) for n, e, r in p.loops[name] if not r]
    fused = _fuse(p, name, [n for n, _ in spatial])
    split = split_loop(p, name, fused, math.prod(e for _, e in spatial), 2)
    p.limits.append((((split, 1),), max_threads))
    p.add(AnnotationStep(name, f"{fused}.0", "blockIdx.x"))
    p.add(AnnotationStep(name, f"{fused}.1", "threadIdx.x"))
    reduce = [n for n, _, r in p.loops[name] if r]
    if reduce:
        p.annotations.append((name, reduce[0]))


def _fuse(p: PartialSketch, stage: str, names: list[str]) -> str:
    """The loop of ``stage`` that ``names`` become: fused when there are several."""
    if len(names) == 1:
        return names[0]
    step = FuseStep(stage, tuple(names))
    p.add(step)
    return step.fused_name
