"""Small workloads of the auto_scheduler tests: GEMM 64, GEMM + bias, a 1x16x14x14 conv,
the sum of a long vector and the max over two axes of a few rows (rfactor's)."""

from __future__ import annotations

import numpy as np

from kiln import auto_scheduler, te


@auto_scheduler.register_workload
def as_test_matmul(N, L, M, dtype):
    A = te.placeholder((N, L), name="A", dtype=dtype)
    B = te.placeholder((L, M), name="B", dtype=dtype)
    k = te.reduce_axis((0, L), name="k")
    C = te.compute((N, M), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="C")
    return [A, B, C]


@auto_scheduler.register_workload
def as_test_matmul_add(N, L, M, dtype):
    A = te.placeholder((N, L), name="A", dtype=dtype)
    B = te.placeholder((L, M), name="B", dtype=dtype)
    bias = te.placeholder((N, M), name="bias", dtype=dtype)
    k = te.reduce_axis((0, L), name="k")
    mm = te.compute((N, M), lambda i, j: te.sum(A[i, k] * B[k, j], axis=k), name="matmul")
    out = te.compute((N, M), lambda i, j: te.max(mm[i, j] + bias[i, j], 0.0), name="out")
    return [A, B, bias, out]


@auto_scheduler.register_workload
def as_test_conv2d(N, C, H, W, CO, K, pad):
    data = te.placeholder((N, C, H, W), name="data")
    kernel = te.placeholder((CO, C, K, K), name="kernel")
    padded = te.compute(
        (N, C, H + 2 * pad, W + 2 * pad),
        lambda n, c, y, x: te.if_then_else(
            te.all(y >= pad, y < H + pad, x >= pad, x < W + pad),
            data[n, c, y - pad, x - pad], 0.0), name="pad")
    rc = te.reduce_axis((0, C), name="rc")
    ry = te.reduce_axis((0, K), name="ry")
    rx = te.reduce_axis((0, K), name="rx")
    conv = te.compute(
        (N, CO, H, W),
        lambda n, f, y, x: te.sum(padded[n, rc, y + ry, x + rx] * kernel[f, rc, ry, rx],
                                  axis=[rc, ry, rx]), name="conv")
    return [data, kernel, conv]


@auto_scheduler.register_workload
def as_test_vector_sum(n):
    A = te.placeholder((n,), name="A")
    k = te.reduce_axis((0, n), name="k")
    return [A, te.compute((1,), lambda i: te.sum(A[k], axis=k), name="C")]


@auto_scheduler.register_workload
def as_test_row_max(m, h, w):
    A = te.placeholder((m, h, w), name="A")
    y = te.reduce_axis((0, h), name="y")
    x = te.reduce_axis((0, w), name="x")
    return [A, te.compute((m,), lambda i: te.max(A[i, y, x], axis=[y, x]), name="C")]


@auto_scheduler.register_workload
def as_test_relu_chain(m, n):
    a, b, c = (te.placeholder((m, n), name=x) for x in "abc")
    ab = te.compute((m, n), lambda i, j: a[i, j] * b[i, j], name="ab")
    abc = te.compute((m, n), lambda i, j: ab[i, j] + c[i, j], name="abc")
    return [a, b, c, te.compute((m, n), lambda i, j: te.max(abc[i, j], 0.0), name="out")]


def reference(name: str, inputs: list[np.ndarray]) -> np.ndarray:
    """numpy's result of a workload above."""
    if name == "as_test_relu_chain":
        return np.maximum(inputs[0] * inputs[1] + inputs[2], 0)
    if name == "as_test_vector_sum":
        return inputs[0].sum(keepdims=True)
    if name == "as_test_row_max":
        return inputs[0].max(axis=(1, 2))
    if name == "as_test_matmul":
        return inputs[0] @ inputs[1]
    if name == "as_test_matmul_add":
        return np.maximum(inputs[0] @ inputs[1] + inputs[2], 0)
    data, kernel = inputs
    n, c, h, w = data.shape
    k = kernel.shape[2]
    pad = (k - 1) // 2
    p = np.pad(data, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    out = np.zeros((n, kernel.shape[0], h, w), dtype=np.float32)
    for ry in range(k):
        for rx in range(k):
            out += np.einsum("nchw,fc->nfhw", p[:, :, ry:ry + h, rx:rx + w],
                             kernel[:, :, ry, rx])
    return out
