"""``kiln spacetime script.py:function --shape N=64 --out fig.png``.

``function`` returns ``(schedule, args)``; it is called with the ``--shape`` values its
signature names (``def matmul(N): ...``), and the other values bind symbolic dimensions of
the lowered function. The command traces the schedule, writes the diagram (when ``--out`` is
given) and returns a text summary: the events, cache misses per buffer on this machine's
caches (a CPU trace) or coalescing and bank conflicts per buffer (a GPU trace).
"""

from __future__ import annotations

import importlib.util
import inspect
from collections.abc import Mapping
from pathlib import Path

from .cache import simulate
from .gpu_memory import bank_conflicts, coalescing
from .trace import Trace, trace


def parse_shapes(specs: list[str] | None) -> dict[str, int]:
    """``["N=64", "M=32"]`` -> ``{"N": 64, "M": 32}``."""
    out: dict[str, int] = {}
    for spec in specs or ():
        name, sep, value = spec.partition("=")
        if not sep or not name.strip() or not value.strip().lstrip("-").isdigit():
            raise ValueError(f"--shape takes NAME=INTEGER, got {spec!r}")
        out[name.strip()] = int(value)
    return out


def load_schedule(spec: str, shapes: Mapping[str, int]):
    """Import ``script.py`` of ``script.py:function`` and call the function with the shapes
    its signature names: its ``(schedule, args)``."""
    path, sep, name = spec.rpartition(":")
    if not sep or not path or not name:
        raise ValueError(f"expected script.py:function, got {spec!r}")
    if not Path(path).is_file():
        raise ValueError(f"no such file: {path}")
    module_spec = importlib.util.spec_from_file_location(Path(path).stem, path)
    module = importlib.util.module_from_spec(module_spec)
    module_spec.loader.exec_module(module)
    fn = getattr(module, name, None)
    if not callable(fn):
        raise ValueError(f"{path} has no function {name}")
    params = inspect.signature(fn).parameters
    result = fn(**{k: v for k, v in shapes.items() if k in params})
    if not (isinstance(result, tuple) and len(result) == 2):
        raise ValueError(f"{name} must return (schedule, args), got {type(result).__name__}")
    return result


def summary(tr: Trace) -> str:
    """The text ``kiln spacetime`` prints for a trace."""
    lines = [f"{len(tr)} accesses in {int(tr.step.max()) + 1 if len(tr) else 0} steps"
             + (" (truncated)" if tr.truncated else "")]
    if tr.gpu:
        for title, counts in (("global-memory transactions", coalescing(tr)),
                              ("shared-memory passes", bank_conflicts(tr))):
            for buf, s in counts.summary().items():
                lines.append(f"{buf}: {s['accesses']} warp accesses, {s['requests']} "
                             f"{title} ({s['per_access']:.2f} per access)")
    else:
        lines.append(simulate(tr).table())
    return "\n".join(lines)


def run(spec: str, shape_specs: list[str] | None, out: str | None = None, *,
        color: str = "access", threads: int | None = None,
        window: tuple[int, int] | None = None, sample: int = 1) -> str:
    """Trace ``script.py:function`` (module docstring); write the plot to ``out``."""
    shapes = parse_shapes(shape_specs)
    schedule, args = load_schedule(spec, shapes)
    tr = trace(schedule, args, shapes=shapes, num_threads=threads, window=window,
               sample=sample)
    if out:
        from .plot import plot

        plot(tr, out, color=color, title=spec)
    return summary(tr)
