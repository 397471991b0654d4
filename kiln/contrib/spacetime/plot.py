"""Space-time diagrams: element offset against time (step), one panel per buffer.

Each access is a dot; ``color="access"`` paints reads blue and writes red, ``color="thread"``
gives each thread (OpenMP thread, or linearized ``threadIdx`` of a GPU trace) its own colour,
the way textbooks draw several threads' streams side by side. matplotlib is an optional
dependency (``pip install matplotlib``, or kiln's ``bench`` extra); without it the functions
raise ImportError naming it.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from .trace import Trace

_READ, _WRITE = "tab:blue", "tab:red"


def _figure(**kw):
    """A matplotlib Figure (no pyplot: nothing global, no display needed)."""
    try:
        from matplotlib.figure import Figure
    except ImportError as err:
        raise ImportError("kiln.contrib.spacetime.plot needs matplotlib: pip install "
                          "matplotlib (or kiln[bench])") from err
    return Figure(**kw)


def _names(trace: Trace, buffers: Sequence[str] | None) -> list[str]:
    used = set(np.unique(trace.buffer).tolist())
    names = [b.name for i, b in enumerate(trace.buffers) if i in used]
    return names if buffers is None else [n for n in buffers if n in names]


def _panel(ax, trace: Trace, name: str, color: str) -> None:
    mine = trace.buffer == trace.buffer_index(name)
    step, offset = trace.step[mine], trace.offset[mine]
    size = float(np.clip(2000 / max(1, len(step)), 2, 12))  # bigger dots for fewer events
    if color == "thread":
        ax.scatter(step, offset, s=size, c=trace.thread[mine], cmap="tab10", linewidths=0)
    else:
        write = trace.write[mine]
        ax.scatter(step[~write], offset[~write], s=size, c=_READ, linewidths=0, label="read")
        ax.scatter(step[write], offset[write], s=size, c=_WRITE, linewidths=0, label="write")
    ax.set_ylabel(f"{name}\noffset")
    ax.margins(x=0.01, y=0.05)


def _check_color(color: str) -> None:
    if color not in ("access", "thread"):
        raise ValueError(f"color must be 'access' or 'thread', got {color!r}")


def plot(trace: Trace, path: str, *, color: str = "access", buffers: Sequence[str] | None = None,
         title: str = "") -> None:
    """Write the space-time diagram of ``trace`` to ``path`` (PNG, SVG, PDF by suffix)."""
    _check_color(color)
    names = _names(trace, buffers)
    fig = _figure(figsize=(7, 1.6 * max(1, len(names)) + 0.6))
    axes = fig.subplots(len(names) or 1, 1, sharex=True, squeeze=False)
    for ax, name in zip(axes[:, 0], names, strict=False):
        _panel(ax, trace, name, color)
    axes[-1, 0].set_xlabel("step")
    if color == "access" and names:
        axes[0, 0].legend(loc="upper right", markerscale=4, fontsize="small")
    fig.suptitle(title or f"{len(trace)} accesses" + (" (truncated)" if trace.truncated else ""))
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def plot_side_by_side(a: Trace, b: Trace, path: str, *, titles: tuple[str, str] = ("a", "b"),
                      color: str = "access", buffers: Sequence[str] | None = None) -> None:
    """Two traces (e.g. two schedules of one compute) as two columns, one row per buffer."""
    _check_color(color)
    names = _names(a, buffers)
    names += [n for n in _names(b, buffers) if n not in names]
    fig = _figure(figsize=(11, 1.6 * max(1, len(names)) + 0.6))
    axes = fig.subplots(len(names) or 1, 2, sharex="col", squeeze=False)
    for col, (t, title) in enumerate(zip((a, b), titles, strict=True)):
        axes[0, col].set_title(title)
        axes[-1, col].set_xlabel("step")
        for row, name in enumerate(names):
            if name in _names(t, None):
                _panel(axes[row, col], t, name, color)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
