"""Classic topi names (issue 15): ``topi.nn.matmul``, the ``topi.generic``/``topi.x86``/
``topi.cuda`` schedule names, and the ``topi.utils`` helpers real TVM code calls.

The CUDA schedules are built for target ``cuda`` and their kernels run on the CPU through the
test emulator (tests/codegen/cuda_emulator.py), compared with numpy; without g++ they are
only lowered and code-generated.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy.special import log_softmax, softmax

import kiln
from kiln import te, topi
from tests.codegen import cuda_emulator
from tests.codegen.cuda_workloads import build_cuda

from . import ref
from .common import check, randn

#: threads per block of the emulated kernels (each thread is a CPU thread)
THREADS = 32


# ---------------------------------------------------------------------------------------
# topi.nn.matmul
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("ta, tb", [(False, False), (True, False), (False, True), (True, True)])
def test_nn_matmul_transposes(ta, tb):
    a_np, b_np = randn((7, 5), 1), randn((5, 9), 2)
    a_in = a_np.T.copy() if ta else a_np
    b_in = b_np.T.copy() if tb else b_np
    a, b = te.placeholder(a_in.shape, name="a"), te.placeholder(b_in.shape, name="b")
    c = topi.nn.matmul(a, b, transpose_a=ta, transpose_b=tb)
    assert c.op.tag == "matmul" and c.op.name == "T_matmul"
    check("schedule_matmul", c, [a, b], [a_in, b_in], a_np @ b_np, rtol=1e-4, atol=1e-5)


def test_nn_matmul_bias_and_out_dtype():
    a_np, b_np = randn((4, 6), 1).astype("float16"), randn((6, 3), 2).astype("float16")
    bias_np = randn((3,), 3)
    a, b = te.placeholder((4, 6), "float16", "a"), te.placeholder((6, 3), "float16", "b")
    bias = te.placeholder((3,), name="bias")
    c = topi.nn.matmul(a, b, bias=bias, out_dtype="float32")
    assert c.dtype == "float32" and c.op.tag == "broadcast"
    want = a_np.astype("float32") @ b_np.astype("float32") + bias_np
    check("schedule_matmul", c, [a, b, bias], [a_np, b_np, bias_np], want, rtol=1e-4,
          atol=1e-4)


def test_nn_matmul_errors_and_topi_matmul_is_the_same_operator():
    a, b = te.placeholder((3, 4)), te.placeholder((5, 4))
    with pytest.raises(ValueError, match="inner dimensions differ"):
        topi.nn.matmul(a, b)
    with pytest.raises(ValueError, match="2-D"):
        topi.nn.matmul(te.placeholder((2, 3, 4)), b)
    c = topi.matmul(a, b, transp_b=True)
    assert c.op.tag == "matmul" and dict(c.op.attrs)["transpose_b"] is True


# ---------------------------------------------------------------------------------------
# schedule names
# ---------------------------------------------------------------------------------------
#: every schedule name kiln's topi operators need, in all three schedule modules
COMMON = ["schedule_injective", "schedule_injective_from_existing", "schedule_elemwise",
          "schedule_broadcast", "schedule_concatenate", "schedule_reduce", "schedule_softmax",
          "schedule_dense", "schedule_matmul", "schedule_batch_matmul", "schedule_pool",
          "schedule_adaptive_pool", "schedule_global_pool", "schedule_conv2d_nchw",
          "schedule_conv2d_nhwc", "schedule_group_conv2d_nchw", "schedule_conv2d_NCHWc",
          "schedule_depthwise_conv2d_nchw", "schedule_depthwise_conv2d_NCHWc",
          "schedule_layer_norm", "schedule_batch_norm", "schedule_extern", "schedule_auto"]


@pytest.mark.parametrize("module", ["generic", "x86", "cuda"])
def test_schedule_names(module):
    mod = getattr(topi, module)
    missing = [n for n in COMMON if not callable(getattr(mod, n, None))]
    assert not missing
    assert set(COMMON) <= set(mod.__all__)


def test_generic_default_schedule_and_injective_from_existing():
    a = te.placeholder((4, 5), name="a")
    b = topi.exp(a)
    s = topi.generic.default_schedule([b], False)
    assert topi.generic.schedule_injective_from_existing(s, b) is s
    assert len(s[b].leaf_iter_vars) == 1
    f = kiln.build(s, [a, b])
    x = randn((4, 5))
    y = kiln.nd.empty((4, 5))
    f(kiln.nd.array(x), y)
    np.testing.assert_allclose(y.numpy(), np.exp(x), rtol=1e-5)


# ---------------------------------------------------------------------------------------
# topi.cuda: built for cuda, kernels emulated on the CPU
# ---------------------------------------------------------------------------------------
def _case(name):
    """``(schedule name, outs, inputs, input arrays, expected outputs)`` of one workload."""
    if name == "injective":
        a, b = te.placeholder((7, 13), name="a"), te.placeholder((13,), name="b")
        xa, xb = randn((7, 13), 1), randn((13,), 2)
        return "schedule_injective", [topi.exp(topi.add(a, b))], [a, b], [xa, xb], \
            [np.exp(xa + xb)]
    if name == "reduce":
        a = te.placeholder((6, 37), name="a")
        xa = randn((6, 37), 1)
        return "schedule_reduce", [topi.sum(a, axis=1, keepdims=True)], [a], [xa], \
            [xa.sum(axis=1, keepdims=True)]
    if name == "argmax":
        a = te.placeholder((5, 9), name="a")
        xa = randn((5, 9), 1)
        return "schedule_reduce", [topi.argmax(a, axis=1)], [a], [xa], \
            [xa.argmax(axis=1).astype("int32")]
    if name in ("softmax", "log_softmax"):
        a = te.placeholder((5, 11), name="a")
        xa = randn((5, 11), 1)
        op, want = ((topi.nn.softmax, softmax) if name == "softmax" else
                    (topi.nn.log_softmax, log_softmax))
        return "schedule_softmax", [op(a, axis=-1)], [a], [xa], [want(xa, axis=-1)]
    if name == "dense_small_batch":
        x, w, b = (te.placeholder((2, 9), name="x"), te.placeholder((7, 9), name="w"),
                   te.placeholder((7,), name="b"))
        xx, xw, xb = randn((2, 9), 1), randn((7, 9), 2), randn((7,), 3)
        out = topi.nn.relu(topi.nn.dense(x, w, b))
        return "schedule_dense_small_batch", [out], [x, w, b], [xx, xw, xb], \
            [np.maximum(xx @ xw.T + xb, 0)]
    if name == "dense_two_outputs":  # one anchor read by two outputs: its own kernel
        x, w = te.placeholder((4, 9), name="x"), te.placeholder((5, 9), name="w")
        xx, xw = randn((4, 9), 1), randn((5, 9), 2)
        d = topi.nn.dense(x, w)
        return "schedule_dense", [topi.nn.relu(d), topi.exp(d)], [x, w], [xx, xw], \
            [np.maximum(xx @ xw.T, 0), np.exp(xx @ xw.T)]
    if name == "matmul":
        a, b = te.placeholder((9, 6), name="a"), te.placeholder((6, 5), name="b")
        xa, xb = randn((9, 6), 1), randn((6, 5), 2)
        out = topi.nn.matmul(a, b, transpose_a=False)
        return "schedule_matmul", [out], [a, b], [xa, xb], [xa @ xb]
    if name in ("pool_max", "pool_avg"):
        x = te.placeholder((1, 2, 7, 7), name="x")
        xx = randn((1, 2, 7, 7), 1)
        kind = name[5:]
        out = topi.nn.pool2d(x, (3, 3), (2, 2), (1, 1), (1, 1, 1, 1), kind)
        want = topi.testing.poolnd_python(xx, (3, 3), (2, 2), (1, 1), (1, 1), (1, 1), kind)
        return "schedule_pool", [out], [x], [xx], [want]
    if name == "adaptive_pool":
        x = te.placeholder((1, 3, 7, 7), name="x")
        xx = randn((1, 3, 7, 7), 1)
        out = topi.nn.adaptive_pool(x, (3, 2), "avg")
        return "schedule_adaptive_pool", [out], [x], [xx], \
            [ref.adaptive_pool_nchw(xx, (3, 2), "avg")]
    if name == "conv2d_nchw":
        x, w, b = (te.placeholder((1, 3, 8, 8), name="x"), te.placeholder((4, 3, 3, 3), name="w"),
                   te.placeholder((4, 1, 1), name="b"))
        xx, xw, xb = randn((1, 3, 8, 8), 1), randn((4, 3, 3, 3), 2), randn((4, 1, 1), 3)
        out = topi.nn.relu(topi.add(topi.nn.conv2d_nchw(x, w, 1, 1, 1), b))
        want = np.maximum(ref.conv2d_nchw(xx, xw, 1, 1, 1) + xb, 0)
        return "schedule_conv2d_nchw", [out], [x, w, b], [xx, xw, xb], [want]
    if name == "depthwise_conv2d_nchw":
        x, w = te.placeholder((1, 4, 7, 7), name="x"), te.placeholder((4, 1, 3, 3), name="w")
        xx, xw = randn((1, 4, 7, 7), 1), randn((4, 1, 3, 3), 2)
        out = topi.nn.depthwise_conv2d_nchw(x, w, 2, 1, 1)
        return "schedule_depthwise_conv2d_nchw", [out], [x, w], [xx, xw], \
            [ref.depthwise_conv2d_nchw(xx, xw, 2, 1, 1)]
    if name == "conv2d_NCHWc":
        x, w = (te.placeholder((1, 2, 6, 6, 4), name="x"),
                te.placeholder((2, 2, 3, 3, 4, 4), name="w"))
        xx, xw = randn((1, 8, 6, 6), 1), randn((8, 8, 3, 3), 2)
        out = topi.nn.conv2d_NCHWc(x, w, 1, 1, 1, "NCHW4c", "NCHW4c")
        want = ref.pack_nchwc(ref.conv2d_nchw(xx, xw, 1, 1, 1), 4)
        return "schedule_conv2d_NCHWc", [out], [x, w], [ref.pack_nchwc(xx, 4),
                                                         ref.pack_kernel(xw, 4, 4)], [want]
    if name == "layer_norm":
        x, g, b = (te.placeholder((3, 10), name="x"), te.placeholder((10,), name="g"),
                   te.placeholder((10,), name="b"))
        xx, xg, xb = randn((3, 10), 1), randn((10,), 2), randn((10,), 3)
        out = topi.nn.layer_norm(x, g, b, axis=[1])
        mean, var = xx.mean(1, keepdims=True), xx.var(1, keepdims=True)
        return "schedule_layer_norm", [out], [x, g, b], [xx, xg, xb], \
            [(xx - mean) / np.sqrt(var + 1e-5) * xg + xb]
    raise KeyError(name)


CASES = ["injective", "reduce", "argmax", "softmax", "log_softmax", "dense_small_batch",
         "dense_two_outputs",
         "matmul", "pool_max", "pool_avg", "adaptive_pool", "conv2d_nchw",
         "depthwise_conv2d_nchw", "conv2d_NCHWc", "layer_norm"]


def _cuda_build(name):
    sched, outs, inputs, arrays, expected = _case(name)
    with kiln.target.Target(f"cuda -max_num_threads={THREADS}"):
        s = getattr(topi.cuda, sched)(outs)
    mod = build_cuda(s, inputs + outs, name=f"topi_{name}")
    return mod, outs, arrays, expected


@pytest.mark.parametrize("name", CASES)
def test_cuda_schedule_compiles(name):
    mod, _, _, _ = _cuda_build(name)
    src = mod.imported_modules[0].get_source()
    assert 'extern "C" __global__' in src and "threadIdx.x" in src


@pytest.mark.skipif(not cuda_emulator.available(), reason="g++ is needed to emulate kernels")
@pytest.mark.parametrize("name", CASES)
def test_cuda_schedule_emulated(name):
    mod, outs, arrays, expected = _cuda_build(name)
    results = [np.zeros([int(d) for d in o.shape], o.dtype) for o in outs]
    cuda_emulator.Emulated(mod)(*[a.copy() for a in arrays], *results)
    for got, want in zip(results, expected, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


def test_classic_calls_lower():
    """The calls classic code makes, by name (each lowers for its target)."""
    a = te.placeholder((4, 9), name="a")
    w = te.placeholder((5, 9), name="w")
    with kiln.target.Target("cuda"):
        sm = topi.nn.softmax(a)
        dn = topi.nn.dense(a, w)
        for s, args in ((topi.cuda.schedule_softmax([sm]), [a, sm]),
                        (topi.cuda.schedule_dense_small_batch([dn]), [a, w, dn])):
            assert "threadIdx.x" in str(kiln.lower(s, args, simple_mode=True))
    red = topi.max(a, axis=0)
    kiln.build(topi.generic.schedule_reduce([red]), [a, red])


def test_cuda_epilogue_is_one_kernel():
    mod, _, _, _ = _cuda_build("conv2d_nchw")
    src = mod.imported_modules[0].get_source()
    assert src.count('extern "C" __global__') == 1


def test_cuda_scalar_reduction_is_not_implemented():
    a = te.placeholder((8,), name="a")
    with pytest.raises(NotImplementedError, match="keepdims=True"):
        topi.cuda.schedule_reduce(topi.sum(a))


def test_cuda_threads_follow_the_target():
    a = te.placeholder((100,), name="a")
    b = topi.exp(a)
    assert topi.cuda.max_threads() == 1024
    with kiln.target.Target("cuda -max_num_threads=64"):
        assert topi.cuda.max_threads() == 64
        s = topi.cuda.schedule_injective(b)
    text = str(kiln.lower(s, [a, b], simple_mode=True))
    assert "thread_extent = 64" in text and "thread_extent = 2" in text


# ---------------------------------------------------------------------------------------
# topi.utils
# ---------------------------------------------------------------------------------------
def test_utils_constants():
    n = te.var("n")
    assert topi.utils.get_const_tuple((2, kiln.tir.const(3), n * 0 + 4)) == (2, 3, 4)
    assert topi.utils.get_const_int(kiln.tir.const(7) * 2) == 14
    assert topi.utils.equal_const_int(n * 0 + 3, 3) and not topi.utils.equal_const_int(n, 3)
    assert topi.utils.get_const_float(kiln.tir.const(2.5)) == 2.5
    assert topi.utils.get_float_tuple((1, kiln.tir.const(0.5))) == (1.0, 0.5)
    assert topi.utils.get_max_power2_factor(48) == 16
    assert topi.utils.get_max_power2_factor(48, 8) == 8
    assert topi.utils.ceil_div(7, 2) == 4
    assert topi.utils.is_empty_shape((3, 0)) and not topi.utils.is_empty_shape((n,))
    assert str(topi.utils.simplify(n * 2 - n)) == "n"
    assert issubclass(topi.utils.InvalidShapeError, ValueError)


@pytest.mark.parametrize("values", [np.array([3.0, -1.5, 2.0], "float32"),
                                    np.arange(6, dtype="int32").reshape(2, 3)])
def test_utils_const_tensors(values):
    make = topi.utils.const_vector if values.ndim == 1 else topi.utils.const_matrix
    t = make(values, name="c")
    s = te.create_schedule(t.op)
    out = kiln.nd.empty(values.shape, str(values.dtype))
    kiln.build(s, [t])(out)
    np.testing.assert_array_equal(out.numpy(), values)


def test_utils_traverse_inline_visits_each_compute_once():
    a = te.placeholder((4, 4), name="a")
    b = topi.nn.relu(topi.sum(topi.exp(a), axis=1))
    s = te.create_schedule(b.op)
    seen = []
    topi.utils.traverse_inline(s, b.op, lambda op: seen.append(op.tag))
    assert seen.count("comm_reduce") == 1 and s[b.op.input_tensors[0].op.input_tensors[0].op] \
        .attach_type == "inline"


def test_nn_bias_add_along_an_axis():
    x_np, b_np = randn((2, 3, 4), 1), randn((3,), 2)
    x, b = te.placeholder((2, 3, 4), name="x"), te.placeholder((3,), name="b")
    y = topi.nn.bias_add(x, b, axis=1)
    assert y.op.tag == "broadcast"
    check("schedule_injective", y, [x, b], [x_np, b_np], x_np + b_np[:, None])
    with pytest.raises(ValueError, match="1-D"):
        topi.nn.bias_add(x, x)
