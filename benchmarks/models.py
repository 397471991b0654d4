"""Whole-model suite (issues 6 and 23): CNNs and transformers, fp32, against the strongest
CPU engines.

``python -m benchmarks models [--quick]`` (``kiln bench models [--models a,b] [--batch N]``,
or ``python -m benchmarks.models --models a,b --batch N``) builds each network as an ONNX
model with ``kiln.relay.testing`` (fixed random weights, nothing downloaded) — ResNet-18,
MobileNetV2, ResNet-50 (224x224), the BERT-base encoder (sequence 128) and ViT-B/16
(224x224) — for a batch of N (1 by default), then, in one process:

* **compile time** of ``relay.build`` (opt_level 3): cold (empty compile cache, so the C
  compiler runs) and warm (the same model again, library found in the cache);
* **latency** of one inference of kiln's graph executor and of each reference engine of
  :mod:`benchmarks.references` (onnxruntime with its defaults and with kiln's settings,
  OpenVINO with the f32 hint and with its default precision, PyTorch eager,
  ``torch.compile`` with inductor and with ``backend="kiln"``, IREE; an engine not installed
  or failing is a row saying so, a ``torch.compile`` that ran eagerly is labelled so), all
  with the same number of threads (2), repeats interleaved, median; with a batch, each
  row states its throughput (images or sequences per second);
* **compile time** of the engines that compile on first use (``torch.compile``), cold,
  next to kiln's cold compile.

Every output is checked against onnxruntime's (defaults, fp32) before anything is timed; a
candidate whose output differs is not timed and the row says so (OpenVINO's default
precision, bf16 on some CPUs, is timed and its difference reported). Writes
``results/models.json`` and ``results/models.md``. Nothing here asserts on timings.
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
from benchmarks.references import ENGINES, Reference, all_references  # noqa: E402

NAME = "models"
DESCRIPTION = ("ResNet-18/50, MobileNetV2, BERT-base, ViT-B/16: kiln vs onnxruntime, OpenVINO, "
               "PyTorch, IREE; compile time (issues 6, 23)")

THREADS = 2
#: model key of kiln.relay.testing -> (label, builder arguments at the benchmark's size)
MODELS: dict[str, tuple[str, dict[str, int]]] = {
    "resnet18": ("ResNet-18", {"hw": 224}),
    "mobilenet_v2": ("MobileNetV2", {"hw": 224}),
    "resnet50": ("ResNet-50", {"hw": 224}),
    "bert_encoder": ("BERT-base encoder (seq 128)", {"seq": 128}),
    "vit": ("ViT-B/16", {"hw": 224}),
}
#: what one batch element of a model is, for throughput (images unless named here)
ITEMS = {"bert_encoder": "sequences"}
#: seconds to let a reference's spinning worker threads sleep before the next candidate is
#: timed (measured: kiln right after onnxruntime ran up to 1.2x slower)
SETTLE = 0.05


def settings(quick: bool, batch: int = 1) -> dict[str, Any]:
    if quick:
        return {"quick": True, "repeat": 5, "min_time": 0.1, "threads": THREADS, "batch": batch}
    return {"quick": False, "repeat": 15, "min_time": 0.2, "threads": THREADS, "batch": batch}


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


def build_kiln(model) -> tuple[Any, Any, dict[str, float]]:
    """``relay.build`` of ``model`` twice with an empty compile cache (cold, then warm);
    returns the library, its graph module and the two compile times."""
    import kiln
    from kiln import relay
    from kiln.contrib import graph_executor

    compile_s = {}
    with fresh_cache(prefix="kiln-bench-models-"):
        for kind in ("cold", "warm"):
            t0 = time.perf_counter()
            mod, params = relay.frontend.from_onnx(model)
            with relay.build_config(opt_level=3):
                lib = relay.build(mod, target="llvm", params=params)
            compile_s[kind] = time.perf_counter() - t0
        gm = graph_executor.GraphModule(lib["default"](kiln.cpu(0)))
    return lib, gm, compile_s


def throughput(key: str, batch: int, seconds: float | None) -> str:
    """``"123 images/s; "`` for a batch of ``batch`` run in ``seconds`` (nothing at batch 1
    or unmeasured)."""
    if batch == 1 or not seconds:
        return ""
    return f"{batch / seconds:.1f} {ITEMS.get(key, 'images')}/s; "


def _reference_figure(key: str, label: str, ref: Reference, kiln_s: float | None,
                      timings: dict, diff: dict | None, batch: int) -> Figure:
    t = timings.get(ref.name)
    if ref.run is None:
        note = ref.note
    elif t is None:
        note = f"NOT TIMED: its output differs (max rel diff {diff['max_rel']:.1e})"
    else:
        note = (f"{throughput(key, batch, t.median)}{ref.note + '; ' if ref.note else ''}"
                f"its max rel diff vs onnxruntime {diff['max_rel']:.1e}")
    return Figure(key=f"{key}.{ref.name}", label=f"{label} latency vs {ref.label}",
                  kiln=kiln_s, unit="s", reference=t.median if t else None,
                  reference_label=ref.label if t else "", notes=note)


def bench_model(key: str, cfg: dict[str, Any]) -> tuple[list[Figure], dict[str, Any]]:
    """Compile and time model ``key`` of :data:`MODELS` against every reference engine."""
    from kiln.relay import testing
    from kiln.relay.testing import compare

    label, kwargs = MODELS[key]
    threads, batch = cfg["threads"], cfg["batch"]
    if batch != 1:
        label = f"{label}, batch {batch}"
    model = testing.get_model(key, batch=batch, **kwargs)
    name, x = testing.random_input(model)
    feed = {name: x}
    details: dict[str, Any] = {"model": key, "input": {name: list(x.shape)},
                               "onnx_nodes": len(model.graph.node)}
    lib, gm, compile_s = build_kiln(model)
    details.update(compile_s=compile_s, summary=lib.summary, kernels=len(lib.plan["steps"]),
                   planned_bytes=sum(lib.plan["storages"]))

    refs = all_references(model, feed, threads, cfg.get("skip", ()))
    base = refs[0].output
    if base is None:
        raise ImportError(f"the models suite needs onnxruntime ({refs[0].note})")
    gm.set_input(name, x)
    gm.run()
    diffs = {"kiln": compare.differences(gm.get_output(0).numpy(), base)}
    candidates: dict[str, Any] = {}
    if compare.close(diffs["kiln"]):
        candidates["kiln"] = gm.run
    for ref in refs:
        if ref.run is None:
            continue
        diffs[ref.name] = compare.differences(ref.output.reshape(base.shape), base)
        if compare.close(diffs[ref.name]) or not ref.checked:
            candidates[ref.name] = ref.run
    details["diff_vs_onnxruntime"] = diffs
    details["references"] = {r.name: r.label if r.run else r.note for r in refs}

    with _limit_openmp(threads):
        timings = common.interleaved(candidates, repeat=cfg["repeat"], min_time=cfg["min_time"],
                                     settle={n: SETTLE for n in candidates if n != "kiln"})
    details["timings"] = {k: t.to_dict() for k, t in timings.items()}

    kt = timings.get("kiln")
    kd = diffs["kiln"]
    check = f"max rel diff vs onnxruntime {kd['max_rel']:.1e}"
    figures = [Figure(key=f"{key}.kiln", label=f"{label} latency (kiln)",
                      kiln=kt.median if kt else None, unit="s",
                      notes=(f"{throughput(key, batch, kt.median)}median of "
                             f"{len(kt.results)} interleaved rounds × {kt.number}, "
                             f"min {fmt_time(kt.min)}; {check}" if kt
                             else f"NOT TIMED: output differs; {check}"))]
    figures += [_reference_figure(key, label, r, kt.median if kt else None, timings,
                                  diffs.get(r.name), batch) for r in refs]
    figures += [
        Figure(key=f"{key}.compile_cold", label=f"{label} compile, empty cache",
               kiln=compile_s["cold"], unit="s",
               notes=f"from_onnx + relay.build, opt_level 3; {details['kernels']} kernels "
                     f"from {details['onnx_nodes']} ONNX nodes"),
        Figure(key=f"{key}.compile_warm", label=f"{label} compile, cached library",
               kiln=compile_s["warm"], unit="s", notes="same model again, same process"),
    ]
    figures += [Figure(key=f"{key}.compile_vs_{r.name}",
                       label=f"{label} compile, empty cache vs {r.label}",
                       kiln=compile_s["cold"], unit="s", reference=r.compile_s,
                       reference_label=r.label,
                       notes="its first call: TorchDynamo's capture and the backend's compile")
                for r in refs if r.compile_s is not None]
    details["reference_compile_s"] = {r.name: r.compile_s for r in refs
                                      if r.compile_s is not None}
    return figures, details


def run(quick: bool = False, out_dir: str | Path | None = None, profile: bool = False,
        verbose: bool = True, models: Sequence[str] | None = None, batch: int = 1,
        skip: Sequence[str] = ()) -> str:
    """Run the suite on ``models`` (keys of :data:`MODELS`, default all) built for a batch
    of ``batch``, against every reference engine but those of ``skip`` (names of
    :data:`benchmarks.references.ENGINES`), write ``<out_dir>/models.{json,md}``, return
    the markdown."""
    del profile  # nothing to profile here
    keys = list(models or MODELS)
    unknown = [k for k in keys if k not in MODELS]
    if unknown:
        raise ValueError(f"unknown model(s) {', '.join(unknown)}; known: {', '.join(MODELS)}")
    started = time.time()
    t0 = time.perf_counter()
    if batch < 1:
        raise ValueError(f"batch must be at least 1, got {batch}")
    cfg = dict(settings(quick, batch), skip=tuple(skip))
    load_start = common.load_average()
    # kiln's kernels read OMP_NUM_THREADS when the first library loads (and its x86
    # schedules when they pick parallel extents); threadpoolctl covers an earlier load
    os.environ.setdefault("OMP_NUM_THREADS", str(cfg["threads"]))
    figures: list[Figure] = []
    details: dict[str, Any] = {}
    for key in keys:
        if verbose:
            print(f"[{NAME}] {MODELS[key][0]} ...", file=sys.stderr, flush=True)
        try:
            figs, det = bench_model(key, cfg)
        except ImportError as e:  # onnx / onnxruntime missing
            figs = [Figure(key=f"{key}.error", label=MODELS[key][0], kiln=None, unit="s",
                           notes=f"not measured: {e}")]
            det = {"error": str(e)}
        figures += figs
        details[key] = det
        gc.collect()
    machine = common.machine_info()
    machine["load_average_start"] = load_start
    shown = dict(cfg, models=keys)
    _, md_path, text = common.write_report(
        NAME, figures, machine=machine, settings=shown, details=details, started=started,
        duration_s=time.perf_counter() - t0, out_dir=out_dir,
        title=f"Whole models ({', '.join(MODELS[k][0] for k in keys)}; batch {batch})")
    if verbose:
        print(text)
        print(f"written: {md_path} and {md_path.with_suffix('.json')}")
    return text


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.models", description=DESCRIPTION)
    p.add_argument("--quick", action="store_true", help="fewer repeats")
    p.add_argument("--out", default=None, help="results directory (default: results/)")
    p.add_argument("--models", default=",".join(MODELS), metavar="M1,M2",
                   help=f"comma-separated models (default: all of {', '.join(MODELS)})")
    p.add_argument("--batch", type=int, default=1, metavar="N",
                   help="the models built for a batch of N; the table states throughput")
    p.add_argument("--skip", default="", metavar="E1,E2",
                   help=f"reference engines to leave out (of {', '.join(ENGINES)})")
    args = p.parse_args(argv)
    keys = [k for k in args.models.split(",") if k]
    unknown = [k for k in keys if k not in MODELS]
    if unknown:
        p.error(f"unknown model(s) {', '.join(unknown)}; known: {', '.join(MODELS)}")
    if args.batch < 1:
        p.error(f"--batch must be at least 1, got {args.batch}")
    skip = [e for e in args.skip.split(",") if e]
    if set(skip) - set(ENGINES):
        p.error(f"unknown engine(s) in --skip {args.skip!r}; known: {', '.join(ENGINES)}")
    run(quick=args.quick, out_dir=args.out, models=keys, batch=args.batch, skip=skip)
    return 0


if __name__ == "__main__":
    sys.exit(main())
