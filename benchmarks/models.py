"""Whole-model suite (issue 6): ResNet-18 and MobileNetV2 at 224x224, batch 1, fp32.

``python -m benchmarks models [--quick]`` (or ``python -m benchmarks.models``) builds each
network as an ONNX model with ``kiln.relay.testing`` (fixed random weights), then, in one
process:

* **compile time** of ``relay.build`` (opt_level 3): cold (empty compile cache, so the C
  compiler runs) and warm (the same model again, library found in the cache);
* **latency** of one inference of kiln's graph executor, onnxruntime (CPU provider) and
  PyTorch eager (the same ONNX graph run op by op with ``torch.nn.functional`` by
  ``kiln.relay.testing.onnx_to_torch``; skipped with a note when torch is not installed),
  all with the same number of threads (2), repeats interleaved, median.

Every output is checked against onnxruntime's before anything is timed; a candidate whose
output differs is not timed and the row says so. Writes ``results/models.json`` and
``results/models.md``. Nothing here asserts on timings.
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

if __package__ in (None, ""):  # run as `python benchmarks/models.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import common  # noqa: E402
from benchmarks.common import Figure, fmt_time  # noqa: E402
from benchmarks.foundation import fresh_cache  # noqa: E402

NAME = "models"
DESCRIPTION = ("ResNet-18, MobileNetV2 at 224x224: kiln vs onnxruntime vs PyTorch eager, "
               "compile time (issue 6)")

THREADS = 2
MODELS = (("resnet18", "ResNet-18"), ("mobilenet_v2", "MobileNetV2"))
HW = 224


def settings(quick: bool) -> dict[str, Any]:
    if quick:
        return {"quick": True, "repeat": 5, "min_time": 0.1, "threads": THREADS, "hw": HW}
    return {"quick": False, "repeat": 15, "min_time": 0.2, "threads": THREADS, "hw": HW}


def _torch():
    try:
        import torch
    except ImportError:
        return None
    return torch


def _limit_openmp(threads: int):
    """Keep every OpenMP runtime loaded so far (kiln's, torch's) at ``threads`` threads for
    calls from this thread; a no-op context without threadpoolctl (OMP_NUM_THREADS, set
    before the first kiln library is loaded, then does it for kiln)."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:
        from contextlib import nullcontext

        return nullcontext()
    return threadpool_limits(limits=threads, user_api="openmp")


