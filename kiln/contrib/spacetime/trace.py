"""The exact memory accesses of a schedule, in execution order.

:func:`trace` lowers a schedule (or takes a lowered function), binds its symbolic shapes and
interprets the loop program (:mod:`.interpreter`). The result, a :class:`Trace`, holds one
event per element accessed, as numpy columns:

* ``step``: the memory instruction's place in time (vector lanes and the threads of a warp
  share it; the threads of a ``parallel`` loop count from the loop's start side by side);
* ``block``, ``thread``: the GPU block and linearized ``threadIdx`` (on a CPU the block is 0
  and the thread is the OpenMP thread);
* ``buffer`` (an index into :attr:`Trace.buffers`), ``offset`` (in elements), ``write``.

Events are sorted by step; within a step, by the order the program makes them.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

import numpy as np

from kiln.ir import dtype as dt
from kiln.ir import expr as E
from kiln.ir import stmt as S
from kiln.tir.stmt_functor import pre_order_visit

from .interpreter import Access, Interpreter, Recorder, StopTrace, thread_extents

_COLUMNS = ("step", "block", "thread", "buffer", "offset", "write")


@dataclass(frozen=True)
class BufferInfo:
    """A buffer the program touches: its name, element size and memory scope."""

    name: str
    itemsize: int
    scope: str
    var: E.Var = field(compare=False, repr=False)


class Event(NamedTuple):
    """One element accessed: ``thread`` is ``(block, thread)`` in a GPU trace."""

    step: int
    thread: int | tuple[int, int]
    buffer: str
    offset: int
    write: bool


@dataclass
class Trace:
    """The accesses of one run (module docstring); ``truncated`` when ``max_events`` ended
    it early."""

    buffers: list[BufferInfo]
    columns: dict[str, np.ndarray]
    gpu: bool
    truncated: bool = False

    def __len__(self) -> int:
        return len(self.columns["step"])

    @property
    def step(self) -> np.ndarray:
        return self.columns["step"]

    @property
    def block(self) -> np.ndarray:
        return self.columns["block"]

    @property
    def thread(self) -> np.ndarray:
        return self.columns["thread"]

    @property
    def buffer(self) -> np.ndarray:
        return self.columns["buffer"]

    @property
    def offset(self) -> np.ndarray:
        return self.columns["offset"]

    @property
    def write(self) -> np.ndarray:
        return self.columns["write"]

    def __iter__(self) -> Iterator[Event]:
        c = self.columns
        names = [b.name for b in self.buffers]
        for step, block, thread, buf, off, write in zip(*(c[k].tolist() for k in _COLUMNS),
                                                         strict=True):
            who = (block, thread) if self.gpu else thread
            yield Event(step, who, names[buf], off, bool(write))

    def buffer_index(self, name: str) -> int:
        for i, b in enumerate(self.buffers):
            if b.name == name:
                return i
        raise KeyError(f"no buffer {name!r} in the trace (has {[b.name for b in self.buffers]})")

    def select(self, keep: np.ndarray) -> Trace:
        """The events where ``keep`` (a boolean column) holds."""
        return Trace(self.buffers, {k: v[keep] for k, v in self.columns.items()}, self.gpu,
                     self.truncated)


class _Collector(Recorder):
    """Turns each flat run's accesses into event columns, keeping the window and samples."""

    def __init__(self, buffer_ids: dict[E.Var, int], window: tuple[int, int] | None,
                 sample: int, max_events: int):
        super().__init__()
        self.buffer_ids = buffer_ids
        self.start, self.stop = window if window is not None else (0, None)
        self.sample = sample
        self.max_events = max_events
        self.count = 0
        self.truncated = False
        self.chunks: list[dict[str, np.ndarray]] = []

    def record(self, accesses: list[Access]) -> None:
        if not accesses:
            return
        shapes = [np.broadcast_shapes(np.shape(a.offset), np.shape(a.mask), (1, 1, 1))
                  for a in accesses]
        n_iter = max(s[0] for s in shapes)
        n_thr = max(s[1] for s in shapes)
        n_vec = max(s[2] for s in shapes)
        offsets = np.zeros((n_iter, len(accesses), n_thr, n_vec), dtype=np.int64)
        masks = np.zeros(offsets.shape, dtype=bool)
        for k, (a, s) in enumerate(zip(accesses, shapes, strict=True)):
            full = (n_iter, n_thr, s[2])
            offsets[:, k, :, :s[2]] = np.broadcast_to(a.offset, full)
            masks[:, k, :, :s[2]] = np.broadcast_to(a.mask, full)
        active = masks.any(axis=(2, 3))
        steps = self.step + np.cumsum(active.ravel()).reshape(active.shape) - 1
        self.step += int(active.sum())
        steps = np.broadcast_to(steps[:, :, None, None], masks.shape)
        keep = masks & (steps >= self.start)
        if self.stop is not None:
            keep &= steps < self.stop
        if self.sample > 1:
            keep &= steps % self.sample == 0
        if keep.any():
            self._append(accesses, keep, steps, offsets)
        if self.stop is not None and self.step >= self.stop:
            raise StopTrace

    def _append(self, accesses, keep, steps, offsets) -> None:
        _, k, t, _ = np.nonzero(keep)
        bufs = np.array([self.buffer_ids[a.buffer] for a in accesses], dtype=np.int32)
        writes = np.array([a.write for a in accesses], dtype=bool)
        chunk = {"step": steps[keep], "block": np.full(len(k), self.block, dtype=np.int64),
                 "thread": np.broadcast_to(self.thread_ids, keep.shape[2:3])[t],
                 "buffer": bufs[k], "offset": offsets[keep], "write": writes[k]}
        room = self.max_events - self.count
        if len(k) > room:
            chunk = {name: col[:room] for name, col in chunk.items()}
            self.truncated = True
        self.chunks.append(chunk)
        self.count += min(len(k), room)
        if self.truncated:
            raise StopTrace

    def columns(self) -> dict[str, np.ndarray]:
        if not self.chunks:
            empty = {"write": bool, "buffer": np.int32}
            return {k: np.zeros(0, dtype=empty.get(k, np.int64)) for k in _COLUMNS}
        cols = {k: np.concatenate([c[k] for c in self.chunks]) for k in _COLUMNS}
        order = np.argsort(cols["step"], kind="stable")
        return {k: v[order] for k, v in cols.items()}


