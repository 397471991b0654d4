"""The machine a search task schedules for (TVM's ``auto_scheduler.HardwareParams``) and the
check that a GPU state fits it.

:class:`HardwareParams` holds the limits the GPU sketch rules and the search respect: the
threads of a block, the shared memory of a block, the virtual threads of a tile and the
warp size (what a cross-thread reduction's threads are counted in). A field left ``None``
takes the target's value (``Target("cuda").max_num_threads``, ``max_shared_memory_per_block``,
``thread_warp_size``) or Ansor's default.

:func:`fits_gpu` is TVM's ``verify_gpu_code`` for one state: the state is lowered and each
kernel's shared allocations and threads per block are added up. The search scores a state
that does not fit as ``-inf`` (:func:`hardware_check`), so it is never measured.

Guarantee: a state :func:`fits_gpu` accepts launches with at most ``max_threads_per_block``
threads and ``max_shared_memory_per_block`` bytes of static shared memory per block.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

from kiln.autotvm.measure.cuda import is_cuda_target
from kiln.driver import lower
from kiln.ir import dtype as dt
from kiln.ir.expr import IntImm
from kiln.ir.functor import post_order_visit
from kiln.ir.stmt import Allocate, AttrStmt, IRModule
from kiln.target import Target
from kiln.tir.stmt_functor import pre_order_visit

from .compute_dag import ComputeDAG
from .loop_state import State

__all__ = ["HardwareParams", "fits_gpu", "hardware_check", "kernel_resources"]

#: Ansor's ``max_vthread_extent``: the most virtual threads a tile may have
DEFAULT_MAX_VTHREAD_EXTENT = 8


@dataclass(frozen=True)
class HardwareParams:
    """TVM's ``auto_scheduler.HardwareParams``; kiln's GPU rules read the last five
    fields, the CPU rules read their facts from ``kiln.target``."""

    num_cores: int | None = None
    vector_unit_bytes: int | None = None
    cache_line_bytes: int | None = None
    max_shared_memory_per_block: int | None = None
    max_local_memory_per_block: int | None = None
    max_threads_per_block: int | None = None
    max_vthread_extent: int | None = None
    warp_size: int | None = None
    target: object = None
    target_host: object = None

    def for_target(self, target) -> HardwareParams:
        """These parameters with every GPU limit left ``None`` taken from ``target``."""
        tgt = Target(str(self.target or target))
        return replace(
            self,
            max_shared_memory_per_block=(self.max_shared_memory_per_block
                                         or tgt.max_shared_memory_per_block),
            max_threads_per_block=self.max_threads_per_block or tgt.max_num_threads,
            max_vthread_extent=self.max_vthread_extent or DEFAULT_MAX_VTHREAD_EXTENT,
            warp_size=self.warp_size or tgt.thread_warp_size)


def kernel_resources(mod: IRModule) -> list[tuple[int, int]]:
    """``(shared bytes, threads per block)`` of each kernel of the lowered ``mod`` (a kernel
    is an outermost ``blockIdx`` loop; its threads are the product of its ``threadIdx``
    extents, its shared bytes the sum of its constant ``shared`` allocations)."""
    kernels: list[tuple[int, int]] = []

    def visit(node) -> bool:
        if _binds(node, "blockIdx"):
            kernels.append(_one_kernel(node))
            return False
        return True

    for _, func in mod.items():
        pre_order_visit(func.body, visit)
    return kernels


def _binds(node, prefix: str) -> bool:
    """Whether ``node`` is the thread extent of a thread axis named ``prefix...``."""
    return (isinstance(node, AttrStmt) and node.attr_key == "thread_extent"
            and str(node.node.var.name).startswith(prefix))


def _one_kernel(kernel) -> tuple[int, int]:
    """``(shared bytes, threads per block)`` of one kernel (its ``blockIdx`` extent)."""
    shared, threads = 0, {}

    def visit(node) -> None:
        nonlocal shared
        if isinstance(node, Allocate) and node.scope == "shared":
            sizes = [e.value for e in node.extents if isinstance(e, IntImm)]
            shared += math.prod(sizes) * dt.itemsize(node.dtype)
        elif _binds(node, "threadIdx") and isinstance(node.value, IntImm):
            threads[node.node.var.name] = max(threads.get(node.node.var.name, 1),
                                              node.value.value)

    post_order_visit(kernel, visit)
    return shared, math.prod(threads.values())


def fits_gpu(dag: ComputeDAG, state: State, params: HardwareParams) -> bool:
    """Whether every kernel of ``state`` keeps ``params``' shared memory and thread limits
    (``params`` filled, :meth:`HardwareParams.for_target`)."""
    mod = lower(*dag.apply_steps_from_state(state))
    return all(shared <= params.max_shared_memory_per_block
               and threads <= params.max_threads_per_block
               for shared, threads in kernel_resources(mod))


def hardware_check(task) -> Callable[[State], bool]:
    """The check a search of ``task`` applies to each state before scoring it:
    :func:`fits_gpu` with the task's hardware parameters on a CUDA target, none on a CPU."""
    if not is_cuda_target(task.target):
        return lambda state: True
    params = (task.hardware_params or HardwareParams()).for_target(task.target)
    return lambda state: fits_gpu(task.compute_dag, state, params)