def bench_model(key: str, label: str, cfg: dict[str, Any]):
    import kiln
    from kiln import relay
    from kiln.contrib import graph_executor
    from kiln.relay import testing
    from kiln.relay.testing import compare

    threads = cfg["threads"]
    model = testing.get_model(key, hw=cfg["hw"])
    name, x = testing.random_input(model)
    details: dict[str, Any] = {"model": key, "input": {name: list(x.shape)},
                               "onnx_nodes": len(model.graph.node)}

    # compile: cold (fresh cache: the C compiler runs), then warm (cache hit)
    compile_s = {}
    with fresh_cache(prefix="kiln-bench-models-"):
        for kind in ("cold", "warm"):
            t0 = time.perf_counter()
            mod, params = relay.frontend.from_onnx(model)
            with relay.build_config(opt_level=3):
                lib = relay.build(mod, target="llvm", params=params)
            compile_s[kind] = time.perf_counter() - t0
        gm = graph_executor.GraphModule(lib["default"](kiln.cpu(0)))
    details["compile_s"] = compile_s
    details["summary"] = lib.summary
    details["kernels"] = len(lib.plan["steps"])
    details["planned_bytes"] = sum(lib.plan["storages"])

    sess = compare.onnxruntime_session(model, threads)
    feed = {name: x}
    ref = sess.run(None, feed)[0]
    gm.set_input(name, x)
    gm.run()
    diffs = {"kiln": compare.differences(gm.get_output(0).numpy(), ref)}
    candidates: dict[str, Any] = {"onnxruntime": lambda: sess.run(None, feed)}
    if compare.close(diffs["kiln"]):
        candidates["kiln"] = gm.run
    torch = _torch()
    if torch is not None:
        torch.set_num_threads(threads)
        tmod = testing.onnx_to_torch(model)
        tx = torch.from_numpy(x)
        with torch.inference_mode():
            diffs["pytorch"] = compare.differences(tmod(tx).numpy(), ref)
        if compare.close(diffs["pytorch"]):
            candidates["pytorch"] = lambda: tmod(tx)
    details["diff_vs_onnxruntime"] = diffs

    def run_all():
        # onnxruntime's and PyTorch's workers spin after a run: let them sleep before the next
        # candidate is timed (measured: kiln right after onnxruntime ran up to 1.2x slower)
        settle = {"onnxruntime": 0.05, "pytorch": 0.05}
        return common.interleaved(candidates, repeat=cfg["repeat"], min_time=cfg["min_time"],
                                  settle=settle)

    with _limit_openmp(threads):
        if torch is not None:
            with torch.inference_mode():
                timings = run_all()
        else:
            timings = run_all()
    details["timings"] = {k: t.to_dict() for k, t in timings.items()}

    ort_t = timings["onnxruntime"].median
    figures = []
    kt = timings.get("kiln")
    kd = diffs["kiln"]
    check = f"max abs diff vs onnxruntime {kd['max_abs']:.1e} (outputs up to {kd['ref_max']:.3g})"
    notes = (f"median of {len(kt.results)} interleaved rounds × {kt.number}, min "
             f"{fmt_time(kt.min)}; {check}" if kt else f"NOT TIMED: output differs; {check}")
    figures.append(Figure(key=f"{key}.onnxruntime", label=f"{label} latency vs onnxruntime",
                          kiln=kt.median if kt else None, unit="s", reference=ort_t,
                          reference_label="onnxruntime", notes=notes))
    if torch is None:
        figures.append(Figure(key=f"{key}.pytorch", label=f"{label} latency vs PyTorch eager",
                              kiln=kt.median if kt else None, unit="s",
                              notes="PyTorch not installed: not measured"))
    else:
        pt = timings.get("pytorch")
        pd = diffs["pytorch"]
        figures.append(Figure(
            key=f"{key}.pytorch", label=f"{label} latency vs PyTorch eager",
            kiln=kt.median if kt else None, unit="s", reference=pt.median if pt else None,
            reference_label=f"torch {torch.__version__}" if pt else "",
            notes=(f"onnx_to_torch (F.conv2d, F.batch_norm, ... per node), inference_mode; "
                   f"its max abs diff vs onnxruntime {pd['max_abs']:.1e}"
                   if pt else "PyTorch NOT TIMED: its output differs")))
    figures += [
        Figure(key=f"{key}.compile_cold", label=f"{label} compile, empty cache",
               kiln=compile_s["cold"], unit="s",
               notes=f"from_onnx + relay.build, opt_level 3; {details['kernels']} kernels "
                     f"from {details['onnx_nodes']} ONNX nodes"),
        Figure(key=f"{key}.compile_warm", label=f"{label} compile, cached library",
               kiln=compile_s["warm"], unit="s", notes="same model again, same process"),
    ]
    return figures, details


def run(quick: bool = False, out_dir: str | Path | None = None, profile: bool = False,
        verbose: bool = True) -> str:
    """Run the suite, write ``<out_dir>/models.{json,md}``, return the markdown."""
    del profile  # nothing to profile here
    started = time.time()
    t0 = time.perf_counter()
    cfg = settings(quick)
    load_start = common.load_average()
    # kiln's kernels read OMP_NUM_THREADS when the first library loads (and its x86
    # schedules when they pick parallel extents); threadpoolctl covers an earlier load
    os.environ.setdefault("OMP_NUM_THREADS", str(cfg["threads"]))
    figures: list[Figure] = []
    details: dict[str, Any] = {}
    for key, label in MODELS:
        if verbose:
            print(f"[{NAME}] {label} ...", file=sys.stderr, flush=True)
        try:
            figs, det = bench_model(key, label, cfg)
        except ImportError as e:  # onnx / onnxruntime missing
            figs = [Figure(key=f"{key}.error", label=label, kiln=None, unit="s",
                           notes=f"not measured: {e}")]
            det = {"error": str(e)}
        figures += figs
        details[key] = det
        gc.collect()
    machine = common.machine_info()
    machine["load_average_start"] = load_start
    torch = _torch()
    shown = dict(cfg, pytorch=torch.__version__ if torch else "not installed")
    try:
        import onnxruntime

        shown["onnxruntime"] = onnxruntime.__version__
    except ImportError:  # pragma: no cover - the suite needs it
        pass
    _, md_path, text = common.write_report(
        NAME, figures, machine=machine, settings=shown, details=details, started=started,
        duration_s=time.perf_counter() - t0, out_dir=out_dir,
        title="Whole models (ResNet-18, MobileNetV2 at 224x224, batch 1)")
    if verbose:
        print(text)
        print(f"written: {md_path} and {md_path.with_suffix('.json')}")
    return text


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.models", description=DESCRIPTION)
    p.add_argument("--quick", action="store_true", help="fewer repeats")
    p.add_argument("--out", default=None, help="results directory (default: results/)")
    args = p.parse_args(argv)
    run(quick=args.quick, out_dir=args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
