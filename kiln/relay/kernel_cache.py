"""``relay.build``'s CPU kernels: compiled apart, side by side, and cached by what
determines their code.

Each kernel of a graph of static shapes (a fused or horizontal group) gets a *key* before
anything is scheduled: the hash of the group's operators with their attributes, the shapes,
dtypes and layouts of its values and which of them are its inputs and outputs; the target
(its string, the CPU facts the schedules read, the threads they plan for); the PassContext
(opt level, required and disabled passes, config); and kiln's own source. The object file
of the kernel's C translation unit is cached under that key, the compiler and its flags
(:func:`kiln.runtime.compiler.object_entry`), with a record of its schedule, its source
and the CPU seconds its lowering took.
What this module guarantees:

* A kernel whose key is cached is not scheduled, lowered nor compiled: its object is linked
  as it is. A damaged entry is a miss (``compile_cache`` checks it), built again.
* The others are lowered in turn, each one's compiler running while the next is lowered
  (:func:`kiln.runtime.compiler.compile_jobs` compilers side by side).
* A kernel is compiled as the symbol ``kiln_k<key[:16]>``, so models that share a kernel
  share its object; the library exports it under ``relay.build``'s name of the kernel. The
  library is cached under its objects' keys: rebuilding a model runs no compiler.
* Where the key cannot tell everything that determines the code (inside an autotvm or
  auto_scheduler dispatch context; a PassContext config or operator attribute that is not
  plain data, such as a user pass; ``KILN_KERNEL_CACHE=0``), kernels are lowered and
  compiled every time, their objects cached under their source only; so are they when a
  compute or schedule function of the strategy is not kiln's own (replaced in the process:
  a user's override, a test's monkeypatch).
* Horizontal fusion's measure of a fused group, its work
  (:func:`.horizontal_fusion.group_work`, which builds the group's te compute), is cached
  under the group's key too (:func:`cached_group_work`): a cached rebuild builds no te
  compute at all.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from kiln import topi
from kiln.auto_scheduler.dispatcher import DispatchContext as AutoSchedulerContext
from kiln.autotvm.task.dispatcher import DispatchContext, FallbackContext
from kiln.codegen.backend import backend_for
from kiln.driver.build import target_phases
from kiln.ir.transform import PassContext
from kiln.runtime.compile_cache import CacheEntry, build, cache_entry, lookup_info
from kiln.runtime.compiler import cache_dir, compile_jobs, compile_object, object_entry
from kiln.runtime.module import Module
from kiln.target import Target, current_cpu
from kiln.topi.x86._common import num_threads

from . import strategy
from .fingerprint import NotPlainData, fingerprint
from .graph import Node
from .horizontal_fusion import Kernel, group_work
from .op import OPS
from .strategy import Implementation, external_inputs, select_implementations
from .transform import Group

__all__ = ["CompiledKernel", "build_kernels", "cached_group_work", "kernel_key", "cache_enabled"]

#: the functions of :mod:`.strategy` that choose a kernel's compute and schedule
_STRATEGY_HOOKS = ("select_implementations", "select_implementation", "schedule_branches",
                   "schedule_group", "schedule_from_history", "cuda_schedule")
#: the environment variable that turns the kernel cache off (``0``)
ENV = "KILN_KERNEL_CACHE"
_KILN_ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class CompiledKernel:
    """One packed function of ``relay.build``'s library: its name, the group it computes
    (its arguments: the group's external ``inputs``, then its outputs) and the schedule that
    made it (``tuned``: the tuning record's label, if one chose it)."""

    name: str
    group: Kernel
    inputs: list[Node]
    schedule_name: str
    tuned: str | None = None

    @staticmethod
    def of(impl: Implementation) -> CompiledKernel:
        return CompiledKernel(impl.func.name, impl.group, impl.inputs, impl.schedule_name,
                              impl.tuned)


def cache_enabled() -> bool:
    """Whether kernels are looked up by their key (``KILN_KERNEL_CACHE`` is not ``0``)."""
    return os.environ.get(ENV, "").strip() != "0"


def build_kernels(kernels: list[Kernel], names: list[str], target: Target
                  ) -> tuple[Module, list[CompiledKernel]]:
    """The loaded library of ``kernels`` for the CPU ``target`` (inside ``with target:``),
    the packed function of ``kernels[k]`` named ``names[k]`` (``<name>_<j>`` for the groups
    of a horizontal group that got a kernel each), and those functions in run order."""
    backend = backend_for(target)
    flags = backend.flags(target)
    context = _context_key(target)
    records: dict[str, tuple[CacheEntry, dict]] = {}  # by the entry's key: linked once
    aliases: dict[str, str] = {}
    compiled: list[CompiledKernel] = []
    with ThreadPoolExecutor(max_workers=compile_jobs()) as pool:
        builds: list[Future[str]] = []
        for kernel, name in zip(kernels, names, strict=True):
            key = kernel_key(kernel, context)
            entry = object_entry(key, flags=flags, name=name) if key else None
            info, inputs = _cached_record(entry, records), None
            if info is None:  # lowered now, compiled while the next kernel is lowered
                info, inputs = _lower(kernel, f"kiln_k{key[:16]}" if key else name, target)
                entry = entry or object_entry(_sha256(info["source"]), flags=flags, name=name)
                if entry.key not in records:
                    builds.append(pool.submit(compile_object, entry, info["source"],
                                              flags=flags, info=info))
            records.setdefault(entry.key, (entry, info))
            for k, fn in enumerate(info["functions"]):
                aliases[name + fn["suffix"]] = info["symbol"] + fn["suffix"]
                compiled.append(_compiled(kernel, name, fn, inputs[k] if inputs else None))
        for b in builds:
            b.result()  # a compiler error propagates
    return backend.link([e for e, _ in records.values()], aliases,
                        [r["source"] for _, r in records.values()], names[0], target), compiled


def cached_group_work(target: Target) -> Callable[[Group], int | None]:
    """:func:`.horizontal_fusion.group_work` on ``target`` (under the current PassContext
    and target), looked up in the cache under the group's key and recorded there when
    computed; computed every time for a group that cannot be keyed."""
    context = _context_key(target)

    def work(group: Group) -> int | None:
        key = kernel_key(group, context)
        if key is None:
            return group_work(group)
        entry = cache_entry(cache_dir(), "kiln_work", key, ".txt")
        info = lookup_info(entry)
        if info is not None and "work" in info:
            return info["work"]
        value = group_work(group)
        build(entry, lambda _, out: out.write_text(json.dumps(value)), {"work": value})
        return value

    return work


def _cached_record(entry: CacheEntry | None, records: dict[str, tuple[CacheEntry, dict]]
                   ) -> dict | None:
    """The record of the kernel of ``entry``: this build's, else the cache's; None for a
    kernel without a key or not cached (or damaged)."""
    if entry is None:
        return None
    if entry.key in records:
        return records[entry.key][1]
    info = lookup_info(entry)
    return info if info and {"symbol", "source", "functions"} <= info.keys() else None


def _lower(kernel: Kernel, symbol: str, target: Target) -> tuple[dict, list[list[Node]]]:
    """The record of ``kernel`` scheduled, lowered and written as C now, its packed
    function named ``symbol``: the symbol, the C source, the CPU seconds this took
    (``lower_seconds``, this thread's: the compilers running meanwhile are not counted) and
    each function's name suffix, group (-1: the whole kernel) and schedule; and each
    function's input nodes (a weight an auto_scheduler state re-laid out is a new
    constant)."""
    start = time.thread_time()
    backend = backend_for(target)
    impls = select_implementations(kernel, symbol, target)
    source = backend.kernel_source(target_phases([i.func for i in impls], backend), target)
    groups = getattr(kernel, "groups", [])
    return {"symbol": symbol, "source": source,
            "lower_seconds": round(time.thread_time() - start, 4), "functions": [
        {"suffix": impl.func.name[len(symbol):],
         "group": next((k for k, g in enumerate(groups) if g is impl.group), -1),
         "schedule": impl.schedule_name, "tuned": impl.tuned} for impl in impls]}, \
        [impl.inputs for impl in impls]


def _compiled(kernel: Kernel, name: str, fn: dict, inputs: list[Node] | None = None
              ) -> CompiledKernel:
    """The packed function ``fn`` of a kernel's record, in the graph where ``kernel`` is
    named ``name``; its arguments ``inputs`` (as lowered now), else its group's external
    inputs (a cached record)."""
    group = kernel if fn["group"] < 0 else kernel.groups[fn["group"]]
    return CompiledKernel(name + fn["suffix"], group, inputs or external_inputs(group),
                          fn["schedule"], fn["tuned"])


def kernel_key(kernel: Kernel, context: str | None) -> str | None:
    """The hex key of ``kernel`` under ``context`` (:func:`_context_key`), or None when
    either cannot be keyed."""
    if context is None:
        return None
    try:
        return _sha256(fingerprint([context, _signature(kernel)]))
    except NotPlainData:
        return None


def _signature(kernel: Kernel) -> list:
    """What the compute of ``kernel`` is made of, without node identities: its inputs, its
    operators (each input named by its position), its outputs and branches."""
    inputs = external_inputs(kernel)
    position = {n.uid: k for k, n in enumerate([*inputs, *kernel.nodes])}
    values = [["input", list(n.shape), n.dtype, n.layout] for n in inputs]
    values += [[n.op, n.attrs, [position[i.uid] for i in n.inputs], list(n.shape), n.dtype,
                n.layout] for n in kernel.nodes]
    branches = [[position[n.uid] for n in g.nodes] for g in getattr(kernel, "groups", [])]
    return [type(kernel).__name__, values, [position[o.uid] for o in kernel.outputs], branches,
            getattr(kernel, "anchor_pattern", None)]


def _context_key(target: Target) -> str | None:
    """What, besides a kernel's own operators, determines its code; None inside a tuning
    context, with a config that is not plain data, or when the cache is off."""
    ctx = PassContext.current()
    if (not cache_enabled() or not isinstance(DispatchContext.current(), FallbackContext)
            or AutoSchedulerContext.current is not None
            or ctx.config.get("relay.backend.use_auto_scheduler")):
        return None
    try:
        return fingerprint([kiln_source_hash(), _hook_names(), str(target), repr(current_cpu()),
                            num_threads(), ctx.opt_level, sorted(ctx.required_pass),
                            sorted(ctx.disabled_pass), ctx.config])
    except NotPlainData:
        return None


def _hook_names() -> list[str]:
    """The functions the op strategy computes and schedules with, by module, name and line
    (kiln's source hash covers their code); NotPlainData when one is not kiln's
    (replaced in this process: a user's override, a test's monkeypatch)."""
    hooks = [getattr(strategy, name) for name in _STRATEGY_HOOKS]
    hooks += [topi.x86.schedule_auto, topi.generic.schedule_auto]
    hooks += [compute for _, (compute, *_) in sorted(OPS.items())]
    names = []
    for f in hooks:
        module = getattr(f, "__module__", None) or ""
        if not module.startswith("kiln."):
            raise NotPlainData(f"{module}.{getattr(f, '__qualname__', f)}")
        line = getattr(getattr(f, "__code__", None), "co_firstlineno", "")
        names.append(f"{module}.{f.__qualname__}:{line}")
    return names


@functools.cache
def kiln_source_hash() -> str:
    """The hash of kiln's Python and C source files (read once per process)."""
    h = hashlib.sha256()
    for path in sorted(p for p in _KILN_ROOT.rglob("*") if p.suffix in (".py", ".h", ".c")):
        h.update(str(path.relative_to(_KILN_ROOT)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8", "surrogateescape")).hexdigest()
