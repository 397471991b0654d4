"""``cache_flush_cpu_non_first_arg``: empty this CPU's caches between timed repeats.

TVM's ``time_evaluator(..., f_preproc="cache_flush_cpu_non_first_arg")`` (what
``auto_scheduler.LocalRunner(enable_cpu_cache_flush=True)`` asks for) runs this function
before each repeat, so that each measurement starts with its data in memory, as a kernel of
a network does after its neighbours evicted it. kiln evicts by writing every line of a
buffer one and a half times the size of the last-level cache, that size read from this
machine when the buffer is first needed (``kiln.target.memory.host_memory``); the buffer
is kept for the next flush (its first one also pays the page faults, about 2 s for a
720 MiB buffer). The arguments are cold afterwards too (TVM flushes them line by line; the
name is kept for its callers).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from ..target.memory import host_memory
from .registry import register_func

__all__ = ["flush_buffer_bytes", "cache_flush_cpu_non_first_arg"]


def flush_buffer_bytes() -> int:
    """Bytes written by one flush: one and a half times this machine's last-level
    cache."""
    return host_memory().caches[-1].size_bytes * 3 // 2


@functools.cache
def _buffer() -> np.ndarray:
    return np.zeros(flush_buffer_bytes() // 8, dtype=np.int64)


@register_func("cache_flush_cpu_non_first_arg")
def cache_flush_cpu_non_first_arg(*args: Any) -> None:
    """Evict the CPU caches (module docstring); ``args`` are the timed call's arguments."""
    buf = _buffer()
    buf += 1
