"""GPU suite: kiln's CUDA schedules against PyTorch (cuBLAS / cuDNN, TF32 off), issue 5.

Workloads: SGEMM 1024-4096 (examples/assignment/gemm_gpu.py), the assignment's conv1d
(M=4096, N=128) and depthwise conv2d (1x256x56x56 and 1x512x14x14, 3x3; the assignment's
schedule and ``topi.cuda``'s), MobileNet's depthwise-separable convolution (a depthwise 3x3
kernel then the pointwise 1x1 convolution as a GEMM of 128 x 28 tiles, which divide
MobileNet's maps; the two kernels' times added, as are PyTorch's two calls), and the book's
§5.5 convolution with virtual threads (64 channels, 64x64, 3x3). Each kernel's result is
checked against PyTorch first; then kiln (``time_evaluator``, CUDA events) and PyTorch (CUDA
events around back-to-back calls) are timed interleaved, median of repeats.

Without a GPU (or without PyTorch's CUDA build) every kernel is still built and compiled with
NVRTC, and the report says that nothing was timed.
"""

from __future__ import annotations

import statistics
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import common  # noqa: E402
from benchmarks.common import load_example  # noqa: E402

NAME = "gpu"
#: the SGEMM schedule of examples/assignment/gemm_gpu.py's VARIANTS that the sweep found fastest
BEST_SGEMM = "vthread_8x8_tk16_at"
DESCRIPTION = ("CUDA: SGEMM, conv1d, depthwise(-separable), the book's conv vs PyTorch "
               "(needs a GPU)")


def workloads(quick: bool) -> list[dict[str, Any]]:
    """Each workload: its kiln schedule, input shapes, FLOPs and the PyTorch reference."""
    gemm = load_example("assignment", "gemm_gpu")
    conv1d = load_example("assignment", "conv1d_gpu")
    dwsp = load_example("assignment", "dwsp_conv2d_gpu")
    ch5 = load_example("book", "ch5_gpu")
    out = []
    for n in ([1024, 2048] if quick else [1024, 2048, 4096]):
        s, A, B, C = gemm.make_gemm_gpu_scheduler(n, n, n)
        out.append({"key": f"sgemm.{n}", "label": f"SGEMM {n}³", "sched": s, "args": [A, B, C],
                    "flop": 2 * n**3, "torch": lambda t, x, y: t.matmul(x, y)})
    # the fastest variant of the GPU sweep on an H200 (docs/cuda.md): 128 x 128 block tiles,
    # 8 x 8 per thread over 2 x 2 virtual threads, A transposed in shared memory
    n = 2048 if quick else 4096
    s, A, B, C = gemm.VARIANTS[BEST_SGEMM](n, n, n)
    out.append({"key": f"sgemm.{n}.{BEST_SGEMM}", "label": f"SGEMM {n}³, {BEST_SGEMM}",
                "sched": s, "args": [A, B, C], "flop": 2 * n**3,
                "torch": lambda t, x, y: t.matmul(x, y)})
    m, k = 4096, 128
    s, A, W, B = conv1d.make_conv1d_gpu_scheduler(m, k)
    out.append({"key": "conv1d.4096x128", "label": "conv1d 4096 * 128 (full)", "sched": s,
                "args": [A, W, B], "flop": 2 * m * k,
                "torch": lambda t, a, w: t.nn.functional.conv1d(
                    a.view(1, 1, -1), w.flip(0).view(1, 1, -1), padding=k - 1).view(-1)})
    for c, hw in ((256, 56), (512, 14)):
        s, inp, ker, o = dwsp.make_dwsp_conv2d_gpu_scheduler(1, c, hw, hw, 3)
        out.append({"key": f"depthwise.{c}x{hw}", "label": f"depthwise 3×3 {c}@{hw}²",
                    "sched": s, "args": [inp, ker, o], "flop": 2 * c * hw * hw * 9,
                    "torch": lambda t, x, w, c=c: t.nn.functional.conv2d(x, w, padding=1,
                                                                         groups=c)})
        out.append({**depthwise(c, hw), "key": f"depthwise.{c}x{hw}.topi",
                    "label": f"depthwise 3×3 {c}@{hw}², topi.cuda"})
    for c, hw, co in ((128, 56, 128), (512, 14, 512)):
        out.append(depthwise_separable(c, hw, co, gemm.VARIANTS["vthread_8x4_16x7_tk8"]))
    out.append(_elementwise_chain(1 << (24 if quick else 26)))
    sch, args = ch5.conv_vthread(64, 64, 64, 3, 1, 1)
    out.append({"key": "conv.book_vthread", "label": "book §5.5 conv 64@64², vthread",
                "sched": sch, "args": list(args), "flop": 2 * 64 * 64 * 64 * 64 * 9,
                "torch": lambda t, x, w: t.nn.functional.conv2d(x[None], w, padding=1)[0]})
    return out


