"""The reference engines the models suite times kiln against, each on the same ONNX model.

Every function here takes ``(model, feed, threads)`` (an ``onnx.ModelProto``, the input
arrays by name, the thread count all engines use) and returns a :class:`Reference`: a
callable running one inference, its output, and a label naming the engine, its version and
its settings. An engine that is not installed, or that fails to compile or run the model,
gives a Reference without a callable whose ``note`` says why ("not installed", the error);
the suite goes on without it. The engines are imported here only, each when it is asked for.

* onnxruntime, CPU provider: with its defaults (spinning worker threads) and as kiln's
  ``kiln bench``/tests run it (``compare.onnxruntime_session``: no spinning);
* OpenVINO, CPU plugin, latency hint: with the f32 precision hint, and with its default
  inference precision (bf16 on CPUs with AVX-512 bf16 or AMX: its output is not checked
  against the fp32 reference, only reported);
* PyTorch eager: the graph run op by op with ``torch.nn.functional``
  (``kiln.relay.testing.onnx_to_torch``), ``inference_mode``;
* ``torch.compile`` of the same operators as one ``torch.fx`` graph
  (``kiln.relay.testing.onnx_to_fx``) with PyTorch's default backend (inductor) and with
  ``backend="kiln"`` (:mod:`kiln.relay.frontend.torch_compile`): the first call, TorchDynamo's
  capture and the backend's compile, is the engine's compile time (with an empty cache
  directory); a graph kiln runs eagerly is timed and labelled so (its log line);
* IREE: ``iree-import-onnx``, compiled for ``llvm-cpu`` with the host CPU, run by the
  ``local-task`` driver.
"""

from __future__ import annotations

import functools
import logging
import tempfile
import time
from collections.abc import Callable, Collection, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from benchmarks.foundation import fresh_cache


@dataclass
class Reference:
    """One engine's run of the model: ``run`` (None when it does not run, ``note`` says
    why), its ``output``, whether that output must match the fp32 reference before the
    engine is timed (``checked``), and its compile time where it compiles on first use
    (``compile_s``)."""

    name: str
    label: str
    run: Callable[[], Any] | None = None
    output: np.ndarray | None = None
    note: str = ""
    checked: bool = True
    compile_s: float | None = None


def _missing(name: str, label: str, module: str) -> Reference:
    return Reference(name, label, note=f"{module} not installed")


def _failed(name: str, label: str, e: Exception) -> Reference:
    first = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return Reference(name, label, note=f"failed: {type(e).__name__}: {first[:200]}")


def onnxruntime_defaults(model, feed: Mapping[str, np.ndarray], threads: int) -> Reference:
    """onnxruntime's CPU provider with its default session options (``threads`` intra-op
    threads)."""
    try:
        import onnxruntime as ort
    except ImportError:
        return _missing("onnxruntime", "onnxruntime (defaults)", "onnxruntime")
    so = ort.SessionOptions()
    so.intra_op_num_threads = threads
    sess = ort.InferenceSession(model.SerializeToString(), so,
                                providers=["CPUExecutionProvider"])
    label = f"onnxruntime {ort.__version__} (defaults)"
    return Reference("onnxruntime", label, lambda: sess.run(None, feed),
                     sess.run(None, feed)[0])


def onnxruntime_kiln_settings(model, feed: Mapping[str, np.ndarray],
                              threads: int) -> Reference:
    """onnxruntime as ``kiln bench model.onnx`` runs it: no spin-waiting, one inter-op
    thread."""
    try:
        import onnxruntime as ort

        from kiln.relay.testing import compare
    except ImportError:
        return _missing("onnxruntime_nospin", "onnxruntime (kiln's settings)", "onnxruntime")
    sess = compare.onnxruntime_session(model, threads)
    return Reference("onnxruntime_nospin", f"onnxruntime {ort.__version__} (no spinning)",
                     lambda: sess.run(None, feed), sess.run(None, feed)[0])


