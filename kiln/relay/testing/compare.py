"""Compare a compiled model with onnxruntime: reference session, output differences, and
interleaved latency medians (used by ``kiln bench model.onnx`` and the demo)."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping

import numpy as np


def onnxruntime_session(model, threads: int):
    """An onnxruntime CPU session of ``model`` (a ModelProto) using ``threads`` intra-op
    threads, one inter-op thread and no spin-waiting after a run (its spinning threads would
    otherwise take the cores from a workload timed right after it)."""
    try:
        import onnxruntime as ort
    except ImportError as e:
        raise ImportError("comparing with onnxruntime needs it installed: "
                          "pip install 'kiln[onnx]'") from e
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(model.SerializeToString(), so,
                                providers=["CPUExecutionProvider"])


def differences(y: np.ndarray, ref: np.ndarray) -> dict[str, float]:
    """Max absolute difference, max relative difference (to ``max|ref|``) and ``max|ref|``."""
    if y.shape != ref.shape:
        raise ValueError(f"output shape {y.shape} differs from the reference's {ref.shape}")
    scale = float(np.abs(ref).max()) if ref.size else 0.0
    abs_diff = float(np.abs(y.astype(np.float64) - ref).max()) if ref.size else 0.0
    return {"max_abs": abs_diff, "max_rel": abs_diff / max(scale, 1e-30), "ref_max": scale}


def close(diff: Mapping[str, float], rtol: float = 1e-4) -> bool:
    """Whether outputs with these :func:`differences` agree (max abs diff ≤ rtol·max|ref|)."""
    return diff["max_abs"] <= rtol * max(diff["ref_max"], 1.0)


def interleaved_medians(fns: Mapping[str, Callable[[], object]], rounds: int = 10,
                        min_time: float = 0.05, warmup: int = 2,
                        pause: float = 0.02) -> dict[str, list[float]]:
    """Seconds per call of each function: ``warmup`` calls each, then ``rounds`` rounds in
    which every function is timed once (``number`` calls lasting at least ``min_time``), the
    order rotated each round so load changes hit all alike, with a ``pause`` (not timed)
    after each measurement so that worker threads still spinning from one (onnxruntime's
    do) do not slow down the next. Returns the per-round times; take their median."""
    names = list(fns)
    numbers = {}
    for name, f in fns.items():
        for _ in range(warmup):
            f()
        t = time.perf_counter()
        f()
        once = max(time.perf_counter() - t, 1e-9)
        numbers[name] = max(1, int(min_time / once))
    out: dict[str, list[float]] = {n: [] for n in names}
    for r in range(rounds):
        k = r % len(names)
        for name in names[k:] + names[:k]:
            f, number = fns[name], numbers[name]
            t = time.perf_counter()
            for _ in range(number):
                f()
            out[name].append((time.perf_counter() - t) / number)
            time.sleep(pause)
    return out


def median(xs) -> float:
    return statistics.median(xs)


def against_onnxruntime(factory, model, inputs: Mapping[str, np.ndarray], threads: int,
                        rounds: int = 10) -> dict:
    """Run the built ``factory`` (from ``relay.build`` or ``load_module``) and onnxruntime on
    ``inputs``, compare the first outputs, and, when they agree, time both interleaved.

    Returns ``{"output", "reference", "diff", "ok", "kiln_s", "onnxruntime_s"}`` (the times
    are per-round seconds, ``None`` when the outputs disagree)."""
    from kiln.runtime import cpu
    from kiln.runtime.graph_executor import GraphModule

    gm = GraphModule(factory["default"](cpu(0)))
    gm.set_input(**inputs)
    gm.run()
    y = gm.get_output(0).numpy()
    sess = onnxruntime_session(model, threads)
    feed = dict(inputs)
    ref = sess.run(None, feed)[0]
    diff = differences(y, ref)
    out = {"output": y, "reference": ref, "diff": diff, "ok": close(diff), "kiln_s": None,
           "onnxruntime_s": None}
    if out["ok"]:
        times = interleaved_medians({"kiln": gm.run, "onnxruntime": lambda: sess.run(None, feed)},
                                    rounds=rounds)
        out["kiln_s"], out["onnxruntime_s"] = times["kiln"], times["onnxruntime"]
    return out


def fmt_time(seconds: float) -> str:
    """``12.34 ms`` / ``56.7 µs``."""
    if seconds >= 1:
        return f"{seconds:.2f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.2f} ms"
    return f"{seconds * 1e6:.1f} µs"


def report_lines(res: Mapping, rounds: int) -> list[str]:
    """What ``kiln bench`` and the demo print for an :func:`against_onnxruntime` result."""
    d = res["diff"]
    lines = [f"check against onnxruntime: max abs diff {d['max_abs']:.2e}, max rel diff "
             f"{d['max_rel']:.2e} (outputs up to {d['ref_max']:.4g}): "
             f"{'ok' if res['ok'] else 'MISMATCH'}"]
    if res["kiln_s"] is not None:
        tk, to = median(res["kiln_s"]), median(res["onnxruntime_s"])
        lines += [f"latency, median of {rounds} interleaved rounds:",
                  f"  kiln        {fmt_time(tk):>10}",
                  f"  onnxruntime {fmt_time(to):>10}",
                  f"  kiln / onnxruntime = {tk / to:.2f}x"]
    return lines
