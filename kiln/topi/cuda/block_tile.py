"""What the tiled CUDA templates (direct convolution, implicit-GEMM convolution, dense and
matmul) share: the register-scope accumulator of a tiled reduction, and the check of a
block against the target's thread and shared-memory limits."""

from __future__ import annotations

from kiln.target import Target
from kiln.te.tensor import Operation


def local_accumulator(s, op: Operation) -> tuple:
    """``(output, local)``: the tensor whose loops a tiled CUDA schedule binds, and the
    register-scope (``local``) tensor that accumulates ``op``'s reduction. When ``op`` is the
    schedule's output it gets a ``cache_write``; when an elementwise epilogue reads it (bias,
    relu), ``op`` itself moves to local scope and the epilogue's stage is tiled instead."""
    if op in s.outputs:
        output = op.output(0)
        return output, s.cache_write(output, "local")
    s[op].set_scope("local")
    return s.outputs[0].output(0), op.output(0)


def check_block_limits(cfg, threads: int, shared_bytes: int) -> None:
    """Reject ``cfg`` (``cfg.raise_error``) when its block needs more threads or shared memory
    than the current CUDA target has (``cuda``'s 1024 threads and 48 KB outside a target
    scope)."""
    target = Target.current()
    if target is None or target.is_cpu:
        target = Target("cuda")
    if threads > target.max_num_threads:
        cfg.raise_error(f"{threads} threads per block (at most {target.max_num_threads})")
    if shared_bytes > target.max_shared_memory_per_block:
        cfg.raise_error(f"{shared_bytes} bytes of shared memory per block "
                        f"(at most {target.max_shared_memory_per_block})")


__all__ = ["local_accumulator", "check_block_limits"]
