"""Tuning callbacks: ``callback(tuner, inputs, results)`` after every measured batch."""

from __future__ import annotations

import os
import sys
import time

from ..record import encode

__all__ = ["log_to_file", "progress_bar"]


def log_to_file(file_out):
    """Append every measured candidate to ``file_out`` (a path or an open file) as one
    JSON line (see :mod:`kiln.autotvm.record`)."""
    def callback(tuner, inputs, results):
        if isinstance(file_out, str | bytes | os.PathLike):
            with open(os.fspath(file_out), "a", encoding="utf-8") as f:
                for inp, res in zip(inputs, results, strict=True):
                    f.write(encode(inp, res) + "\n")
        else:
            for inp, res in zip(inputs, results, strict=True):
                file_out.write(encode(inp, res) + "\n")
            file_out.flush()
    return callback


_SI = {"": 1.0, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12}


def progress_bar(total: int, prefix: str = "", si_prefix: str = "G", stream=None):
    """Print ``Current/Best: x/y GFLOPS | Progress: (i/total) | t s | ETA s`` after every
    batch, and ``Done.`` at the end."""
    if si_prefix not in _SI:
        raise ValueError(f"si_prefix must be one of {', '.join(repr(k) for k in _SI)}")
    scale = _SI[si_prefix]
    state = {"ct": 0, "cur": 0.0, "start": time.time()}  # made just before tune() starts

    def callback(tuner, inputs, results):
        out = stream or sys.stdout
        flop = tuner.task.flop
        for res in results:
            state["ct"] += 1
            state["cur"] = flop / res.cost if res.error_no == 0 and res.cost > 0 else 0.0
        elapsed = time.time() - state["start"]
        ct = state["ct"]
        eta = elapsed / ct * (total - ct) if ct else 0.0
        end = "\n" if ct >= total or not getattr(out, "isatty", lambda: False)() else "\r"
        out.write(f"{prefix}Current/Best: {state['cur'] / scale:7.2f}/"
                  f"{tuner.best_flops / scale:7.2f} {si_prefix}FLOPS | Progress: "
                  f"({ct}/{total}) | {elapsed:.2f} s | ETA {eta:.0f} s{end}")
        if ct >= total:
            out.write(f"{prefix}Done.\n")
        out.flush()
    return callback
