"""kiln's demo (``python -m kiln.demo``, ``kiln demo``, or ``bash scripts/demo.sh``).

1. Vector add of 2**20 float32 numbers, the book's first program (§1.2) with the CPU
   schedule of §4.3: split the loop, run the outer part in parallel threads and the inner
   part as SIMD vectors. It prints the lowered loop program, builds it with the C backend,
   checks the result against numpy, and times kiln against numpy (median of repeated runs).
   If a primitive is not available in this version of kiln, it says so and falls back to
   the default schedule.
2. A whole model: ResNet-18 at 224x224 (``kiln.relay.testing``, fixed random weights) built
   as an ONNX model, imported and compiled by ``relay.build``; it prints the fused kernels,
   checks the output against onnxruntime (max abs / relative difference) and times kiln
   against onnxruntime in the same process, interleaved (median). Skipped, saying so, when
   onnx or onnxruntime is not installed (``pip install 'kiln[onnx]'``).

``python -m kiln.demo --model mobilenet_v2`` demos the other network, ``--model none``
only the vector add.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import timeit

import numpy as np

import kiln
from kiln import te

N = 1 << 20


def vector_add(n: int):
    """The computation: ``c[i] = a[i] + b[i]`` for ``i < n``."""
    A = te.placeholder((n,), name="a")
    B = te.placeholder((n,), name="b")
    C = te.compute(A.shape, lambda i: A[i] + B[i], name="c")
    return A, B, C


def parallel_vectorized(n: int):
    """Schedule of book §4.3.4: split by the vector width, parallel outer, vectorized inner."""
    A, B, C = vector_add(n)
    s = te.create_schedule(C.op)
    from kiln.topi.x86 import lanes  # one vector register of float32: 16 AVX-512, 8 AVX2

    outer, inner = s[C].split(C.op.axis[0], factor=lanes("float32"))
    s[C].parallel(outer)
    s[C].vectorize(inner)
    return s, [A, B, C]


def default(n: int):
    """The default schedule: one sequential loop."""
    A, B, C = vector_add(n)
    return te.create_schedule(C.op), [A, B, C]


def build_best(n: int):
    """Lower and build the best schedule this kiln supports; return (name, text, module)."""
    for name, make in (("parallel + vectorize", parallel_vectorized), ("default", default)):
        try:
            s, args = make(n)
            text = str(kiln.lower(s, args, simple_mode=True))
            mod = kiln.build(s, args, target="llvm", name="vector_add")
            return name, text, mod
        except NotImplementedError as err:
            print(f"[{name} schedule not available in this kiln: {err}; falling back]")
    raise RuntimeError("no schedule could be built")


def time_kiln(mod, a, b, c, repeat: int = 7, number: int = 50) -> float:
    """Median seconds per call of the compiled function, via ``mod.time_evaluator``."""
    timer = mod.time_evaluator("vector_add", kiln.cpu(0), number=number, repeat=repeat)
    return statistics.median(timer(a, b, c).results)


def time_numpy(a, b, c, repeat: int = 7, number: int = 50) -> float:
    """Median seconds per call of ``np.add(a, b, out=c)``."""
    np.add(a, b, out=c)  # warm-up
    runs = timeit.repeat(lambda: np.add(a, b, out=c), repeat=repeat, number=number)
    return statistics.median(runs) / number


def vector_add_demo() -> None:
    print(f"kiln {getattr(kiln, '__version__', '?')}: vector add of {N} float32 numbers\n")
    schedule, text, mod = build_best(N)
    print(f"schedule: {schedule}\n\nlowered program (kiln.lower):\n{text}\n")

    rng = np.random.default_rng(0)
    a_np = rng.standard_normal(N, dtype=np.float32)
    b_np = rng.standard_normal(N, dtype=np.float32)
    a, b = kiln.nd.array(a_np), kiln.nd.array(b_np)
    c = kiln.nd.array(np.zeros(N, dtype=np.float32))
    mod(a, b, c)
    np.testing.assert_array_equal(c.numpy(), a_np + b_np)
    print("result: matches numpy exactly")

    t_kiln = time_kiln(mod, a, b, c)
    t_numpy = time_numpy(a_np, b_np, np.empty_like(a_np))
    gbytes = 3 * 4 * N / 1e9
    print(f"kiln : {t_kiln * 1e6:9.1f} us per call  ({gbytes / t_kiln:6.1f} GB/s)")
    print(f"numpy: {t_numpy * 1e6:9.1f} us per call  ({gbytes / t_numpy:6.1f} GB/s)")
    print(f"kiln runs at {t_numpy / t_kiln:.2f}x numpy's speed (median of repeats)")


def _threads() -> int:
    env = os.environ.get("OMP_NUM_THREADS", "").split(",")[0].strip()
    if env.isdigit() and int(env) > 0:
        return int(env)
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:
        return os.cpu_count() or 1


def model_demo(name: str = "resnet18", hw: int = 224, rounds: int = 10) -> bool:
    """Compile ``kiln.relay.testing``'s network ``name`` (an ONNX model) and compare it with
    onnxruntime. Returns whether the outputs agree (True when skipped)."""
    try:
        import onnxruntime  # noqa: F401

        from kiln.relay import testing
        from kiln.relay.testing import compare
    except ImportError as e:
        print(f"model demo skipped: {e} (pip install 'kiln[onnx]')")
        return True
    from kiln import relay

    model = testing.get_model(name, hw=hw)
    inp, x = testing.random_input(model)
    print(f"{name}: ONNX model built by kiln.relay.testing (fixed random weights, "
          f"{len(model.graph.node)} nodes), input {inp!r} {list(x.shape)} {x.dtype}")
    mod, params = relay.frontend.from_onnx(model)
    with relay.build_config(opt_level=3):
        lib = relay.build(mod, target="llvm", params=params)
    print(f"relay.build (opt_level=3) in {lib.build_seconds:.1f} s:\n{lib.summary}\n")
    threads = _threads()
    res = compare.against_onnxruntime(lib, model, {inp: x}, threads, rounds=rounds)
    print(f"output {list(res['output'].shape)}; {threads} threads for kiln and onnxruntime")
    print("\n".join(compare.report_lines(res, rounds)))
    return res["ok"]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m kiln.demo", description="kiln's demo")
    p.add_argument("--model", default="resnet18", choices=["resnet18", "mobilenet_v2", "none"],
                   help="the network compiled after the vector add (default resnet18)")
    p.add_argument("--hw", type=int, default=224, help="its input height and width")
    args = p.parse_args(argv)
    vector_add_demo()
    if args.model == "none":
        return 0
    print("\n" + "-" * 72 + "\n")
    return 0 if model_demo(args.model, args.hw) else 1


if __name__ == "__main__":
    sys.exit(main())
