"""The cost model against measurement (issue 19): predicted and measured time of a fixed set
of schedules, and their Spearman rank correlation.

The set (26 schedules): GEMM (naive, loop orders, tilings with and without vectorization,
a split reduction), a direct conv2d (CHW, 3x3, padding stage inlined or not, loop orders,
vectorized output rows, tiles) and elementwise kernels (vector add in every tail strategy at
an extent the factor does not divide, a 2-D add in row and column order, a transpose, an
exp). Each is lowered, its time predicted by ``kiln.cost.estimate`` on this machine's model
with one core, built, checked against numpy and timed on one thread (median of repeats).
The rank correlation says whether the model orders schedules as the machine does (issue 19's
goal: >= 0.8). Nothing here fails on a figure.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

if __package__ in (None, ""):  # run as `python benchmarks/cost_model.py`
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks import common  # noqa: E402
from benchmarks.common import Figure  # noqa: E402

NAME = "cost_model"
DESCRIPTION = ("kiln.cost.estimate against measured time: GEMM, conv2d and elementwise "
               "schedules, Spearman rank correlation (issue 19)")

#: a case: (key, builder) where builder(size) -> (schedule, args, numpy inputs -> outputs)
Case = tuple[str, Callable]


def _gemm(order: str, tile: int = 0, vec: bool = False, ksplit: int = 0):
    def make(n: int):
        from kiln import te

        A = te.placeholder((n, n), name="A")
        B = te.placeholder((n, n), name="B")
        k = te.reduce_axis((0, n), name="k")
        C = te.compute((n, n), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
        s = te.create_schedule(C.op)
        i, j = C.op.axis
        if tile:
            io, jo, ii, ji = s[C].tile(i, j, tile, tile)
            if ksplit:
                ko, ki = s[C].split(k, factor=ksplit)
                s[C].reorder(io, jo, ko, ii, ki, ji)
            else:
                s[C].reorder(io, jo, k, ii, ji)
            inner = ji
        elif order == "ikj":
            s[C].reorder(i, k, j)
            inner = j
        elif order == "jki":
            s[C].reorder(j, k, i)
            inner = i
        else:
            inner = k
        if vec:
            s[C].vectorize(inner)
        return s, [A, B, C], lambda a, b: a @ b
    return make


def _conv(pad_inline: bool, order: str = "", vec: bool = False, tile: int = 0):
    def make(n: int):
        from kiln import te

        c, hw, kk = 16, n // 8, 3
        X = te.placeholder((c, hw, hw), name="X")
        K = te.placeholder((c, c, kk, kk), name="K")
        P = te.compute((c, hw + 2, hw + 2), lambda ci, h, w: te.if_then_else(
            te.all(h >= 1, h <= hw, w >= 1, w <= hw), X[ci, h - 1, w - 1], 0.0), name="P")
        rc = te.reduce_axis((0, c), name="rc")
        rh = te.reduce_axis((0, kk), name="rh")
        rw = te.reduce_axis((0, kk), name="rw")
        Y = te.compute((c, hw, hw), lambda oc, h, w: te.sum(
            P[rc, h + rh, w + rw] * K[oc, rc, rh, rw], axis=[rc, rh, rw]), name="Y")
        s = te.create_schedule(Y.op)
        if pad_inline:
            s[P].compute_inline()
        oc, h, w = Y.op.axis
        if order == "rc_out":
            s[Y].reorder(oc, rc, h, rh, rw, w)
        if tile:
            wo, wi = s[Y].split(w, factor=tile)
            s[Y].reorder(oc, h, wo, rc, rh, rw, wi)
            w = wi
        if vec:
            s[Y].vectorize(w)

        def ref(x, kern):
            xp = np.pad(x, ((0, 0), (1, 1), (1, 1)))
            out = np.zeros((c, hw, hw), "float32")
            for a in range(kk):
                for b in range(kk):
                    out += np.einsum("oc,chw->ohw", kern[:, :, a, b],
                                     xp[:, a:a + hw, b:b + hw])
            return out
        return s, [X, K, Y], ref
    return make


def _vector_add(tail, vec: bool = True, factor: int = 16):
    def make(n: int):
        from kiln import te

        m = n * n + 3  # the factor never divides it
        A = te.placeholder((m,), name="A")
        B = te.placeholder((m,), name="B")
        C = te.compute((m,), lambda i: A[i] + B[i], name="C")
        s = te.create_schedule(C.op)
        if factor:
            _, inner = s[C].split(C.op.axis[0], factor=factor, tail=tail)
            if vec:
                s[C].vectorize(inner)
        return s, [A, B, C], lambda a, b: a + b
    return make


def _add2d(order: str, tile: int = 0):
    def make(n: int):
        from kiln import te

        m = 2 * n
        A = te.placeholder((m, m), name="A")
        B = te.placeholder((m, m), name="B")
        C = te.compute((m, m), lambda i, j: A[i, j] + B[i, j], name="C")
        s = te.create_schedule(C.op)
        i, j = C.op.axis
        if order == "col":
            s[C].reorder(j, i)
        if tile:
            s[C].tile(i, j, tile, tile)
        return s, [A, B, C], lambda a, b: a + b
    return make


def _transpose(tile: int):
    def make(n: int):
        from kiln import te

        m = 2 * n
        A = te.placeholder((m, m), name="A")
        B = te.compute((m, m), lambda i, j: A[j, i], name="B")
        s = te.create_schedule(B.op)
        if tile:
            s[B].tile(B.op.axis[0], B.op.axis[1], tile, tile)
        return s, [A, B], lambda a: a.T.copy()
    return make


def _exp(vec: bool):
    def make(n: int):
        from kiln import te

        m = n * n
        A = te.placeholder((m,), name="A")
        B = te.compute((m,), lambda i: te.exp(A[i]), name="B")
        s = te.create_schedule(B.op)
        if vec:
            _, inner = s[B].split(B.op.axis[0], factor=8)
            s[B].vectorize(inner)
        return s, [A, B], np.exp
    return make


CASES: tuple[Case, ...] = (
    ("gemm.ijk", _gemm("ijk")),
    ("gemm.ikj", _gemm("ikj")),
    ("gemm.ikj.vec", _gemm("ikj", vec=True)),
    ("gemm.jki", _gemm("jki")),
    ("gemm.tile8", _gemm("", tile=8)),
    ("gemm.tile16.vec", _gemm("", tile=16, vec=True)),
    ("gemm.tile32.vec", _gemm("", tile=32, vec=True)),
    ("gemm.tile32.k4.vec", _gemm("", tile=32, vec=True, ksplit=4)),
    ("conv.default", _conv(False)),
    ("conv.inline", _conv(True)),
    ("conv.rc_outer", _conv(False, order="rc_out")),
    ("conv.vec_rows", _conv(False, order="rc_out", vec=True)),
    ("conv.tile8.vec", _conv(False, tile=8, vec=True)),
    ("conv.tile4", _conv(False, tile=4)),
    ("add.guard", _vector_add("guard")),
    ("add.partition", _vector_add("partition")),
    ("add.predicate", _vector_add("predicate")),
    ("add.shift_inwards", _vector_add("shift_inwards")),
    ("add.default", _vector_add(None, factor=0)),
    ("add.guard.scalar", _vector_add("guard", vec=False)),
    ("add2d.row", _add2d("row")),
    ("add2d.col", _add2d("col")),
    ("add2d.tile16", _add2d("row", tile=16)),
    ("transpose.naive", _transpose(0)),
    ("transpose.tile16", _transpose(16)),
    ("exp.vec", _exp(True)),
)


def settings(quick: bool) -> dict:
    """Problem size ``n`` (GEMM n x n; conv n/8 x n/8 images; elementwise ~n^2) and timing."""
    if quick:
        return {"n": 192, "repeat": 3, "min_repeat_ms": 20}
    return {"n": 384, "repeat": 7, "min_repeat_ms": 100}


def measure(make: Callable, n: int, cfg: dict) -> tuple[float, float]:
    """(predicted, measured) seconds of one case on one thread; the result checked."""
    import kiln
    from kiln import cost

    s, args, ref = make(n)
    predicted = cost.estimate(kiln.lower(s, args), cost.machine_model().with_cores(1)).seconds
    f = kiln.build(s, args)
    rng = np.random.default_rng(0)
    inputs = [rng.random([int(d) for d in t.shape], dtype=np.float32) for t in args[:-1]]
    out = kiln.nd.array(np.zeros([int(d) for d in args[-1].shape], "float32"))
    arrays = [kiln.nd.array(x) for x in inputs] + [out]
    f(*arrays)
    np.testing.assert_allclose(out.numpy(), ref(*inputs), rtol=1e-3, atol=1e-3)
    timer = f.time_evaluator(f.entry_name, kiln.cpu(), repeat=cfg["repeat"],
                             min_repeat_ms=cfg["min_repeat_ms"])
    return predicted, float(np.median(timer(*arrays).results))


def spearman(predicted: Sequence[float], measured: Sequence[float]) -> float:
    from scipy.stats import spearmanr

    return float(spearmanr(predicted, measured).statistic)


def run(quick: bool = False, out_dir: str | Path | None = None, profile: bool = False,
        verbose: bool = True) -> str:
    """Run the suite, write ``<out_dir>/cost_model.{json,md}``, return the markdown."""
    started, t0 = time.time(), time.perf_counter()
    cfg = settings(quick)
    say = common.progress(NAME, verbose)
    load_start = common.load_average()
    rows = []
    for key, make in CASES:  # no schedule here has a parallel loop: one thread each
        say(key)
        predicted, measured = measure(make, cfg["n"], cfg)
        rows.append((key, predicted, measured))
    rho = spearman([r[1] for r in rows], [r[2] for r in rows])
    figures = [Figure(key=key, label=f"{key}: measured", kiln=meas, unit="s",
                      reference=pred, reference_label="predicted")
               for key, pred, meas in rows]
    lines = [f"# {NAME}: {DESCRIPTION}", "", f"n = {cfg['n']}, one thread; "
             f"Spearman rank correlation predicted vs measured: **{rho:.3f}** "
             f"({len(rows)} schedules; goal >= 0.8)", "",
             "| schedule | predicted (ms) | measured (ms) |", "|---|---|---|"]
    lines += [f"| {key} | {pred * 1e3:.3f} | {meas * 1e3:.3f} |" for key, pred, meas in rows]
    lines += [""] + common.machine_lines(common.machine_info(load_start))
    lines += [f"run {common.run_date(started)}, {time.perf_counter() - t0:.0f} s"]
    markdown = "\n".join(lines) + "\n"
    data = {"suite": NAME, "quick": quick, "n": cfg["n"], "spearman": rho,
            "figures": [f.__dict__ for f in figures]}
    _, md_path = common.write_results(NAME, data, markdown, out_dir)
    common.show_report(markdown, md_path, verbose)
    return markdown


def main(argv: Sequence[str] | None = None) -> int:
    args = common.suite_parser(NAME, DESCRIPTION, "n = 192, 3 repeats").parse_args(argv)
    run(quick=args.quick, out_dir=args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