def trace(func, args: Sequence | None = None, *, shapes: Mapping | None = None,
          num_threads: int | None = None, max_events: int = 10_000_000,
          window: tuple[int, int] | None = None, sample: int = 1) -> Trace:
    """The memory accesses of ``func`` (a ``te.Schedule`` with its ``args``, an IRModule or a
    PrimFunc from ``kiln.lower``) in execution order.

    ``shapes`` gives symbolic dimensions (``{"n": 64}`` or ``{n_var: 64}``); ``num_threads``
    the OpenMP threads of ``parallel`` loops (default: this machine's cores). ``window=(start,
    stop)`` keeps the steps in ``[start, stop)`` and stops interpreting at ``stop``;
    ``sample=k`` keeps every k-th step; at ``max_events`` events the trace ends, marked
    ``truncated``.
    """
    prim = _primfunc(func, args)
    buffers, ids = _buffers(prim)
    env = _bind(prim, shapes or {})
    collector = _Collector(ids, window, max(1, int(sample)), max_events)
    interp = Interpreter(collector, env, num_threads or _default_threads())
    try:
        interp.run(prim.body, np.ones((1, 1, 1), dtype=bool))
    except StopTrace:
        pass
    return Trace(buffers, collector.columns(), gpu=bool(thread_extents(prim.body)),
                 truncated=collector.truncated)


def _primfunc(func, args) -> S.PrimFunc:
    from kiln.driver.lower import lower

    mod = lower(func, args)
    if isinstance(mod, S.PrimFunc):
        return mod
    funcs = list(mod.functions.values())
    if len(funcs) != 1:
        raise ValueError(f"trace takes one function, the module has {list(mod.functions)}")
    return funcs[0]


def _default_threads() -> int:
    from kiln.target.memory import host_memory

    return host_memory().cores


def _buffers(prim: S.PrimFunc) -> tuple[list[BufferInfo], dict[E.Var, int]]:
    """The function's argument buffers, then its allocations in program order."""
    infos: list[BufferInfo] = []
    for buf in prim.buffer_map.values():
        infos.append(BufferInfo(buf.name, dt.itemsize(buf.dtype), buf.scope or "global",
                                buf.data))
    scopes: dict[E.Var, str] = {}

    def visit(s) -> bool:
        if isinstance(s, S.AttrStmt) and s.attr_key == "storage_scope":
            scopes[s.node] = getattr(s.value, "value", str(s.value))
        if isinstance(s, S.Allocate):
            infos.append(BufferInfo(s.buffer_var.name, dt.itemsize(s.dtype), s.scope,
                                    s.buffer_var))
        return isinstance(s, S.Stmt)

    pre_order_visit(prim.body, visit)
    infos = [BufferInfo(b.name, b.itemsize, scopes.get(b.var, b.scope), b.var) for b in infos]
    return infos, {b.var: i for i, b in enumerate(infos)}


def _bind(prim: S.PrimFunc, shapes: Mapping) -> dict:
    """Shape variables from ``shapes`` (by Var or name); symbolic strides of argument
    buffers as a compact row-major array has them; elem_offset 0."""
    by_name = {(k if isinstance(k, str) else k.name): int(v) for k, v in shapes.items()}
    env: dict = {}

    def bind(e, value) -> None:
        if isinstance(e, E.Var) and e not in env:
            env[e] = value

    for buf in prim.buffer_map.values():
        for d in buf.shape:
            if isinstance(d, E.Var) and d.name in by_name:
                bind(d, by_name[d.name])
    for p in prim.params:
        if isinstance(p, E.Var) and p.name in by_name:
            bind(p, by_name[p.name])
    for buf in prim.buffer_map.values():
        if buf.elem_offset is not None:
            bind(buf.elem_offset, 0)
        stride = 1
        for d, s in zip(reversed(buf.shape), reversed(buf.strides or (None,) * len(buf.shape)),
                        strict=True):
            if s is not None:
                bind(s, stride)
            extent = env.get(d) if isinstance(d, E.Var) else getattr(d, "value", None)
            if extent is None:
                break
            stride *= extent
    return env