def depthwise(c: int, hw: int, stride: int = 1, config: dict[str, int] | None = None
              ) -> dict[str, Any]:
    """Depthwise 3x3 convolution (padding 1) of a ``c``-channel ``hw x hw`` image, scheduled
    by ``topi.cuda.schedule_depthwise_conv2d_nchw`` (``config``: its knobs)."""
    from kiln import te, topi

    x = te.placeholder((1, c, hw, hw), name="x")
    w = te.placeholder((c, 1, 3, 3), name="w")
    y = topi.nn.depthwise_conv2d_nchw(x, w, stride, 1, 1)
    out_hw = int(y.shape[2])
    return {"key": f"depthwise.{c}x{hw}.s{stride}", "label": f"depthwise 3×3/{stride} {c}@{hw}²",
            "sched": topi.cuda.schedule_depthwise_conv2d_nchw(y, config), "args": [x, w, y],
            "flop": 2 * c * out_hw * out_hw * 9,
            "bytes": 4 * c * (hw * hw + out_hw * out_hw + 9),
            "torch": lambda t, a, b: t.nn.functional.conv2d(a, b, stride=stride, padding=1,
                                                            groups=c)}


def pointwise(c: int, hw: int, co: int, make_gemm: Callable) -> dict[str, Any]:
    """The pointwise (1x1) convolution of ``c`` channels of ``hw x hw`` pixels to ``co`` as
    the GEMM ``W (co, c) @ X (c, hw*hw)`` scheduled by ``make_gemm(M, K, N)``."""
    s, a, b, out = make_gemm(co, c, hw * hw)
    return {"key": f"pointwise.{c}x{hw}.{co}", "label": f"pointwise 1×1 {c}→{co}@{hw}²",
            "sched": s, "args": [a, b, out], "flop": 2 * co * c * hw * hw,
            "torch": lambda t, wt, x: t.nn.functional.conv2d(
                x.view(1, c, hw, hw), wt.view(co, c, 1, 1)).view(co, hw * hw)}


def depthwise_separable(c: int, hw: int, co: int, make_gemm: Callable,
                        config: dict[str, int] | None = None) -> dict[str, Any]:
    """MobileNet's block: :func:`depthwise` then :func:`pointwise`, two kernels."""
    parts = [depthwise(c, hw, 1, config), pointwise(c, hw, co, make_gemm)]
    return {"key": f"dwsep.{c}x{hw}.{co}", "label": f"depthwise-separable {c}@{hw}² → {co}",
            "parts": parts, "flop": sum(p["flop"] for p in parts)}


def _elementwise_chain(n: int) -> dict[str, Any]:
    """``relu(a * b + c) * 0.5`` over ``n`` floats, one fused kernel (topi.cuda's injective
    schedule): memory-bound, so it is judged by the bytes it moves against the GPU's copy
    bandwidth (measured in the same run)."""
    from kiln import te, topi

    a, b, c = (te.placeholder((n,), name=x) for x in "abc")
    d = te.compute((n,), lambda i: te.max(a[i] * b[i] + c[i], 0.0) * 0.5, name="d")
    with __import__("kiln").target.Target("cuda"):
        s = topi.cuda.schedule_injective(d)
    return {"key": f"elementwise.{n >> 20}M", "label": f"fused relu(a*b+c)*0.5, {n >> 20}M floats",
            "sched": s, "args": [a, b, c, d], "flop": 4 * n, "bytes": 16 * n,
            "torch": lambda t, x, y, z: t.relu(x * y + z) * 0.5}