def openvino(model, feed: Mapping[str, np.ndarray], threads: int,
             precision: str | None) -> Reference:
    """OpenVINO's CPU plugin, latency hint, ``threads`` threads; ``precision`` the inference
    precision hint (``"f32"``), None for the plugin's default (not checked)."""
    name = f"openvino_{precision or 'default'}"
    label = f"OpenVINO ({precision or 'default precision'})"
    try:
        import openvino as ov
    except ImportError:
        return _missing(name, label, "openvino")
    label = f"OpenVINO {ov.__version__} ({precision or 'default precision'})"
    config: dict[str, Any] = {"PERFORMANCE_HINT": "LATENCY", "INFERENCE_NUM_THREADS": threads}
    if precision:
        config["INFERENCE_PRECISION_HINT"] = precision
    try:
        with tempfile.TemporaryDirectory(prefix="kiln-bench-ov-") as tmp:
            path = Path(tmp) / "model.onnx"
            path.write_bytes(model.SerializeToString())
            compiled = ov.Core().compile_model(str(path), "CPU", config)
        request = compiled.create_infer_request()
        inputs = dict(feed)

        def run():
            request.infer(inputs)
            return request.get_output_tensor(0).data

        output = np.array(run())
        if not precision:
            label += f", runs in {compiled.get_property('INFERENCE_PRECISION_HINT')}"
    except Exception as e:  # noqa: BLE001 - any engine error is reported, the suite goes on
        return _failed(name, label, e)
    return Reference(name, label, run, output, checked=precision is not None)


def pytorch_eager(model, feed: Mapping[str, np.ndarray], threads: int) -> Reference:
    """The graph run op by op by PyTorch eager (``onnx_to_torch``), ``threads`` threads."""
    try:
        import torch
    except ImportError:
        return _missing("pytorch", "PyTorch eager", "torch")
    from kiln.relay.testing import onnx_to_torch

    label = f"PyTorch {torch.__version__} eager"
    torch.set_num_threads(threads)
    try:
        module = onnx_to_torch(model)
        args = [torch.from_numpy(v) for v in feed.values()]

        def run():
            with torch.inference_mode():
                return module(*args)

        output = run().numpy()
    except Exception as e:  # noqa: BLE001
        return _failed("pytorch", label, e)
    return Reference("pytorch", label, run, output)


#: the ``torch.compile`` backends timed, and the cache directory each compiles into (empty
#: for the timed first call: a cold compile, as kiln's own is timed)
TORCH_COMPILE_BACKENDS = {"inductor": "TORCHINDUCTOR_CACHE_DIR", "kiln": "KILN_CACHE_DIR"}


def torch_compile(model, feed: Mapping[str, np.ndarray], threads: int,
                  backend: str) -> Reference:
    """``torch.compile(onnx_to_fx(model), backend=backend)``, ``threads`` threads, inputs in
    torch-allocated (64-byte aligned) tensors; the first call timed as the compile."""
    name = f"torch_compile_{backend}"
    label = f"torch.compile ({backend})"
    try:
        import torch
    except ImportError:
        return _missing(name, label, "torch")
    from kiln.relay.testing import onnx_to_fx

    label = f"PyTorch {torch.__version__} torch.compile ({backend})"
    torch.set_num_threads(threads)
    try:
        if backend == "kiln":
            from kiln.relay.frontend import torch_compile as _  # noqa: F401 - registers it
        torch._dynamo.reset()
        compiled = torch.compile(onnx_to_fx(model), backend=backend)
        args = [torch.from_numpy(v).clone() for v in feed.values()]

        def run():
            with torch.inference_mode():
                return compiled(*args)

        with _fallbacks() as fallbacks, \
                fresh_cache("kiln-bench-torch-compile-", TORCH_COMPILE_BACKENDS[backend]):
            t0 = time.perf_counter()
            output = run().numpy()
            compile_s = time.perf_counter() - t0
    except Exception as e:  # noqa: BLE001
        return _failed(name, label, e)
    note = f"runs EAGERLY (kiln fell back: {fallbacks[0]})" if fallbacks else ""
    return Reference(name, label + (", eager fallback" if fallbacks else ""), run, output,
                     note=note, compile_s=compile_s)


