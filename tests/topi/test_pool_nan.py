"""Max pooling skips NaN wherever it sits in the window (issue 25).

``topi.nn.pool2d``, ``global_pool`` and ``adaptive_pool`` give the maximum of a window's
numbers (the lowest float32 when all are NaN, as for a window of padding): the ONNX
reference's pooling, and onnxruntime's MaxPool except where a NaN comes last in its window.
With ``te.max`` (update ``max(acc, x)``) a NaN survived only in the last position. Checked on
the generic and x86 schedules (padded and clamped reads, NCHW and NCHW16c), on the CUDA
schedule through the kernel emulator, and end to end from an ONNX MaxPool.
"""

from __future__ import annotations

import numpy as np
import pytest

import kiln
from kiln import relay, te, topi
from kiln.contrib import graph_executor
from tests.codegen import cuda_emulator
from tests.codegen.cuda_workloads import build_cuda

from . import ref
from .common import check

LOWEST = np.finfo(np.float32).min


def _with_nans(shape: tuple[int, ...], seed: int) -> np.ndarray:
    """Random values, a fifth of them NaN, and one 3x3 corner of NaN only."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape).astype("float32")
    x[rng.random(shape) < 0.2] = np.nan
    x[..., :3, :3] = np.nan
    return x


def _skip_nan(x: np.ndarray) -> np.ndarray:
    """The input as max pooling sees it: a NaN is a value that never wins."""
    return np.where(np.isnan(x), LOWEST, x)


def test_every_position_of_a_window():
    """2x2 windows, the NaN in each of the four places: the maximum of the other three."""
    X = te.placeholder((4, 1, 2, 2), name="X")
    Y = topi.nn.pool2d(X, 2, 2, 1, (0, 0, 0, 0), "max")
    x = np.tile(np.array([[1, 4], [2, 3]], "float32"), (4, 1, 1, 1))
    for k in range(4):
        x[k, 0].flat[k] = np.nan
    check("schedule_pool", Y, [X], [x], np.array([4, 3, 4, 4], "float32").reshape(4, 1, 1, 1))


@pytest.mark.parametrize("k, s, p", [(3, 1, (1, 1, 1, 1)), (2, 2, (0, 0, 0, 0)),
                                     (3, 2, (0, 0, 1, 1))])
def test_pool2d_nchw(k, s, p):
    X = te.placeholder((1, 16, 12, 12), name="X")
    Y = topi.nn.pool2d(X, k, s, 1, p, "max")
    x = _with_nans((1, 16, 12, 12), k + s)
    check("schedule_pool", Y, [X], [x], ref.pool2d_nchw(_skip_nan(x), k, s, 1, p, "max"))


def test_pool2d_packed_clamped_reads():
    """NCHW16c reads the nearest input element instead of padding: a NaN one is skipped."""
    X = te.placeholder((1, 1, 9, 9, 16), name="X")
    Y = topi.nn.pool(X, 3, 2, (1, 1), "max", layout="NCHW16c")
    x = _with_nans((1, 16, 9, 9), 5)
    expected = ref.pool2d_nchw(_skip_nan(x), 3, 2, 1, (1, 1, 1, 1), "max")
    check("schedule_pool", Y, [X], [ref.pack_nchwc(x, 16)], ref.pack_nchwc(expected, 16))


def test_global_and_adaptive_max_pool():
    X = te.placeholder((1, 8, 6, 6), name="X")
    x = _with_nans((1, 8, 6, 6), 7)
    x[0, 1] = np.nan  # one channel of NaN only
    G = topi.nn.global_pool(X, "max")
    check("schedule_adaptive_pool", G, [X], [x], _skip_nan(x).max(axis=(2, 3), keepdims=True))
    A = topi.nn.adaptive_pool(X, (4, 4), "max")
    check("schedule_adaptive_pool", A, [X], [x], ref.adaptive_pool_nchw(_skip_nan(x), (4, 4),
                                                                        "max"))


@pytest.mark.skipif(not cuda_emulator.available(), reason="g++ is needed to emulate kernels")
def test_cuda_pool_skips_nan():
    X = te.placeholder((1, 4, 8, 8), name="X")
    Y = topi.nn.pool2d(X, 3, 1, 1, (1, 1, 1, 1), "max")
    with kiln.target.Target("cuda -max_num_threads=32"):
        s = topi.cuda.schedule_pool([Y])
    mod = build_cuda(s, [X, Y], name="pool_nan")
    x = _with_nans((1, 4, 8, 8), 9)
    y = np.zeros((1, 4, 8, 8), "float32")
    cuda_emulator.Emulated(mod)(x.copy(), y)
    np.testing.assert_array_equal(y, ref.pool2d_nchw(_skip_nan(x), 3, 1, 1, (1, 1, 1, 1),
                                                     "max"))


def test_onnx_max_pool_skips_nan():
    """An imported MaxPool, built by ``relay.build`` with the x86 strategy."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper

    node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])
    graph = helper.make_graph(
        [node], "pool", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 8, 8])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    onnx.checker.check_model(model)
    mod, params = relay.frontend.from_onnx(model)
    lib = relay.build(mod, target="llvm", params=params)
    gm = graph_executor.GraphModule(lib["default"](kiln.cpu(0)))
    x = _with_nans((1, 16, 8, 8), 11)
    gm.set_input("x", x)
    gm.run()
    np.testing.assert_array_equal(gm.get_output(0).numpy(),
                                  ref.pool2d_nchw(_skip_nan(x), 3, 1, 1, (1, 1, 1, 1), "max"))