def copy_bandwidth(torch, nbytes: int = 1 << 30) -> float:
    """Device-to-device copy bandwidth in bytes/s (bytes read plus bytes written)."""
    x = torch.empty(nbytes // 4, dtype=torch.float32, device="cuda")
    y = torch.empty_like(x)
    y.copy_(x)
    t = statistics.median(cuda_time(lambda: y.copy_(x), torch, 10) for _ in range(5))
    return 2 * nbytes / t


def torch_on_gpu() -> tuple[Any, bool]:
    """``(torch or None, have_gpu)``: PyTorch where installed, and whether kiln and PyTorch
    both see a CUDA GPU; then TF32 is switched off, so that the references compute in fp32
    as kiln does."""
    import kiln

    try:
        import torch
    except ImportError:
        return None, False
    have_gpu = kiln.cuda(0).exist and torch.cuda.is_available()
    if have_gpu:
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
    return torch, have_gpu


def kernel_figure(key: str, label: str, r: dict[str, Any]) -> common.Figure:
    """The row of one kernel measured by :func:`measure`: kiln's time against PyTorch's,
    marked when its result was wrong."""
    return common.Figure(
        key, label, r["kiln_s"], "s", reference=r["torch_s"], reference_label="PyTorch",
        notes="" if r["correct"] else f"WRONG RESULT (rel err {r['max_rel_err']:.1e})")


def write_gpu_report(name: str, figures: list[common.Figure], torch, have_gpu: bool, *,
                     settings: dict[str, Any], details: dict[str, Any], started: float,
                     t0: float, out_dir, title: str, verbose: bool) -> str:
    """Write a GPU suite's report (the GPU's name among the machine facts, TF32 off in the
    settings), show it, and return its text."""
    _, md_path, text = common.write_report(
        name, figures, machine=gpu_machine_info(torch, have_gpu),
        settings={**settings, "tf32": False}, details=details, started=started,
        duration_s=time.perf_counter() - t0, out_dir=out_dir, title=title)
    common.show_report(text, md_path, verbose)
    return text


def gpu_machine_info(torch, have_gpu: bool) -> dict[str, Any]:
    """``common.machine_info()`` with the GPU's name where one was used."""
    machine = common.machine_info()
    if have_gpu:
        machine["gpu"] = torch.cuda.get_device_name(0)
    return machine


def cuda_time(fn: Callable[[], Any], torch, number: int) -> float:
    """Seconds per call of ``fn`` over ``number`` back-to-back calls, by CUDA events."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(number):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3 / number


def measure(w: dict[str, Any], torch, repeat: int) -> dict[str, Any]:
    """Check ``w`` against PyTorch, then time both (a workload of ``parts``: the sums)."""
    if "parts" in w:
        rs = [measure(p, torch, repeat) for p in w["parts"]]
        k, t = sum(r["kiln_s"] for r in rs), sum(r["torch_s"] for r in rs)
        return {"kiln_s": k, "torch_s": t, "kiln_gflops": w["flop"] / k / 1e9,
                "torch_gflops": w["flop"] / t / 1e9,
                "max_rel_err": max(r["max_rel_err"] for r in rs),
                "correct": all(r["correct"] for r in rs), "parts": rs}
    return _measure_kernel(w, torch, repeat)


def compile_only(w: dict[str, Any]) -> str:
    """Without a GPU: build ``w`` (each part) for sm_90 with NVRTC, or lower it where NVRTC
    is missing; returns the note saying which."""
    import kiln
    from kiln.runtime import cuda_driver

    for p in w.get("parts", [w]):
        if cuda_driver.available():
            kiln.build(p["sched"], p["args"], target="cuda -arch=sm_90")
        else:
            kiln.lower(p["sched"], p["args"])
    if cuda_driver.available():
        return "compiled for sm_90, not timed: no CUDA GPU / PyTorch CUDA"
    return "lowered only: no NVRTC, no GPU"


def _measure_kernel(w: dict[str, Any], torch, repeat: int) -> dict[str, Any]:
    import kiln

    dev = kiln.cuda(0)
    mod = kiln.build(w["sched"], w["args"], target="cuda")
    rng = np.random.default_rng(0)
    host = [rng.standard_normal([int(d) for d in t.shape]).astype("float32")
            for t in w["args"]]
    arrays = [kiln.nd.array(h, dev) for h in host]
    mod(*arrays)
    ins = [torch.from_numpy(h).cuda() for h in host[:-1]]
    with torch.no_grad():
        ref = w["torch"](torch, *ins).cpu().numpy()
    err = float(np.max(np.abs(arrays[-1].numpy() - ref)) / max(1.0, float(np.abs(ref).max())))
    timer = mod.time_evaluator(mod.entry_name, dev, number=20, repeat=1)
    kiln_t, torch_t = [], []
    with torch.no_grad():
        for _ in range(repeat):
            kiln_t.append(timer(*arrays).mean)
            torch_t.append(cuda_time(lambda: w["torch"](torch, *ins), torch, 20))
    k, t = statistics.median(kiln_t), statistics.median(torch_t)
    r = {"kiln_s": k, "torch_s": t, "kiln_gflops": w["flop"] / k / 1e9,
         "torch_gflops": w["flop"] / t / 1e9, "max_rel_err": err, "correct": err < 1e-3}
    if "bytes" in w:
        r["kiln_gbps"] = w["bytes"] / k / 1e9
    return r


def run(quick: bool = False, out_dir: str | Path | None = None, profile: bool = False,
        verbose: bool = True) -> str:

    del profile
    started, t0 = time.time(), time.perf_counter()
    torch, have_gpu = torch_on_gpu()
    figures, details = [], {}
    if have_gpu:
        details["copy_bandwidth_gbps"] = copy_bandwidth(torch) / 1e9

    for w in workloads(quick):
        if not have_gpu:
            figures.append(common.Figure(w["key"], w["label"], None, "s",
                                         notes=compile_only(w)))
            continue
        r = measure(w, torch, 5 if quick else 11)
        details[w["key"]] = r
        rate = (f"{r['kiln_gbps']:.0f} GB/s = "
                f"{100 * r['kiln_gbps'] / details['copy_bandwidth_gbps']:.0f}% of copy"
                if "kiln_gbps" in r else
                f"{r['kiln_gflops']:.0f} vs {r['torch_gflops']:.0f} GFLOP/s")
        figures.append(kernel_figure(w["key"], f"{w['label']} ({rate})", r))
    return write_gpu_report(NAME, figures, torch, have_gpu, settings={"quick": quick},
                            details=details, started=started, t0=t0, out_dir=out_dir,
                            title="GPU (CUDA)", verbose=verbose)


def main(argv: Sequence[str] | None = None) -> int:
    args = common.suite_parser(NAME, DESCRIPTION).parse_args(argv)
    run(quick=args.quick, out_dir=args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
