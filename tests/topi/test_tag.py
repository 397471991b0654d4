"""Operator tags and the pattern/kind classification a graph compiler fuses by."""

import pytest

from kiln import te, topi
from kiln.topi import tag


def _ops():
    x = te.placeholder((1, 8, 6, 6), name="x")
    w = te.placeholder((8, 8, 3, 3), name="w")
    dw = te.placeholder((8, 1, 3, 3), name="dw")
    v = te.placeholder((8,), name="v")
    m = te.placeholder((4, 8), name="m")
    conv = topi.nn.conv2d_nchw(x, w, 1, 1, 1)
    return {
        "exp": (topi.exp(x), "elemwise", "injective"),
        "relu": (topi.nn.relu(x), "elemwise", "injective"),
        "add_bcast": (topi.add(x, topi.reshape(v, (8, 1, 1))), "broadcast", "injective"),
        "add_same": (topi.add(x, x), "elemwise", "injective"),
        "reshape": (topi.reshape(x, (8, 36)), "injective", "injective"),
        "transpose": (topi.transpose(x), "injective", "injective"),
        "concat": (topi.concatenate([x, x], 1), "injective", "injective"),
        "pad": (topi.nn.pad(x, (0, 0, 1, 1)), "injective,pad", "injective"),
        "batch_norm": (topi.nn.batch_norm(x, v, v, v, v)[0], "broadcast", "injective"),
        "sum": (topi.sum(x, 1), "comm_reduce", "reduction"),
        "argmax_idx": (topi.argmax(x, 1).op.input_tensors[0], "comm_reduce_idx", "reduction"),
        "conv": (conv, "conv2d_nchw", "complex-out-fusable"),
        "depthwise": (topi.nn.depthwise_conv2d_nchw(x, dw, 1, 1, 1), "depthwise_conv2d_nchw",
                      "complex-out-fusable"),
        "dense": (topi.nn.dense(m, m), "dense", "complex-out-fusable"),
        "max_pool": (topi.nn.pool2d(x, 2, 2, 1, 0, "max"), "pool_max", "complex-out-fusable"),
        "avg_pool": (topi.nn.pool2d(x, 2, 2, 1, 0, "avg"), "pool_avg", "complex-out-fusable"),
        "softmax": (topi.nn.softmax(m), "softmax_output", "opaque"),
        "layer_norm": (topi.nn.layer_norm(m, None, None, -1), "layer_norm", "opaque"),
    }


@pytest.mark.parametrize("name", list(_ops()))
def test_tags_and_kinds(name):
    t, expected_tag, kind = _ops()[name]
    assert t.op.tag == expected_tag
    assert tag.op_kind(t) == kind
    assert tag.op_kind(t.op) == kind
    assert tag.op_kind(t.op.tag) == kind


def test_predicates_and_patterns():
    assert tag.is_broadcast("elemwise") and tag.is_broadcast("broadcast")
    assert not tag.is_broadcast("injective")
    assert tag.is_injective("injective,pad") and tag.is_injective("elemwise")
    assert not tag.is_injective("conv2d_nchw") and not tag.is_injective("")
    assert tag.op_pattern("elemwise") == tag.PATTERN_ELEMWISE == 0
    assert tag.op_pattern("broadcast") == tag.PATTERN_BROADCAST == 1
    assert tag.op_pattern("injective") == tag.PATTERN_INJECTIVE == 2
    assert tag.op_pattern("comm_reduce") == tag.PATTERN_COMM_REDUCE == 3
    assert tag.op_pattern("conv2d_NCHWc") == tag.PATTERN_OUT_ELEMWISE_FUSABLE == 4
    assert tag.op_pattern("") == tag.PATTERN_OPAQUE == 8


def test_conv_attrs_record_the_workload():
    x = te.placeholder((1, 4, 9, 9), name="x")
    w = te.placeholder((8, 2, 3, 3), name="w")
    y = topi.nn.group_conv2d_nchw(x, w, (2, 1), (1, 0, 1, 2), 2, 2)
    assert y.op.attrs["strides"] == (2, 1)
    assert y.op.attrs["padding"] == (1, 0, 1, 2)
    assert y.op.attrs["dilation"] == (2, 2)
    assert y.op.attrs["groups"] == 2


def test_alias_imports():
    """``topi`` and ``tvm.topi`` resolve to kiln.topi under the tvm alias."""
    import importlib
    import sys

    from kiln.alias import install_as_tvm, is_installed, uninstall_as_tvm

    was = is_installed()
    install_as_tvm()
    try:
        topi_mod = importlib.import_module("topi")
        tvm_topi = importlib.import_module("tvm.topi")
        assert topi_mod is topi and tvm_topi is topi
        assert importlib.import_module("topi.nn") is topi.nn
    finally:
        if not was:
            uninstall_as_tvm()
            for name in ("topi", "topi.nn", "tvm.topi", "tvm"):
                sys.modules.pop(name, None)
