"""The machine a search task schedules for (TVM's ``auto_scheduler.HardwareParams``) and the
check that a GPU state fits it.

:class:`HardwareParams` holds the limits the GPU sketch rules and the search respect: the
threads of a block, the shared memory of a block, the local memory of a thread, the virtual
threads of a tile and the warp size (what a cross-thread reduction's threads are counted
in). A field left ``None`` takes the target's value (``Target("cuda").max_num_threads``,
``max_shared_memory_per_block``, ``thread_warp_size``) or a default:
:data:`DEFAULT_MAX_LOCAL_MEMORY` bytes of local arrays per thread (as TVM's
``verify_gpu_code`` counts ``max_local_memory_per_block``: the local allocations one thread
makes), :data:`DEFAULT_MAX_VTHREAD_EXTENT` virtual threads.

:func:`fits_gpu` is TVM's ``verify_gpu_code`` for one state: the state is lowered and each
kernel's shared allocations, local allocations and threads per block are added up. The
search scores a state that does not fit as ``-inf`` (:func:`hardware_check`), so it is
never measured. :func:`state_resources` lowers each state of a DAG once (new states of a
batch in forked children) and remembers its kernels' resources for as long as the DAG
lives: the check and the occupancy model (:mod:`.gpu_model`) share that lowering.

Guarantee: a state :func:`fits_gpu` accepts launches with at most ``max_threads_per_block``
threads, ``max_shared_memory_per_block`` bytes of static shared memory per block and
``max_local_memory_per_block`` bytes of local arrays per thread.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import NamedTuple

from kiln.autotvm.measure.cuda import is_cuda_target
from kiln.driver import lower
from kiln.ir import dtype as dt
from kiln.ir.expr import IntImm
from kiln.ir.functor import post_order_visit
from kiln.ir.stmt import Allocate, AttrStmt, IRModule
from kiln.target import Target
from kiln.tir.stmt_functor import pre_order_visit

from .compute_dag import ComputeDAG
from .cost_model import map_states
from .loop_state import State

__all__ = ["HardwareParams", "KernelResources", "fits_gpu", "hardware_check",
           "kernel_resources", "state_resources"]

#: Ansor's ``max_vthread_extent``: the most virtual threads a tile may have
DEFAULT_MAX_VTHREAD_EXTENT = 8
#: local bytes per thread: the 255 32-bit registers a thread can have. A larger register
#: tile spills to local memory; the largest a GPU search drew on an H100 (1 MiB of
#: accumulators per thread) failed to launch.
DEFAULT_MAX_LOCAL_MEMORY = 255 * 4


@dataclass(frozen=True)
class HardwareParams:
    """TVM's ``auto_scheduler.HardwareParams``; kiln's GPU rules read ``num_cores`` (the
    SMs, :mod:`.gpu_model`) and the last six fields, the CPU rules ``vector_unit_bytes``
    where given (the width of the vectorized tiles) and their other facts from
    ``kiln.target``."""

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
            max_local_memory_per_block=(self.max_local_memory_per_block
                                        or DEFAULT_MAX_LOCAL_MEMORY),
            max_threads_per_block=self.max_threads_per_block or tgt.max_num_threads,
            max_vthread_extent=self.max_vthread_extent or DEFAULT_MAX_VTHREAD_EXTENT,
            warp_size=self.warp_size or tgt.thread_warp_size)


class KernelResources(NamedTuple):
    """What one kernel asks of the GPU: shared bytes per block, threads per block, blocks,
    and local bytes per thread."""

    shared_bytes: int
    threads: int
    blocks: int = 1
    local_bytes: int = 0


def kernel_resources(mod: IRModule) -> list[KernelResources]:
    """The :class:`KernelResources` of each kernel of the lowered ``mod`` (a kernel is an
    outermost ``blockIdx`` loop; its threads and blocks are the products of its
    ``threadIdx`` and ``blockIdx`` extents, its shared and local bytes the sums of its
    constant ``shared`` and ``local`` allocations)."""
    kernels: list[KernelResources] = []

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


def _one_kernel(kernel) -> KernelResources:
    """The resources of one kernel (its outermost ``blockIdx`` extent)."""
    scoped = {"shared": 0, "local": 0}
    extents: dict[str, dict[str, int]] = {"threadIdx": {}, "blockIdx": {}}

    def visit(node) -> None:
        if isinstance(node, Allocate) and node.scope in scoped:
            sizes = [e.value for e in node.extents if isinstance(e, IntImm)]
            scoped[node.scope] += math.prod(sizes) * dt.itemsize(node.dtype)
        for prefix, seen in extents.items():
            if _binds(node, prefix) and isinstance(node.value, IntImm):
                name = node.node.var.name
                seen[name] = max(seen.get(name, 1), node.value.value)

    post_order_visit(kernel, visit)
    return KernelResources(scoped["shared"], math.prod(extents["threadIdx"].values()),
                           math.prod(extents["blockIdx"].values()), scoped["local"])


_RESOURCES: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def state_resources(dag: ComputeDAG, states: list[State]
                    ) -> list[list[KernelResources] | None]:
    """The :class:`KernelResources` of each state's kernels (None: the state does not
    lower), each state of ``dag`` lowered once: the new ones in forked children
    (:func:`~.cost_model.map_states`), remembered while ``dag`` lives."""
    known = _RESOURCES.setdefault(dag, {})
    todo = list({s.key(): s for s in states if s.key() not in known}.values())
    for s, kernels in zip(todo, map_states(_lowered_resources, dag, todo), strict=True):
        known[s.key()] = kernels
    return [known[s.key()] for s in states]


def _lowered_resources(dag: ComputeDAG, state: State) -> list[KernelResources] | None:
    try:
        return kernel_resources(lower(*dag.apply_steps_from_state(state)))
    except Exception:  # noqa: BLE001 - a state that does not lower fits nothing
        return None


def _within(kernels: list[KernelResources] | None, params: HardwareParams) -> bool:
    return kernels is not None and all(
        k.shared_bytes <= params.max_shared_memory_per_block
        and k.local_bytes <= params.max_local_memory_per_block
        and k.threads <= params.max_threads_per_block for k in kernels)


def fits_gpu(dag: ComputeDAG, state: State, params: HardwareParams) -> bool:
    """Whether ``state`` lowers and every kernel of it keeps ``params``' shared memory,
    local memory and thread limits (``params`` filled, :meth:`HardwareParams.for_target`)."""
    return _within(state_resources(dag, [state])[0], params)


def hardware_check(task) -> Callable[[list[State]], list[bool]]:
    """The check a search of ``task`` applies to a batch of states before scoring them:
    :func:`fits_gpu` of each with the task's hardware parameters on a CUDA target (the
    batch lowered in parallel, :func:`state_resources`), none on a CPU."""
    if not is_cuda_target(task.target):
        return lambda states: [True] * len(states)
    params = (task.hardware_params or HardwareParams()).for_target(task.target)
    return lambda states: [_within(k, params)
                           for k in state_resources(task.compute_dag, states)]
