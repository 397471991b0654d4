"""GPU convolution layers: ResNet-18's convolutions, direct against implicit GEMM, next to
PyTorch (cuDNN, TF32 off).

Every distinct convolution of ResNet-18 (the 7x7 stem, the 3x3 layers, the 1x1 strided
shortcuts), MobileNet's pointwise 512 -> 512 at 14x14 and MobileNetV2's pointwise layers,
at batch 1 and 16, each computed
two ways by ``topi.cuda`` with its fallback config (no tuning): ``conv2d_nchw`` (the
direct template) and ``conv2d_nchw_implicit_gemm``. Each result is checked against PyTorch
first, then kiln (``time_evaluator``, CUDA events) and PyTorch are timed interleaved, median
of repeats (:func:`benchmarks.gpu.measure`). The table says which of kiln's two is faster
per layer: the rule ``relay.build`` uses to choose (kiln/relay/strategy.py
``cuda_conv2d_nchw``) is checked against it.

Without a GPU each kernel is still compiled by NVRTC for sm_90 and nothing is timed.
``python -m benchmarks gpu_conv [--quick] [--out DIR]``.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import common, gpu  # noqa: E402

NAME = "gpu_conv"
DESCRIPTION = "CUDA: ResNet-18's conv layers, direct vs implicit GEMM vs PyTorch (needs a GPU)"

#: (in channels, size, out channels, kernel, stride, padding): ResNet-18's distinct
#: convolutions at 224x224, then MobileNet's pointwise 512 -> 512 at 14x14
LAYERS = [
    (3, 224, 64, 7, 2, 3),
    (64, 56, 64, 3, 1, 1),
    (64, 56, 128, 3, 2, 1), (128, 28, 128, 3, 1, 1), (64, 56, 128, 1, 2, 0),
    (128, 28, 256, 3, 2, 1), (256, 14, 256, 3, 1, 1), (128, 28, 256, 1, 2, 0),
    (256, 14, 512, 3, 2, 1), (512, 7, 512, 3, 1, 1), (256, 14, 512, 1, 2, 0),
    (512, 14, 512, 1, 1, 0),
]
#: MobileNetV2's pointwise (1x1, stride 1) convolutions of 16 to 960 channels (not yet
#: measured on a GPU: the rule for them comes from the whole-model figures)
POINTWISE = [(16, 112, 96, 1, 1, 0), (144, 56, 24, 1, 1, 0), (192, 28, 32, 1, 1, 0),
             (384, 14, 64, 1, 1, 0), (576, 14, 96, 1, 1, 0), (960, 7, 160, 1, 1, 0),
             (320, 7, 1280, 1, 1, 0)]
BATCHES = (1, 16)
#: kiln's variants: the direct template, and the implicit GEMM whose fallback aims at
#: ``MIN_BLOCKS`` = 256 blocks (aiming at 128, for larger register tiles, was slower at 19
#: of ResNet-18's 24 layers on an H200)
ALGORITHMS = {"direct": None, "implicit_gemm": 256}


def layer(batch: int, c: int, hw: int, co: int, k: int, stride: int, pad: int,
          algorithm: str) -> dict[str, Any]:
    """One convolution scheduled by ``topi.cuda`` with ``algorithm``'s fallback config."""
    from kiln import te, topi
    from kiln.target import Target
    from kiln.topi.cuda import conv2d_gemm

    x = te.placeholder((batch, c, hw, hw), name="x")
    w = te.placeholder((co, c, k, k), name="w")
    min_blocks = ALGORITHMS[algorithm]
    compute = topi.cuda.conv2d_nchw if min_blocks is None else \
        topi.cuda.conv2d_nchw_implicit_gemm
    default, conv2d_gemm.MIN_BLOCKS = conv2d_gemm.MIN_BLOCKS, min_blocks or 0
    try:
        with Target("cuda"):
            y = compute(x, w, stride, pad, 1)
            s = topi.cuda.schedule_conv2d_nchw([y])
    finally:
        conv2d_gemm.MIN_BLOCKS = default
    out_hw = int(y.shape[2])
    chosen = conv2d_gemm.prefers_implicit_gemm(x, w, stride, pad, 1) == (min_blocks is not None)
    return {"key": f"{algorithm}.b{batch}.{c}x{hw}.{co}.k{k}s{stride}",
            "label": f"b{batch} {c}@{hw}² → {co}, {k}×{k}/{stride}, {algorithm}"
                     f"{' (chosen)' if chosen else ''}",
            "sched": s, "args": [x, w, y], "flop": 2 * batch * co * out_hw**2 * c * k * k,
            "torch": lambda t, a, b: t.nn.functional.conv2d(a, b, stride=stride, padding=pad)}


def workloads(quick: bool) -> list[dict[str, Any]]:
    layers = LAYERS[1:4] if quick else LAYERS + POINTWISE
    return [layer(b, *shape, algorithm) for b in BATCHES for shape in layers
            for algorithm in ALGORITHMS]


def run(quick: bool = False, out_dir: str | Path | None = None, profile: bool = False,
        verbose: bool = True) -> str:

    del profile
    started, t0 = time.time(), time.perf_counter()
    torch, have_gpu = gpu.torch_on_gpu()
    figures, details = [], {}
    for w in workloads(quick):
        if not have_gpu:
            figures.append(common.Figure(w["key"], w["label"], None, "s",
                                         notes=gpu.compile_only(w)))
            continue
        try:
            r = gpu.measure(w, torch, 5 if quick else 9)
        except Exception as e:  # noqa: BLE001 - one failing layer is reported, the rest run
            figures.append(common.Figure(w["key"], w["label"], None, "s",
                                         notes=f"{type(e).__name__}: {e}"[:200]))
            continue
        details[w["key"]] = r
        figures.append(gpu.kernel_figure(
            w["key"], f"{w['label']} ({r['kiln_gflops']:.0f} vs {r['torch_gflops']:.0f} "
            f"GFLOP/s)", r))
    return gpu.write_gpu_report(NAME, figures, torch, have_gpu, settings={"quick": quick},
                                details=details, started=started, t0=t0, out_dir=out_dir,
                                title="GPU convolution layers", verbose=verbose)


def main(argv: Sequence[str] | None = None) -> int:
    args = common.suite_parser(NAME, DESCRIPTION).parse_args(argv)
    run(quick=args.quick, out_dir=args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
