"""kiln.contrib.d2ltvm helpers that the chapter tests do not already cover: data generators,
benchmark and plot helpers, schedule helpers, and the MXNet stand-ins."""

import numpy as np
import pytest

import kiln as tvm
from kiln import te
from kiln.contrib import d2ltvm

BOOK_HELPERS = [
    "get_abc",
    "vector_add",
    "image_preprocessing",
    "broadcast_add",
    "get_bcast_data",
    "matmul",
    "padding",
    "conv_out_size",
    "conv",
    "conv_mxnet",
    "get_conv_data",
    "depthwise_conv",
    "get_conv_data_mxnet",
    "depthwise_conv_mxnet",
    "pool",
    "get_pool_data_mxnet",
    "pool_mxnet",
    "batch_norm",
    "get_bn_data",
    "get_bn_data_mxnet",
    "batch_norm_mxnet",
    "bench_workload",
    "plot",
    "plot_gflops",
    "bench_vector_add_tvm",
    "bench_bcast_add_tvm",
    "np_matmul_timer",
    "bench_matmul_tvm",
    "conv_gflop",
    "conv_timer_mxnet",
    "bench_conv_mxnet",
    "bench_conv_tvm",
    "bench_depthwise_conv_tvm",
    "depthwise_conv_timer_mxnet",
    "bench_depthwise_conv_mxnet",
    "bench_pooling_tvm",
    "pooling_timer_mxnet",
    "bench_pooling_mxnet",
    "bench_bn_tvm",
    "bn_timer_mxnet",
    "bench_bn_mxnet",
    "matmul_timer_mxnet",
    "split",
    "bind_thread",
    "split_axis",
]


@pytest.mark.parametrize("name", BOOK_HELPERS)
def test_every_book_helper_exists_with_a_docstring(name):
    fn = getattr(d2ltvm, name)
    assert callable(fn) and fn.__doc__


def test_get_abc_constructor_and_shape():
    a, b, c = d2ltvm.get_abc((2, 3), lambda x: x * 0 + 1)
    assert a.shape == (2, 3) and (a == 1).all() and (c == 1).all()


def test_image_preprocessing():
    image = np.full((4, 5, 3), [123.0, 117.0, 104.0]) + np.array([58.395, 0.0, -57.375])
    x = d2ltvm.image_preprocessing(image)
    assert x.shape == (1, 3, 4, 5) and x.dtype == np.float32
    np.testing.assert_allclose(x[0, :, 0, 0], [1.0, 0.0, -1.0], atol=1e-6)


def test_conv_gflop():
    assert d2ltvm.conv_gflop(64, 64, 56, 3, 1, 1) == pytest.approx(2 * 64 * 64 * 56 * 56 * 9 / 1e9)


def test_bench_workload_repeats_short_work():
    calls = []

    def workload(nrepeats):
        calls.append(nrepeats)
        return 0.01 * nrepeats

    assert d2ltvm.bench_workload(workload) == pytest.approx(0.01)
    assert calls == [1, 1, 100]


def test_bench_workload_long_work_runs_once_more():
    calls = []

    def workload(nrepeats):
        calls.append(nrepeats)
        return 2.0

    assert d2ltvm.bench_workload(workload) == 2.0
    assert calls == [1, 1]


def test_np_matmul_timer():
    measured = d2ltvm.np_matmul_timer(8)(3)
    assert measured >= 0  # it returns a duration; no speed goal here


@pytest.mark.parametrize(
    "name, args",
    [
        ("conv_timer_mxnet", (8, 64, 3, "cpu")),
        ("bench_conv_mxnet", ([(8, 64, 3)],)),
        ("depthwise_conv_timer_mxnet", (8, 64, 3, "cpu")),
        ("bench_depthwise_conv_mxnet", ([(8, 64, 3)],)),
        ("pooling_timer_mxnet", ("max", 8, 64, 3, "cpu")),
        ("bench_pooling_mxnet", ("max", [])),
        ("bn_timer_mxnet", (8, 28, "cpu")),
        ("bench_bn_mxnet", ([(8, 28)],)),
        ("matmul_timer_mxnet", (64, "cpu")),
    ],
)
def test_mxnet_timers_are_not_supported(name, args):
    with pytest.raises(NotImplementedError, match="MXNet is not supported"):
        getattr(d2ltvm, name)(*args)


def test_plot_helpers(tmp_path):
    matplotlib = pytest.importorskip("matplotlib")
    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    sizes = 2 ** np.arange(5, 10)
    axes = d2ltvm.plot_gflops(sizes, [sizes * 1.0, sizes * 2.0], ["numpy", "kiln"])
    assert len(axes.lines) == 2
    lines = [[1, 2, 3, 4, 5], [1, 2, 3]]  # the shorter line covers the first sizes
    axes = d2ltvm.plot(sizes, lines, legend=["a", "b"], axes=plt.figure().gca())
    assert len(axes.lines) == 2
    plt.close("all")


def test_split_axis_extents():
    """§5.5: factors [4, 8] on an extent-64 axis give axes of extents 2, 4, 8."""
    A = te.placeholder((64,), name="A")
    B = te.compute((64,), lambda i: A[i] * 2.0, name="B")
    s = te.create_schedule(B.op)
    axes = d2ltvm.split_axis([4, 8], s, B, B.op.axis[0])
    assert len(axes) == 3
    mod = tvm.build(s, [A, B])
    a = np.arange(64, dtype="float32")
    b = tvm.nd.array(np.empty(64, dtype="float32"))
    mod(tvm.nd.array(a), b)
    np.testing.assert_equal(b.asnumpy(), a * 2)


def test_split_outermost_first(lower_text):
    """§5.4: split(stage, axis, (16, 8)) returns [outer, 16-wide, 8-wide]."""
    A = te.placeholder((256,), name="A")
    B = te.compute((256,), lambda i: A[i] + 1.0, name="B")
    s = te.create_schedule(B.op)
    outer, middle, inner = d2ltvm.split(s[B], B.op.axis[0], (16, 8))
    text = lower_text(s, [A, B])
    assert "0, 2)" in text and "0, 16)" in text and "0, 8)" in text
    mod = tvm.build(s, [A, B])
    a = np.arange(256, dtype="float32")
    b = tvm.nd.array(np.empty(256, dtype="float32"))
    mod(tvm.nd.array(a), b)
    np.testing.assert_equal(b.asnumpy(), a + 1)


def test_bench_vector_add_tvm_wiring():
    """The §4.3 benchmark helper builds, times through time_evaluator and returns one number
    per size (about a second of work each; its value is not checked here)."""

    def default(n):
        A, B, C = d2ltvm.vector_add(n)
        return te.create_schedule(C.op), (A, B, C)

    result = d2ltvm.bench_vector_add_tvm(default, np.array([256]), "llvm")
    assert result.shape == (1,) and np.isfinite(result).all()
