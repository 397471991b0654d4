"""An occupancy model of GPU states: the ranking a GPU search uses before it has learned.

``kiln.cost.estimate`` prices a loop nest as one CPU core runs it: every thread of a kernel
is a serial loop iteration, so states that differ in how work is spread over blocks,
threads and registers all cost about the same (a GPU search ranked by it measured SGEMM
1024 states with one thread per block, 25-176 ms where the hand schedule takes 0.08 ms),
and it costs seconds per state. :class:`GPUOccupancyModel` ranks a lowered GPU state
instead by what decides a kernel's speed to first order, from each kernel's blocks,
threads per block, local (register) bytes per thread and shared bytes per block
(:func:`.hardware_params.kernel_resources`):

* **the busiest SM's work**: the blocks spread over the SMs (``num_cores`` of the task's
  ``HardwareParams``, else :data:`DEFAULT_SM_COUNT`), the busiest one runs
  ``ceil(blocks / SMs)`` of them, each ``threads x`` the per-thread work (the DAG's
  floating-point operations over all threads); an SM issues a fixed number of lanes a
  cycle, so once every SM is busy more threads do not help, and too few blocks leave SMs
  idle;
* **register tiling**: times ``1 + 2 / sqrt(accumulators)`` (a register tile of ``a``
  accumulators reads about ``2 sqrt(a)`` shared operands per ``a`` multiply-adds);
* **lanes and latency**: over the share of warp lanes a block fills, and slowed where
  fewer than :data:`WARPS_TO_HIDE_LATENCY` warps per SM are resident (resident blocks per
  SM limited by 2048 threads, 32 blocks, 64 Ki registers: the local arrays plus
  :data:`BASE_REGISTERS` per thread, and the SM's shared memory).

The score is the inverse of that work; a kernel that cannot be resident (more registers
or shared memory than an SM has) scores ``-inf``. It is a ranking, not a time:
the search measures what it ranks first, and :class:`.cost_model.XGBModel` replaces it once
it has learned from measurements.
"""

from __future__ import annotations

import math

from .cost_model import CostModel
from .hardware_params import HardwareParams, KernelResources, state_resources

__all__ = ["GPUOccupancyModel", "DEFAULT_SM_COUNT"]

#: SMs assumed when the task's ``HardwareParams`` does not say (``num_cores``)
DEFAULT_SM_COUNT = 108
#: per SM: the most resident threads, blocks, 32-bit registers, shared bytes (sm_80+)
SM_THREADS, SM_BLOCKS, SM_REGISTERS, SM_SHARED_BYTES = 2048, 32, 65536, 164 * 1024
#: registers a thread needs besides its local arrays (indices, addresses, operands)
BASE_REGISTERS = 32
#: resident warps per SM below which latency shows (two per scheduler; a register tile's
#: independent multiply-adds hide the rest)
WARPS_TO_HIDE_LATENCY = 8
WARP = 32


class GPUOccupancyModel(CostModel):
    """Scores GPU states by occupancy, the busiest SM's work and register tiling (module
    docstring); each state lowered once, the lowering shared with the search's hardware
    check (:func:`.hardware_params.state_resources`)."""

    def predict(self, task, states) -> list[float]:
        sms = (task.hardware_params or HardwareParams()).num_cores or DEFAULT_SM_COUNT
        flop = max(task.compute_dag.flop_ct(), 1.0)
        return [-math.inf if kernels is None else occupancy_score(kernels, flop, sms)
                for kernels in state_resources(task.compute_dag, states)]


def occupancy_score(kernels: list[KernelResources], flop: float, sms: int) -> float:
    """The inverse of the busiest SM's work in the kernel with the most threads (the one
    that does the DAG's work; module docstring), ``-inf`` where a kernel cannot be
    resident on an SM."""
    if not kernels or any(_blocks_per_sm(k) == 0 for k in kernels):
        return -math.inf
    k = max(kernels, key=lambda r: r.blocks * r.threads)
    busiest = math.ceil(k.blocks / sms)
    accumulators = max(k.local_bytes // 4, 1)
    work = busiest * flop / k.blocks * (1 + 2 / math.sqrt(accumulators))
    warps_per_block = math.ceil(k.threads / WARP)
    lanes = k.threads / (warps_per_block * WARP)
    warps = min(_blocks_per_sm(k), busiest) * warps_per_block
    return lanes * min(1.0, warps / WARPS_TO_HIDE_LATENCY) / work


def _blocks_per_sm(k: KernelResources) -> int:
    registers = k.local_bytes // 4 + BASE_REGISTERS
    limits = [SM_BLOCKS, SM_THREADS // k.threads, SM_REGISTERS // (registers * k.threads)]
    if k.shared_bytes:
        limits.append(SM_SHARED_BYTES // k.shared_bytes)
    return max(min(limits), 0)
