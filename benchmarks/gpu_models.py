"""GPU models suite: ResNet-18 and MobileNetV2 compiled by ``relay.build(mod, "cuda")`` against
PyTorch eager on the GPU (TF32 off, ``torch.no_grad``) and onnxruntime's CUDA provider.

The networks are :mod:`kiln.relay.testing`'s (the torchvision architectures as ONNX graphs,
random weights from a fixed seed), at 224x224, batch 1 and 16. For each: kiln's compile
time (``relay.build``: graph passes, schedules, lowering, NVRTC) is reported on its own row,
measured by worker processes that build the networks side by side (NVRTC, most of the
time, compiles one program on one core); their CUDA images land in kiln's on-disk compile
cache, so the main process's own build of each network only lowers it again;
the output is checked against PyTorch running the same graph (:func:`onnx_to_torch`, max
relative error); then kiln (the graph module's ``time_evaluator``, CUDA events), PyTorch
(CUDA events around back-to-back calls) and onnxruntime (``CUDAExecutionProvider`` with
inputs and outputs bound on the GPU, wall clock) are timed interleaved, median of repeats.
A model that fails to build or run is reported with its error; the others go on.

Without a GPU (or without PyTorch's CUDA build) each network is still built and compiled by
NVRTC for sm_90, and the report says that nothing was timed.
"""

from __future__ import annotations

import multiprocessing
import os
import statistics
import sys
import time
import traceback
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import common, gpu  # noqa: E402

NAME = "gpu_models"
DESCRIPTION = ("CUDA: ResNet-18 and MobileNetV2 via relay.build vs PyTorch and onnxruntime "
               "(needs a GPU)")

MODELS = ("resnet18", "mobilenet_v2")
BATCHES = (1, 16)
HW = 224
#: each timed measurement lasts at least this long (ms); repeats per engine
MIN_REPEAT_MS = 40.0


def _error(e: BaseException) -> str:
    return f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"[:300]


def _build(onnx_model, target: str) -> tuple[Any, float]:
    """``(factory, seconds)``: ``relay.build`` of ``onnx_model`` at opt_level 3."""
    from kiln import relay

    t0 = time.perf_counter()
    mod, params = relay.frontend.from_onnx(onnx_model)
    with relay.build_config(opt_level=3):
        lib = relay.build(mod, target=target, params=params)
    return lib, time.perf_counter() - t0


def _compile_seconds(name: str, batch: int, target: str) -> float:
    """A worker's job: ``relay.build`` of one network, its seconds (the compile figure)."""
    from kiln.relay import testing

    return _build(testing.get_model(name, hw=HW, batch=batch), target)[1]


def _compile_all(jobs: dict[str, tuple[str, int]], target: str
                 ) -> dict[str, float | BaseException]:
    """Each network of ``jobs`` (key -> (model, batch)) built in a worker process of its
    own, side by side: key -> compile seconds, or the exception its build raised."""
    ctx = multiprocessing.get_context("spawn")  # no CUDA context inherited
    workers = max(1, min(len(jobs), os.cpu_count() or 1))
    out: dict[str, float | BaseException] = {}
    with ProcessPoolExecutor(max_workers=workers, mp_context=ctx) as pool:
        futures = {key: pool.submit(_compile_seconds, name, batch, target)
                   for key, (name, batch) in jobs.items()}
        for key, future in futures.items():
            try:
                out[key] = future.result()
            except Exception as e:  # noqa: BLE001 - reported per network
                out[key] = e
    return out


def _cuda_events(fn: Callable[[], Any], torch, min_ms: float) -> float:
    """Seconds per call of ``fn``, CUDA events around enough back-to-back calls to last
    ``min_ms`` (after a warm-up call)."""
    fn()
    number = 1
    while True:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(number):
            fn()
        end.record()
        end.synchronize()
        ms = start.elapsed_time(end)
        if ms >= min_ms:
            return ms / 1e3 / number
        number = max(number + 1, int(number * min_ms / max(ms, 1e-3) * 1.2))


def _ort_cuda(onnx_model, x: np.ndarray) -> Callable[[], Any] | str:
    """A call running ``onnx_model`` on onnxruntime's CUDA provider with input and output
    bound on the GPU, or why there is none ("not available")."""
    try:
        import onnxruntime as ort
    except ImportError:
        return "not available (onnxruntime is not installed)"
    if "CUDAExecutionProvider" not in ort.get_available_providers():
        return "not available (this onnxruntime has no CUDAExecutionProvider)"
    sess = ort.InferenceSession(onnx_model.SerializeToString(),
                                providers=["CUDAExecutionProvider"])
    if "CUDAExecutionProvider" not in sess.get_providers():
        return "not available (the CUDA provider did not load)"
    binding = sess.io_binding()
    binding.bind_ortvalue_input(sess.get_inputs()[0].name,
                                ort.OrtValue.ortvalue_from_numpy(x, "cuda", 0))
    binding.bind_output(sess.get_outputs()[0].name, "cuda")
    return lambda: sess.run_with_iobinding(binding)


def _wall_clock(fn: Callable[[], Any], min_ms: float) -> float:
    """Seconds per call of a synchronous ``fn`` (onnxruntime's run), after a warm-up."""
    fn()
    number = 1
    while True:
        t0 = time.perf_counter()
        for _ in range(number):
            fn()
        seconds = time.perf_counter() - t0
        if seconds * 1e3 >= min_ms:
            return seconds / number
        number *= 2


