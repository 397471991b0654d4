"""Whole models with a symbolic dimension (issue 19): one dynamic build against a build
specialised per shape and onnxruntime running the same dynamic ONNX model.

* **ResNet-18** with a dynamic batch (``dim_param`` ``"batch"``), at batch 1, 3 and 8
  (``--quick``: 1 and 3, 64x64 images instead of 224x224);
* a transformer's **MLP block** (``kiln.relay.testing.mlp_block``, ``[seq, 64] -> [seq, 64]``
  through a 256-wide hidden layer) with a dynamic sequence length, at 7, 64 and 128.

For each model: the compile time of the dynamic build (once) and of each specialised build
(each with an empty compile cache);
for each size: the run time of the three (medians of interleaved repeats), and the largest
difference of kiln's outputs from onnxruntime's. Nothing here is a pass/fail criterion
(docs/dynamic.md, "Whole models", discusses the numbers).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

if __package__ in (None, ""):  # run as `python benchmarks/dynamic.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import common  # noqa: E402
from benchmarks.common import Figure  # noqa: E402

NAME = "dynamic"
DESCRIPTION = ("dynamic-shape models: ResNet-18 (dynamic batch) and an MLP block (dynamic "
               "sequence length), one dynamic build vs specialised builds vs onnxruntime")


def settings(quick: bool) -> dict[str, Any]:
    return {"resnet_hw": 64 if quick else 224, "batches": [1, 3] if quick else [1, 3, 8],
            "seqs": [7, 64, 128], "repeat": 3 if quick else 10,
            "min_time": 0.02 if quick else 0.1}


def _models(cfg: dict[str, Any]) -> list[tuple[str, Any, str, list[int], Any]]:
    """``(label, dynamic ONNX model, input name, sizes, input shape of a size)``."""
    from kiln.relay import testing

    hw = cfg["resnet_hw"]
    return [
        (f"resnet18 {hw}x{hw}", testing.resnet18(hw=hw, batch="batch"), "input",
         cfg["batches"], lambda b: (b, 3, hw, hw)),
        ("mlp_block d=64", testing.mlp_block(seq="seq"), "x", cfg["seqs"],
         lambda s: (s, 64)),
    ]


def _build(model, shape: dict | None):
    """The built factory module and its build seconds (import included), compiled with an
    empty compile cache of its own (a specialised build would otherwise reuse the C
    objects of the dynamic build's identical 1-row kernels)."""
    from kiln import relay

    old = os.environ.get("KILN_CACHE_DIR")
    with tempfile.TemporaryDirectory(prefix="kiln-bench-dynamic-") as cache:
        os.environ["KILN_CACHE_DIR"] = cache
        try:
            t = time.perf_counter()
            mod, params = relay.frontend.from_onnx(model, shape=shape)
            with relay.build_config(opt_level=3):
                lib = relay.build(mod, target="llvm", params=params)
            return lib, time.perf_counter() - t
        finally:
            if old is None:
                del os.environ["KILN_CACHE_DIR"]
            else:
                os.environ["KILN_CACHE_DIR"] = old


def bench_model(label: str, model, inp: str, sizes: list[int], shape_of,
                cfg: dict[str, Any], say) -> tuple[list[Figure], dict[str, Any]]:
    """The figures and details of one model at each of ``sizes``."""
    import onnxruntime as ort

    import kiln
    from kiln.contrib import graph_executor

    say(f"{label}: dynamic build")
    dyn_lib, dyn_s = _build(model, None)
    dyn = graph_executor.GraphModule(dyn_lib["default"](kiln.cpu(0)))
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    figures = [Figure(key=f"{label}.compile.dynamic", label=f"{label}: compile, dynamic "
                      "(once)", kiln=dyn_s, unit="s")]
    details: dict[str, Any] = {"dynamic_compile_s": dyn_s, "sizes": {}}
    for n in sizes:
        say(f"{label}: size {n}: specialised build")
        spec_lib, spec_s = _build(model, {inp: shape_of(n)})
        spec = graph_executor.GraphModule(spec_lib["default"](kiln.cpu(0)))
        x = np.random.default_rng(n).standard_normal(shape_of(n)).astype(np.float32)
        dyn.set_input(inp, x)
        spec.set_input(inp, x)
        dyn.run()
        ref = sess.run(None, {inp: x})[0]
        err = float(np.abs(dyn.get_output(0).numpy() - ref).max())
        t = common.interleaved({"dynamic": dyn.run, "specialised": spec.run,
                                "onnxruntime": lambda x=x: sess.run(None, {inp: x})},
                               repeat=cfg["repeat"], min_time=cfg["min_time"])
        med = {k: v.median for k, v in t.items()}
        say(f"{label}: size {n}: " + ", ".join(f"{k} {common.fmt_time(v)}"
                                               for k, v in med.items()))
        figures += [
            Figure(key=f"{label}.{n}.vs_specialised", label=f"{label}, size {n}: dynamic",
                   kiln=med["dynamic"], unit="s", reference=med["specialised"],
                   reference_label="specialised build", goal="<= 1.1x specialised",
                   within_goal=med["dynamic"] <= 1.1 * med["specialised"],
                   notes=f"max |kiln - onnxruntime| {err:.1e}"),
            Figure(key=f"{label}.{n}.vs_onnxruntime", label=f"{label}, size {n}: dynamic",
                   kiln=med["dynamic"], unit="s", reference=med["onnxruntime"],
                   reference_label="onnxruntime (same dynamic model)"),
            Figure(key=f"{label}.{n}.compile.specialised",
                   label=f"{label}, size {n}: compile, specialised", kiln=spec_s, unit="s"),
        ]
        details["sizes"][n] = {"run_s": med, "specialised_compile_s": spec_s,
                               "max_abs_error_vs_onnxruntime": err}
    details["cached_plans"] = dyn.num_cached_plans
    return figures, details


def run(quick: bool = False, out_dir: str | Path | None = None, profile: bool = False,
        verbose: bool = True) -> str:
    """Run the suite, write ``<out_dir>/dynamic.{json,md}``, return the markdown."""
    started, t0 = time.time(), time.perf_counter()
    cfg = settings(quick)
    say = common.progress(NAME, verbose)
    load_start = common.load_average()
    figures: list[Figure] = []
    details: dict[str, Any] = {}
    for label, model, inp, sizes, shape_of in _models(cfg):
        f, d = bench_model(label, model, inp, sizes, shape_of, cfg, say)
        figures += f
        details[label] = d
    _, md_path, text = common.write_report(
        NAME, figures, machine=common.machine_info(load_start), settings=cfg,
        details=details, started=started, duration_s=time.perf_counter() - t0,
        out_dir=out_dir, title="Dynamic-shape models: one build for every size")
    common.show_report(text, md_path, verbose)
    return text


def main(argv: Sequence[str] | None = None) -> int:
    args = common.suite_parser(NAME, DESCRIPTION, "ResNet-18 at 64x64, batch 1 and 3; "
                                                  "3 repeats").parse_args(argv)
    run(quick=args.quick, out_dir=args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
