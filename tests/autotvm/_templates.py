"""Templates shared by the autotvm tests (registered when this module is imported)."""

from __future__ import annotations

import time

import numpy as np

from kiln import autotvm, te


@autotvm.template("test_gemm")
def gemm(N, L, M):
    """C = A @ B, A: N x L, B: L x M; tiles of both output axes, an annotation of the
    inner loops and an unroll knob."""
    A = te.placeholder((N, L), name="A")
    B = te.placeholder((L, M), name="B")
    k = te.reduce_axis((0, L), name="k")
    C = te.compute((N, M), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    y, x = s[C].op.axis
    cfg = autotvm.get_config()
    cfg.define_split("tile_y", y, num_outputs=2)
    cfg.define_split("tile_x", x, num_outputs=2)
    yo, yi = cfg["tile_y"].apply(s, C, y)
    xo, xi = cfg["tile_x"].apply(s, C, x)
    (kk,) = s[C].op.reduce_axis
    s[C].reorder(yo, xo, kk, yi, xi)
    cfg.define_annotate("ann", [yi, xi], policy="try_unroll_vec")
    cfg["ann"].apply(s, C, [yi, xi])
    return s, [A, B, C]


MODES = ("ok", "crash", "hang", "wrong", "raise", "no_lower", "slow_build")


@autotvm.template("test_faulty")
def faulty(N):
    """A GEMM whose ``mode`` knob makes a kernel that crashes (reads 1 GiB past A), hangs
    (a 2**31-step reduction), computes the wrong thing, is rejected by the template, does
    not lower, or takes minutes to build."""
    A = te.placeholder((N, N), name="A")
    B = te.placeholder((N, N), name="B")
    k = te.reduce_axis((0, N), name="k")
    cfg = autotvm.get_config()
    cfg.define_knob("mode", list(MODES))
    mode = cfg["mode"].val
    if mode == "crash":
        C = te.compute((N, N), lambda i, j: te.sum(A[i + (1 << 22), k] * B[k, j], axis=k),
                       name="C")
    elif mode == "hang":
        kk = te.reduce_axis((0, 2**31 - 1), name="kk")
        C = te.compute((N, N), lambda i, j: te.sum(A[i, kk % N] * B[kk % N, j], axis=kk),
                       name="C")
    elif mode == "wrong":
        C = te.compute((N, N), lambda i, j: te.sum(A[i, k] * B[k, j] + 0.01, axis=k),
                       name="C")
    else:
        C = te.compute((N, N), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = te.create_schedule(C.op)
    y, x = s[C].op.axis
    cfg.define_split("tile_x", x, num_outputs=2)
    cfg["tile_x"].apply(s, C, x)
    if mode == "raise":
        cfg.raise_error("this config is rejected by the template")
    if mode == "slow_build":
        time.sleep(60)
    if mode == "no_lower":
        return s, [B, C]  # A is read but not an argument: lowering fails
    return s, [A, B, C]


def numpy_gemm(a, b):
    return (a.astype(np.float64) @ b.astype(np.float64)).astype(np.float32)
