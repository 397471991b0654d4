"""GPU sweep: every candidate schedule of the CUDA workloads of issue 22, timed once, to pick
the defaults.

Candidates:

* SGEMM 2048³ and 4096³: the variants of examples/assignment/gemm_gpu.py in
  :data:`SGEMM_VARIANTS` (register tiles 4x4 to 8x8 per thread, block tiles 64x64 to
  128x128, tk 8/16, virtual threads, A transposed in shared memory);
* depthwise 3x3 (MobileNet sizes: 256@56², 512@14², stride 2 128@112²): the assignment's
  schedule and ``topi.cuda.schedule_depthwise_conv2d_nchw`` with its default and each
  config of :data:`DEPTHWISE_CONFIGS` (output tile per block, outputs per thread, channels
  per block);
* depthwise-separable (depthwise 3x3 + pointwise 1x1, 128@56² → 128 and 512@14² → 512): the
  default depthwise schedule and each GEMM variant of :data:`POINTWISE_GEMMS` for the
  pointwise convolution.

Each candidate is checked against PyTorch (cuBLAS / cuDNN, TF32 off), then timed
interleaved with it (``benchmarks.gpu.measure``: CUDA events, median of repeats); the table
gives time, TFLOP/s (GB/s for depthwise), the ratio to PyTorch and whether the result was
right, and marks the fastest correct candidate of each workload. Without a GPU every
candidate is still built and compiled with NVRTC for sm_90, and nothing is timed.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import common, gpu  # noqa: E402
from benchmarks.common import load_example  # noqa: E402

NAME = "gpu_sweep"
DESCRIPTION = "CUDA: time every candidate schedule (SGEMM, depthwise, dw-separable) once"

#: knobs of topi.cuda's depthwise schedule tried per output size (rows = columns)
DEPTHWISE_CONFIGS: dict[int, dict[str, dict[str, int]]] = {
    56: {
        "t4x56_p1x2": {"tile_h": 4, "tile_w": 56, "per_h": 1, "per_w": 2, "channels": 1},
        "t8x56_p4x2_c2": {"tile_h": 8, "tile_w": 56, "per_h": 4, "per_w": 2, "channels": 2},
        "t8x28_p2x1": {"tile_h": 8, "tile_w": 28, "per_h": 2, "per_w": 1, "channels": 1},
        "t14x56_p2x2": {"tile_h": 14, "tile_w": 56, "per_h": 2, "per_w": 2, "channels": 1},
        "t8x56_p1x1": {"tile_h": 8, "tile_w": 56, "per_h": 1, "per_w": 1, "channels": 1},
        "t28x56_p4x2": {"tile_h": 28, "tile_w": 56, "per_h": 4, "per_w": 2, "channels": 1},
        "t4x28_p2x2_c4": {"tile_h": 4, "tile_w": 28, "per_h": 2, "per_w": 2, "channels": 4},
    },
    14: {
        "t14x14_p1x1": {"tile_h": 14, "tile_w": 14, "per_h": 1, "per_w": 1, "channels": 1},
        "t14x14_p2x1_c2": {"tile_h": 14, "tile_w": 14, "per_h": 2, "per_w": 1, "channels": 2},
        "t14x14_p7x1_c4": {"tile_h": 14, "tile_w": 14, "per_h": 7, "per_w": 1, "channels": 4},
        "t14x14_p2x2_c4": {"tile_h": 14, "tile_w": 14, "per_h": 2, "per_w": 2, "channels": 4},
        "t7x14_p1x2_c2": {"tile_h": 7, "tile_w": 14, "per_h": 1, "per_w": 2, "channels": 2},
    },
}

#: (channels, size, stride) of the depthwise workloads
DEPTHWISE_CASES = ((256, 56, 1), (512, 14, 1), (128, 112, 2))

#: GEMM variants (examples/assignment/gemm_gpu.py) tried for SGEMM
SGEMM_VARIANTS = ("optimized", "optimized_8x8_tk8", "vthread_8x8_tk8", "vthread_8x8_tk16",
                  "vthread_8x8_tk8_at", "vthread_8x8_tk16_at", "vthread_4x8_tk8",
                  "contiguous_8x8_tk8")

#: GEMM variants tried for the pointwise convolution of the depthwise-separable block
POINTWISE_GEMMS = ("optimized", "optimized_8x8_tk8", "vthread_4x8_tk8", "vthread_8x8_tk8_at",
                   "vthread_8x4_16x7_tk8")

#: (channels, size, output channels) of the depthwise-separable workloads
DWSEP_CASES = ((128, 56, 128), (512, 14, 512))


def candidates(quick: bool = False) -> Iterator[tuple[str, str, dict[str, Any]]]:
    """``(workload, candidate, workload dict of benchmarks.gpu)`` for every candidate."""
    gemm = load_example("assignment", "gemm_gpu")
    dwsp = load_example("assignment", "dwsp_conv2d_gpu")
    for n in ((2048,) if quick else (2048, 4096)):
        for name in SGEMM_VARIANTS:
            s, a, b, c = gemm.VARIANTS[name](n, n, n)
            yield f"SGEMM {n}³", name, {
                "sched": s, "args": [a, b, c], "flop": 2 * n**3,
                "torch": lambda t, x, y: t.matmul(x, y)}
    for c, hw, stride in DEPTHWISE_CASES:
        label = f"depthwise 3×3/{stride} {c}@{hw}²"
        if stride == 1:
            s, inp, ker, o = dwsp.make_dwsp_conv2d_gpu_scheduler(1, c, hw, hw, 3)
            yield label, "assignment", {**gpu.depthwise(c, hw), "sched": s,
                                        "args": [inp, ker, o]}
        yield label, "topi default", gpu.depthwise(c, hw, stride)
        for name, cfg in DEPTHWISE_CONFIGS[hw // stride].items():
            yield label, name, gpu.depthwise(c, hw, stride, cfg)
    for c, hw, co in DWSEP_CASES:
        for name in POINTWISE_GEMMS:
            yield (f"depthwise-separable {c}@{hw}² → {co}", f"pointwise {name}",
                   gpu.depthwise_separable(c, hw, co, gemm.VARIANTS[name]))


def _rate(w: dict[str, Any], seconds: float) -> str:
    parts = w.get("parts", [w])
    if len(parts) == 1 and "bytes" in w:
        return f"{w['bytes'] / seconds / 1e9:.0f} GB/s"
    return f"{w['flop'] / seconds / 1e12:.2f} TFLOP/s"


def run(quick: bool = False, out_dir: str | Path | None = None, profile: bool = False,
        verbose: bool = True) -> str:

    del profile
    started, t0 = time.time(), time.perf_counter()
    torch, have_gpu = gpu.torch_on_gpu()
    figures: list[common.Figure] = []
    details: dict[str, Any] = {}
    best: dict[str, tuple[float, str]] = {}
    for workload, name, w in candidates(quick):
        key = f"{workload}: {name}"
        if not have_gpu:
            figures.append(common.Figure(key, key, None, "s", notes=gpu.compile_only(w)))
            continue
        r = gpu.measure(w, torch, 3 if quick else 5)
        details[key] = r
        if r["correct"] and r["kiln_s"] < best.get(workload, (float("inf"), ""))[0]:
            best[workload] = (r["kiln_s"], name)
        figures.append(gpu.kernel_figure(key, f"{key} ({_rate(w, r['kiln_s'])})", r))
    for f in figures:
        workload, name = f.key.split(": ", 1)
        if best.get(workload, (0.0, None))[1] == name:
            f.notes = "fastest"
    details["fastest"] = {wl: name for wl, (_, name) in best.items()}
    return gpu.write_gpu_report(NAME, figures, torch, have_gpu, settings={"quick": quick},
                                details=details, started=started, t0=t0, out_dir=out_dir,
                                title="GPU schedule sweep (CUDA)", verbose=verbose)


def main(argv: Sequence[str] | None = None) -> int:
    args = common.suite_parser(NAME, DESCRIPTION).parse_args(argv)
    run(quick=args.quick, out_dir=args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