def _measure(lib, onnx_model, x: np.ndarray, torch, repeat: int) -> dict[str, Any]:
    """Output check and interleaved timings of one built network on cuda(0)."""
    import kiln
    from kiln.contrib import graph_executor
    from kiln.relay.testing import onnx_to_torch

    dev = kiln.cuda(0)
    gm = graph_executor.GraphModule(lib["default"](dev))
    gm.set_input(0, x)
    gm.run()
    y = gm.get_output(0).numpy()
    net = onnx_to_torch(onnx_model).cuda()
    xt = torch.from_numpy(x).cuda()
    with torch.no_grad():
        ref = net(xt).cpu().numpy()
    err = float(np.max(np.abs(y - ref)) / max(float(np.max(np.abs(ref))), 1e-30))
    ort_run = _ort_cuda(onnx_model, x)
    timer = gm.module.time_evaluator("run", dev, number=1, repeat=1, min_repeat_ms=MIN_REPEAT_MS)
    kiln_t, torch_t, ort_t = [], [], []
    with torch.no_grad():
        for _ in range(repeat):
            kiln_t.append(timer().mean)
            torch_t.append(_cuda_events(lambda: net(xt), torch, MIN_REPEAT_MS))
            if not isinstance(ort_run, str):
                ort_t.append(_wall_clock(ort_run, MIN_REPEAT_MS))
    return {"kiln_s": statistics.median(kiln_t), "torch_s": statistics.median(torch_t),
            "ort_cuda_s": statistics.median(ort_t) if ort_t else None,
            "ort_cuda_note": ort_run if isinstance(ort_run, str) else "",
            "max_rel_err": err, "correct": err < 1e-3}


def _gpu_arch() -> str:
    """``sm_XY`` of cuda(0): the workers compile for it without touching the GPU."""
    from kiln.runtime import cuda_driver

    return cuda_driver.device_arch(0)


def _figures(key: str, label: str, compile_s: float, r: dict[str, Any] | None,
             note: str) -> list[common.Figure]:
    """The report's rows of one network: compile time, kiln vs PyTorch, kiln vs onnxruntime
    CUDA."""
    rows = [common.Figure(f"{key}.compile", f"{label}: compile (relay.build + NVRTC)",
                          compile_s, "s")]
    if r is None:
        rows.append(common.Figure(f"{key}.run", f"{label}: run", None, "s", notes=note))
        return rows
    check = (f"max rel err {r['max_rel_err']:.1e}" if r["correct"] else
             f"WRONG RESULT (max rel err {r['max_rel_err']:.1e})")
    rows.append(common.Figure(f"{key}.torch", f"{label}: kiln vs PyTorch eager", r["kiln_s"],
                              "s", reference=r["torch_s"], reference_label="PyTorch",
                              notes=check))
    rows.append(common.Figure(f"{key}.ort", f"{label}: kiln vs onnxruntime CUDA", r["kiln_s"],
                              "s", reference=r["ort_cuda_s"], reference_label="onnxruntime",
                              notes=r["ort_cuda_note"]))
    return rows


def run(quick: bool = False, out_dir: str | Path | None = None, profile: bool = False,
        verbose: bool = True) -> str:
    from kiln.relay import testing

    del profile
    say = common.progress(NAME, verbose)
    started, t0 = time.time(), time.perf_counter()
    torch, have_gpu = gpu.torch_on_gpu()
    target = f"cuda -arch={_gpu_arch()}" if have_gpu else "cuda -arch=sm_90"
    jobs = {f"{name}.b{batch}": (name, batch) for name in MODELS for batch in BATCHES}
    say(f"compiling {len(jobs)} networks for {target!r} in worker processes")
    compiled = _compile_all(jobs, target)
    figures, details = [], {}
    for key, (name, batch) in jobs.items():
        label = f"{name} batch {batch}"
        compile_s = compiled[key]
        if isinstance(compile_s, BaseException):
            details[key] = {"error": _error(compile_s), "traceback": "".join(
                traceback.format_exception(compile_s))[-2000:]}
            figures.append(common.Figure(key, f"{label}: build", None, "s",
                                         notes=f"build failed: {_error(compile_s)}"))
            continue
        details[key] = {"compile_s": compile_s}
        if not have_gpu:
            figures += _figures(key, label, compile_s, None,
                                "compiled for sm_90, not timed: no CUDA GPU / PyTorch CUDA")
            continue
        say(f"{label}: build (cached NVRTC), check, timing")
        onnx_model = testing.get_model(name, hw=HW, batch=batch)
        x = np.random.default_rng(0).standard_normal((batch, 3, HW, HW)).astype("float32")
        try:
            lib, details[key]["rebuild_s"] = _build(onnx_model, target)
            details[key]["kernels"] = len(lib.plan["steps"])
            r = _measure(lib, onnx_model, x, torch, 3 if quick else 5)
        except Exception as e:  # noqa: BLE001 - one failing model must not stop the others
            details[key]["error"] = _error(e)
            details[key]["traceback"] = traceback.format_exc()[-2000:]
            figures += _figures(key, label, compile_s, None, f"run failed: {_error(e)}")
            continue
        details[key].update(r)
        figures += _figures(key, label, compile_s, r, "")
    return gpu.write_gpu_report(
        NAME, figures, torch, have_gpu,
        settings={"quick": quick, "hw": HW, "batches": list(BATCHES)}, details=details,
        started=started, t0=t0, out_dir=out_dir, title="GPU models (CUDA)", verbose=verbose)


def main(argv: Sequence[str] | None = None) -> int:
    args = common.suite_parser(NAME, DESCRIPTION).parse_args(argv)
    run(quick=args.quick, out_dir=args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
