"""Latency hiding on the VTA simulator (issue 16): ResNet-18's 3x3 convolutions with C >= 64
(stride 1), each with 1 and 2 virtual threads.

Each layer runs examples/vta/convolution.py (VTA's convolution tutorial schedule: output
tiles of ``h_block x w_block`` pixels by ``oc_block`` channel blocks, input channels one
block at a time) on ``vta.testing.simulator``, checks the int8 output against numpy, and
reports the simulated cycles and the compute utilization: GEMM-busy cycles over all cycles
(docs/vta.md explains the latency model and where the idle cycles go). The numbers are
deterministic: they depend on the latency model, not on this machine.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

if __package__ in (None, ""):  # run as `python benchmarks/vta.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import common  # noqa: E402

NAME = "vta"
DESCRIPTION = ("VTA simulator: ResNet-18 3x3 conv layers (C >= 64), cycles and GEMM "
               "utilization with 1 and 2 virtual threads")

#: (channels, height = width, h_block, w_block, oc_block): ResNet-18's stride-1 3x3 layers
LAYERS = [(64, 56, 7, 14, 2), (128, 28, 7, 14, 4), (256, 14, 7, 14, 8), (512, 7, 7, 7, 8)]


def measure(channels: int, hw: int, h_block: int, w_block: int, oc_block: int,
            vthreads: int) -> dict[str, Any]:
    """Build and simulate one layer; its statistics, utilization and correctness."""
    import kiln.vta as vta

    conv = common.load_example("vta", "convolution")
    env = vta.get_env()
    s, args = conv.conv2d(env, in_channels=channels, out_channels=channels, height=hw,
                          width=hw, h_block=h_block, w_block=w_block, oc_block=oc_block,
                          vthreads=vthreads)
    f = vta.build(s, args, "ext_dev", env.target_host)
    rng = np.random.default_rng(0)
    data = rng.integers(-128, 128, args[0].shape, dtype=np.int8)
    weight = rng.integers(-128, 128, args[1].shape, dtype=np.int8)
    out = np.zeros(args[2].shape, np.int8)
    vta.testing.simulator.clear_stats()
    f(data, weight, out)
    stats = vta.testing.simulator.stats()
    return {**stats, "utilization": stats["gemm_busy_cycles"] / stats["cycles"],
            "instructions": len(f.program.insns),
            "correct": bool(np.array_equal(out, conv.conv2d_reference(env, data, weight)))}


def run(quick: bool = False, out_dir: str | Path | None = None, profile: bool = False,
        verbose: bool = True) -> str:
    """Run the suite, write ``<out_dir>/vta.{json,md}``, return the markdown."""
    started, t0 = time.time(), time.perf_counter()
    say = common.progress(NAME, verbose)
    layers = LAYERS[2:] if quick else LAYERS
    rows = []
    for layer in layers:
        for vthreads in (1, 2):
            say(f"C={layer[0]} {layer[1]}x{layer[1]} vthreads={vthreads}")
            rows.append({"channels": layer[0], "hw": layer[1], "vthreads": vthreads,
                         **measure(*layer, vthreads)})
    lines = [f"# {NAME}: {DESCRIPTION}", "",
             "| layer | virtual threads | cycles | GEMM cycles | compute busy | load busy | "
             "store busy | utilization | correct |", "|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| C={r['channels']} {r['hw']}x{r['hw']} | {r['vthreads']} | {r['cycles']} | "
              f"{r['gemm_busy_cycles']} | {r['compute_busy_cycles']} | "
              f"{r['load_busy_cycles']} | {r['store_busy_cycles']} | "
              f"{100 * r['utilization']:.1f}% | {'yes' if r['correct'] else 'NO'} |"
              for r in rows]
    peak = {v: max(r["utilization"] for r in rows if r["vthreads"] == v) for v in (1, 2)}
    lines += ["", f"peak utilization: {100 * peak[1]:.1f}% with 1 virtual thread, "
              f"{100 * peak[2]:.1f}% with 2 (the TVM paper: 70% -> 88%)", "",
              f"run {common.run_date(started)}, {time.perf_counter() - t0:.0f} s"]
    markdown = "\n".join(lines) + "\n"
    data = {"suite": NAME, "quick": quick, "rows": rows, "peak": peak}
    _, md_path = common.write_results(NAME, data, markdown, out_dir)
    common.show_report(markdown, md_path, verbose)
    return markdown


def main(argv: Sequence[str] | None = None) -> int:
    args = common.suite_parser(NAME, DESCRIPTION, "the two smaller layers only").parse_args(argv)
    run(quick=args.quick, out_dir=args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