@contextmanager
def _fallbacks() -> Iterator[list[str]]:
    """The messages kiln's TorchDynamo backend logs while the block runs (each a graph it
    runs eagerly, and why)."""
    messages: list[str] = []

    class Collect(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            messages.append(record.getMessage())

    logger, handler = logging.getLogger("kiln.torch"), Collect(logging.WARNING)
    logger.addHandler(handler)
    try:
        yield messages
    finally:
        logger.removeHandler(handler)


#: IREE's ONNX importer legalizes BatchNormalization and a few others only from opset 17 on;
#: older models are upgraded by the importer (ONNX's version converter)
IREE_MIN_OPSET = 17


def _iree_opset(model) -> int:
    default = [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")]
    return max(default + [IREE_MIN_OPSET])


def _import_onnx(importer, argv: list[str]) -> None:
    """Run IREE's ONNX importer on command-line arguments: its ``main`` takes parsed
    arguments from IREE 3.x on (``parse_arguments``), a list of strings before."""
    parse = getattr(importer, "parse_arguments", None)
    importer.main(parse(argv) if parse is not None else argv)


def iree(model, feed: Mapping[str, np.ndarray], threads: int) -> Reference:
    """IREE: the ONNX model imported to MLIR, compiled for ``llvm-cpu`` (host CPU), run by
    the ``local-task`` driver with ``threads`` worker threads."""
    try:
        import iree.compiler as ireec
        import iree.runtime as ireert
        from iree.compiler.tools.import_onnx import __main__ as onnx_importer
    except ImportError:
        return _missing("iree", "IREE", "iree")
    version = getattr(ireec, "__version__", "")
    label = f"IREE {version} (llvm-cpu, host)" if version else "IREE (llvm-cpu, host)"
    try:
        with tempfile.TemporaryDirectory(prefix="kiln-bench-iree-") as tmp:
            onnx_path, mlir_path = Path(tmp) / "model.onnx", Path(tmp) / "model.mlir"
            onnx_path.write_bytes(model.SerializeToString())
            _import_onnx(onnx_importer, [str(onnx_path), "-o", str(mlir_path),
                                         "--opset-version", str(_iree_opset(model))])
            vmfb = ireec.compile_file(str(mlir_path), target_backends=["llvm-cpu"],
                                      extra_args=["--iree-llvmcpu-target-cpu=host"])
        config = ireert.Config("local-task")
        ireert.flags.parse_flags(f"--task_topology_max_group_count={threads}")
        ctx = ireert.SystemContext(config=config)
        ctx.add_vm_module(ireert.VmModule.copy_buffer(ctx.instance, vmfb))
        entry = ctx.modules.module[model.graph.name]
        args = list(feed.values())

        def run():
            return entry(*args)

        output = np.asarray(run().to_host())
    except Exception as e:  # noqa: BLE001
        return _failed("iree", label, e)
    return Reference("iree", label, run, output)


#: the engines a run may leave out (``--skip``); onnxruntime gives the reference output
ENGINES = ("openvino", "pytorch", "torch_compile", "iree")


def all_references(model, feed: Mapping[str, np.ndarray], threads: int,
                   skip: Collection[str] = ()) -> list[Reference]:
    """Every reference engine on ``model`` but those of ``skip`` (names of :data:`ENGINES`);
    the first, onnxruntime with its defaults, gives the fp32 output the others (and kiln)
    are checked against."""
    unknown = set(skip) - set(ENGINES)
    if unknown:
        raise ValueError(f"unknown engine(s) {', '.join(sorted(unknown))}; "
                         f"known: {', '.join(ENGINES)}")
    engines: list[tuple[str, Callable[[], Reference]]] = [
        ("onnxruntime", lambda: onnxruntime_defaults(model, feed, threads)),
        ("onnxruntime", lambda: onnxruntime_kiln_settings(model, feed, threads)),
        ("openvino", lambda: openvino(model, feed, threads, "f32")),
        ("openvino", lambda: openvino(model, feed, threads, None)),
        ("pytorch", lambda: pytorch_eager(model, feed, threads)),
        *(("torch_compile", functools.partial(torch_compile, model, feed, threads, b))
          for b in TORCH_COMPILE_BACKENDS),
        ("iree", lambda: iree(model, feed, threads))]
    return [make() for engine, make in engines if engine not in skip]


__all__ = ["ENGINES", "Reference", "all_references", "onnxruntime_defaults",
           "onnxruntime_kiln_settings", "openvino", "pytorch_eager", "torch_compile", "iree"]
