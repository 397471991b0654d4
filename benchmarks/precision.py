"""Reduced-precision suite (issue 24): each model of the models suite compiled in float32 and
in a reduced precision (bf16, or int8), their accuracy against float32 and their latency.

``kiln bench models --precision bf16`` (``python -m benchmarks precision``, or
``python -m benchmarks.precision [--models a,b] [--precision bf16]``) builds each network of
:data:`benchmarks.models.MODELS` (fixed random weights) with ``relay.build(...,
precision="fp32")`` and ``precision="bf16"``, then:

* **accuracy** on :data:`INPUTS` fixed random inputs (seeds 0, 1, ...): the max relative
  difference of the bf16 output from the fp32 output (``max |y_bf16 - y_fp32| / max
  |y_fp32|``, over all inputs) and the top-1 agreement (the share of output rows, along the
  last axis, whose argmax is the same);
* **latency** of one inference, kiln fp32, kiln bf16 and OpenVINO in its default precision
  (bf16 on CPUs that have it; a row saying so when it is not installed), 2 threads,
  repeats interleaved, median.

``--precision int8`` quantizes each model with onnxruntime's static quantizer (QDQ,
:func:`quantize_qdq`) and times kiln fp32, kiln int8 and onnxruntime int8 on that model,
with the top-1 agreement of both int8 runs with kiln's fp32 output
(:func:`bench_int8_model`).

A CPU without bf16 instructions gets rows saying so (kiln raises, it does not emulate).
Writes ``results/precision.json`` and ``results/precision.md``. Nothing here asserts on
timings.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

if __package__ in (None, ""):  # run as `python benchmarks/precision.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import common  # noqa: E402
from benchmarks.common import Figure  # noqa: E402

NAME = "precision"
DESCRIPTION = "bf16 vs fp32: accuracy (max rel diff, top-1) and latency (issue 24)"
THREADS = 2
#: fixed random inputs of the accuracy figures
INPUTS = 8


def settings(quick: bool) -> dict[str, Any]:
    return {"quick": quick, "repeat": 5 if quick else 15, "min_time": 0.1 if quick else 0.2,
            "threads": THREADS, "inputs": INPUTS}


def accuracy(outputs: list[np.ndarray], references: list[np.ndarray]) -> dict[str, float]:
    """``max_abs``: max |y - ref| over all pairs; ``max_rel``: that / max |ref|; ``top1``:
    the share of rows (along the last axis) whose argmax agrees."""
    diff = max(float(np.abs(y.astype(np.float64) - r).max()) for y, r in zip(
        outputs, references, strict=True))
    scale = max(float(np.abs(r).max()) for r in references)
    rows = [(y.reshape(-1, y.shape[-1]).argmax(1), r.reshape(-1, r.shape[-1]).argmax(1))
            for y, r in zip(outputs, references, strict=True)]
    agree = sum(int((a == b).sum()) for a, b in rows) / sum(a.size for a, _ in rows)
    return {"max_abs": diff, "max_rel": diff / max(scale, 1e-30), "top1": agree}


def _build(model, precision: str):
    import kiln
    from kiln import relay
    from kiln.contrib import graph_executor

    mod, params = relay.frontend.from_onnx(model)
    with relay.build_config(opt_level=3):
        lib = relay.build(mod, target="llvm", params=params, precision=precision)
    return graph_executor.GraphModule(lib["default"](kiln.cpu(0)))


def _outputs(gm, name: str, inputs: list[np.ndarray]) -> list[np.ndarray]:
    outs = []
    for x in inputs:
        gm.set_input(name, x)
        gm.run()
        outs.append(gm.get_output(0).numpy())
    return outs


def bench_model(key: str, label: str, kwargs: dict[str, int], precision: str,
                cfg: dict[str, Any]) -> tuple[list[Figure], dict[str, Any]]:
    from benchmarks.references import openvino
    from kiln.errors import TVMError
    from kiln.relay import testing

    model = testing.get_model(key, **kwargs)
    inputs = [testing.random_input(model, seed=s) for s in range(cfg["inputs"])]
    name = inputs[0][0]
    xs = [x for _, x in inputs]
    fp32 = _build(model, "fp32")
    try:
        reduced = _build(model, precision)
    except TVMError as e:
        note = f"not measured: {str(e).splitlines()[0]}"
        return [Figure(key=f"{key}.{precision}", label=f"{label} {precision}", kiln=None,
                       unit="s", notes=note)], {"error": note}
    acc = accuracy(_outputs(reduced, name, xs), _outputs(fp32, name, xs))
    fp32.set_input(name, xs[0])
    reduced.set_input(name, xs[0])
    ov = openvino(model, {name: xs[0]}, cfg["threads"], None)
    candidates = {"fp32": fp32.run, precision: reduced.run}
    if ov.run is not None:
        candidates["openvino"] = ov.run
    timings = common.interleaved(candidates, repeat=cfg["repeat"], min_time=cfg["min_time"],
                                 settle={"openvino": 0.05})
    t = {k: v.median for k, v in timings.items()}
    figures = [
        Figure(key=f"{key}.{precision}_vs_fp32", label=f"{label} {precision} vs kiln fp32",
               kiln=t[precision], unit="s", reference=t["fp32"], reference_label="kiln fp32",
               notes=f"max rel diff {acc['max_rel']:.1e}, top-1 agreement "
                     f"{100 * acc['top1']:.1f}% on {len(xs)} random inputs"),
        Figure(key=f"{key}.{precision}_vs_openvino",
               label=f"{label} {precision} vs OpenVINO default precision", kiln=t[precision],
               unit="s", reference=t.get("openvino"), reference_label=ov.label,
               notes=ov.note or "OpenVINO's output not checked (its own precision)"),
    ]
    details = {"accuracy": acc, "timings": {k: v.to_dict() for k, v in timings.items()},
               "input": {name: list(xs[0].shape)}}
    return figures, details


#: random inputs onnxruntime's quantizer calibrates the int8 models on
CALIBRATION_INPUTS = 4


def quantize_qdq(model, name: str, shape: tuple[int, ...]):
    """``model`` quantized statically by onnxruntime, as docs/precision.md does it:
    ``quant_pre_process`` (folds batch norms), then ``quantize_static`` to QDQ with
    per-channel int8 weights and uint8 activations, calibrated on
    :data:`CALIBRATION_INPUTS` random inputs (seeds 100, 101, ...)."""
    import tempfile

    import onnx
    from onnxruntime.quantization import QuantFormat, QuantType, quantize_static
    from onnxruntime.quantization.shape_inference import quant_pre_process

    class Reader:
        def __init__(self):
            self.feeds = iter([{name: np.random.default_rng(100 + s).standard_normal(shape)
                                .astype(np.float32)} for s in range(CALIBRATION_INPUTS)])

        def get_next(self):
            return next(self.feeds, None)

    with tempfile.TemporaryDirectory() as d:
        src, pre, dst = (str(Path(d) / f) for f in ("f.onnx", "p.onnx", "q.onnx"))
        onnx.save(model, src)
        quant_pre_process(src, pre)
        quantize_static(pre, dst, Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
        return onnx.load(dst)


def bench_int8_model(key: str, label: str, kwargs: dict[str, int], precision: str,
                     cfg: dict[str, Any]) -> tuple[list[Figure], dict[str, Any]]:
    """``key`` in float32 and quantized (:func:`quantize_qdq`): kiln fp32, kiln int8 and
    onnxruntime int8 (its CPU provider's defaults) on the same QDQ model; the top-1
    agreement of both int8 runs with kiln's fp32 output; latency interleaved."""
    import onnxruntime

    from kiln.relay import testing

    del precision  # int8: the QDQ model's own
    model = testing.get_model(key, **kwargs)
    inputs = [testing.random_input(model, seed=s) for s in range(cfg["inputs"])]
    name = inputs[0][0]
    xs = [x for _, x in inputs]
    qdq = quantize_qdq(model, name, xs[0].shape)
    fp32, int8 = _build(model, "fp32"), _build(qdq, "fp32")
    so = onnxruntime.SessionOptions()
    so.intra_op_num_threads = cfg["threads"]
    sess = onnxruntime.InferenceSession(qdq.SerializeToString(), so,
                                        providers=["CPUExecutionProvider"])
    references = _outputs(fp32, name, xs)
    acc = accuracy(_outputs(int8, name, xs), references)
    ort_acc = accuracy([sess.run(None, {name: x})[0] for x in xs], references)
    fp32.set_input(name, xs[0])
    int8.set_input(name, xs[0])
    feed = {name: xs[0]}
    timings = common.interleaved(
        {"fp32": fp32.run, "int8": int8.run, "onnxruntime_int8": lambda: sess.run(None, feed)},
        repeat=cfg["repeat"], min_time=cfg["min_time"], settle={"onnxruntime_int8": 0.05})
    t = {k: v.median for k, v in timings.items()}
    notes = (f"max abs diff {acc['max_abs']:.2g} (max rel {acc['max_rel']:.1e}), top-1 "
             f"agreement {100 * acc['top1']:.1f}% "
             f"(onnxruntime int8: {100 * ort_acc['top1']:.1f}%) on {len(xs)} random inputs")
    figures = [
        Figure(key=f"{key}.int8_vs_fp32", label=f"{label} int8 vs kiln fp32", kiln=t["int8"],
               unit="s", reference=t["fp32"], reference_label="kiln fp32", notes=notes),
        Figure(key=f"{key}.int8_vs_onnxruntime", label=f"{label} int8 vs onnxruntime int8",
               kiln=t["int8"], unit="s", reference=t["onnxruntime_int8"],
               reference_label=f"onnxruntime {onnxruntime.__version__} int8",
               notes="the same QDQ model"),
    ]
    details = {"accuracy": acc, "onnxruntime_accuracy": ort_acc,
               "timings": {k: v.to_dict() for k, v in timings.items()},
               "input": {name: list(xs[0].shape)}}
    return figures, details


def run(quick: bool = False, out_dir: str | Path | None = None, profile: bool = False,
        verbose: bool = True, models: Sequence[str] | None = None,
        precision: str = "bf16") -> str:
    """Run the suite for ``models`` (default: all of the models suite) in ``precision``,
    write ``<out_dir>/precision.{json,md}``, return the markdown."""
    from benchmarks.models import MODELS

    del profile  # nothing to profile here
    started, t0 = time.time(), time.perf_counter()
    cfg = settings(quick)
    load_start = common.load_average()
    os.environ.setdefault("OMP_NUM_THREADS", str(cfg["threads"]))
    unknown = [m for m in models or () if m not in MODELS]
    if unknown:
        raise ValueError(f"unknown model(s) {', '.join(unknown)}; known: {', '.join(MODELS)}")
    figures: list[Figure] = []
    details: dict[str, Any] = {}
    for key in models or MODELS:
        label, kwargs = MODELS[key]
        if verbose:
            print(f"[{NAME}] {label} {precision} ...", file=sys.stderr, flush=True)
        bench = bench_int8_model if precision == "int8" else bench_model
        figs, details[key] = bench(key, label, kwargs, precision, cfg)
        figures += figs
        gc.collect()
    machine = common.machine_info()
    machine["load_average_start"] = load_start
    _, md_path, text = common.write_report(
        NAME, figures, machine=machine, settings=dict(cfg, precision=precision),
        details=details, started=started, duration_s=time.perf_counter() - t0,
        out_dir=out_dir, title=f"Reduced precision: {precision} against fp32, batch 1")
    if verbose:
        print(text)
        print(f"written: {md_path} and {md_path.with_suffix('.json')}")
    return text


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.precision", description=DESCRIPTION)
    p.add_argument("--quick", action="store_true", help="fewer repeats")
    p.add_argument("--out", default=None, help="results directory (default: results/)")
    p.add_argument("--models", default=None, metavar="M1,M2",
                   help="models, comma-separated (default: all of the models suite)")
    p.add_argument("--precision", default="bf16", choices=("bf16", "int8"))
    args = p.parse_args(argv)
    run(quick=args.quick, out_dir=args.out,
        models=args.models.split(",") if args.models else None, precision=args.precision)
    return 0


if __name__ == "__main__":
    sys.exit(main())
