"""kiln's demo (``python -m kiln.demo``, or ``bash scripts/demo.sh``).

Vector add of 2**20 float32 numbers, the book's first program (§1.2) with the CPU schedule of
§4.3: split the loop, run the outer part in parallel threads and the inner part as SIMD
vectors. It prints the lowered loop program, builds it with the C backend, checks the result
against numpy, and times kiln against numpy (median of repeated runs). If a primitive is not
available in this version of kiln, it says so and falls back to the default schedule.
"""

from __future__ import annotations

import statistics
import sys
import timeit

import numpy as np

import kiln
from kiln import te

N = 1 << 20
VECTOR_LANES = 16  # one AVX-512 register of float32; narrower SIMD splits it in the C compiler


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
    outer, inner = s[C].split(C.op.axis[0], factor=VECTOR_LANES)
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


def main() -> int:
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
    return 0


if __name__ == "__main__":
    sys.exit(main())
