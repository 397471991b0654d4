"""GPU sketches (``target="cuda"``): Ansor's rules for a GPU's blocks, threads and memories.

The rules visit the compute stages from the outputs back to the inputs, as the CPU rules
of :mod:`.sketch` do, and give one sketch:

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
* **skip**: any other stage fuses its spatial loops, splits them in two and binds the
  outer part to ``blockIdx.x`` and the inner to ``threadIdx.x``; its reduction loops run
  in each thread.

:func:`reference_state` is the simplest GPU schedule of a DAG (every stage a kernel of one
thread per output element): what a GPU task's candidates are checked against, since the
unscheduled computation does not run on a GPU.

A sketch limits its tile sizes (:attr:`.sketch.Sketch.limits`): the threads of a block are
at most the target's ``max_num_threads``, the virtual threads at most
:data:`MAX_VTHREAD_EXTENT`. Shared memory per block is not limited here: a state that needs
more than the GPU has fails its build or its run, as one failed trial.
"""

from __future__ import annotations

import math

from kiln.target import Target

from .compute_dag import ComputeDAG
from .loop_state import (
    THREAD_AXES,
    AnnotationStep,
    CacheReadStep,
    CacheWriteStep,
    ComputeAtStep,
    ComputeInlineStep,
    FuseStep,
    ReorderStep,
    SplitStep,
    State,
)
from .sketch import PartialSketch, Sketch, fusable_consumer, root_loops, split_loop

__all__ = ["generate_gpu_sketches", "reference_state", "MAX_VTHREAD_EXTENT"]

#: the most virtual threads a tile may have (Ansor's ``max_vthread_extent``)
MAX_VTHREAD_EXTENT = 8
#: the most threads a block of :func:`reference_state` has
REFERENCE_THREADS = 64


def generate_gpu_sketches(dag: ComputeDAG, target: str = "cuda") -> list[Sketch]:
    """The GPU sketch of ``dag`` (module docstring) for ``target``'s thread limit."""
    p = PartialSketch(dag)
    max_threads = int(Target(str(target)).max_num_threads)
    for op in reversed(dag.compute_ops):
        _expand(p, op, max_threads)
    for name, role in p.role.items():
        if role == "skip":
            _bind_flat(p, name, max_threads)
    return [Sketch(p.steps, p.follows, p.rules, p.fused_follows, p.limits)]


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


def _expand(p: PartialSketch, op, max_threads: int) -> None:
    """Apply the rule that fits ``op``."""
    dag = p.dag
    name = dag.stage_name(op)
    if dag.is_inlinable(op) and not dag.has_data_reuse(op):
        p.add(ComputeInlineStep(name))
        p.role[name] = "inline"
        p.rules.append(f"{name}: inline")
        return
    inputs = list(dict.fromkeys(t.op.name for t in op.input_tensors))
    if dag.has_data_reuse(op):
        consumer = fusable_consumer(p, op)
        if consumer is not None:
            _tile(p, name, root_loops(op), dag.stage_name(consumer), inputs, max_threads)
            return
        step = CacheWriteStep(name)
        p.add(step)
        loops = root_loops(op)
        p.loops[name] = [x for x in loops if not x[2]]
        p.rules.append(f"{name}: cache write")
        _tile(p, step.new_stage, loops, name, inputs, max_threads)
        return
    p.role[name] = "skip"
    p.loops[name] = root_loops(op)
    p.rules.append(f"{name}: skip")


def _tile(p: PartialSketch, producer: str, producer_loops: list, consumer: str, inputs: list,
          max_threads: int) -> None:
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
    p.limits.append((tuple((s, 1) for s in c_splits), MAX_VTHREAD_EXTENT))
    p.limits.append((tuple((s, 2) for s in c_splits), max_threads))
    p.add(ComputeAtStep(producer, consumer, bound[2]))
    spatial = [(n, e) for n, e, r in producer_loops if not r]
    reduce = [(n, e) for n, e, r in producer_loops if r]
    for (n, e), src in zip(spatial, c_splits, strict=True):
        p.follows[split_loop(p, producer, n, e, 2)] = src
    for n, e in reduce:
        split_loop(p, producer, n, e, 3)
    p.add(ReorderStep(producer, tuple(level(reduce, 0) + level(reduce, 1) + level(spatial, 0)
                                      + level(reduce, 2) + level(spatial, 1))))
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


def _bind_flat(p: PartialSketch, name: str, max_threads: int) -> None:
    """Fuse the spatial loops of skipped stage ``name``, split them in two and bind the
    parts to ``blockIdx.x`` and ``threadIdx.x``."""
    spatial = [(n, e) for n, e, r in p.loops[name] if not r]
    fused = _fuse(p, name, [n for n, _ in spatial])
    split = split_loop(p, name, fused, math.prod(e for _, e in spatial), 2)
    p.limits.append((((split, 1),), max_threads))
    p.add(AnnotationStep(name, f"{fused}.0", "blockIdx.x"))
    p.add(AnnotationStep(name, f"{fused}.1", "threadIdx.x"))


def _fuse(p: PartialSketch, stage: str, names: list[str]) -> str:
    """The loop of ``stage`` that ``names`` become: fused when there are several."""
    if len(names) == 1:
        return names[0]
    step = FuseStep(stage, tuple(names))
    p.add(step)
    return step.fused_name
