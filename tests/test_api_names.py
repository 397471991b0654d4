"""Classic-TVM names that real programs use (shared/design/API_PRIORITY.md), reachable under
kiln with `import kiln as tvm` and behaving as TVM's."""

from __future__ import annotations

import os

import numpy as np
import pytest

import kiln as tvm
from kiln import te

# (dotted name after `tvm.`) — attribute access only, as programs do after `import tvm`
NAMES = [
    "nd.array", "nd.empty", "nd.from_dlpack", "context", "device", "cpu", "gpu", "cuda",
    "tir.const", "tir.if_then_else", "tir.any", "tir.all", "te.min_value", "te.max_value",
    "te.schedule.AutoInlineInjective", "te.comm_reducer", "te.size_var", "runtime.convert",
    "runtime.load_module", "target.Target", "target.create", "target.cuda", "TVMError",
    "topi.sqrt", "topi.nn.relu", "topi.nn.conv2d", "topi.utils.get_const_tuple",
    "contrib.utils.tempdir", "contrib.util.tempdir", "contrib.graph_executor.GraphModule",
    "contrib.graph_runtime.create", "relay.build", "relay.build_config",
    "transform.PassContext", "testing.assert_allclose", "testing.requires_gpu",
    "testing.requires_llvm", "testing.uses_gpu", "testing.device_enabled",
    "testing.enabled_targets", "testing.parameter", "testing.fixture",
]


@pytest.mark.parametrize("name", NAMES)
def test_name_is_reachable(name):
    obj = tvm
    for part in name.split("."):
        if part == "util" and obj is tvm.contrib:
            import kiln.contrib.util as obj  # a module of its own, as in old TVM
            continue
        obj = getattr(obj, part)
    assert obj is not None


def test_min_max_value():
    assert str(te.min_value("float32")).startswith("-3.40282")
    assert te.max_value("int8").value == 127
    assert te.min_value("int32").value == -(2**31)


def test_convert():
    ints = tvm.runtime.convert([1, 2])
    assert [int(i.value) for i in ints] == [1, 2] and ints[0].dtype == "int32"
    assert tvm.runtime.convert(1.5).dtype == "float32"
    assert tvm.runtime.convert("s") == "s"


def test_tempdir_is_removed():
    tmp = tvm.contrib.utils.tempdir()
    path = tmp.relpath("f.txt")
    with open(path, "w") as f:
        f.write("x")
    assert tmp.listdir() == ["f.txt"]
    root = tmp.temp_dir
    del tmp
    assert not os.path.exists(root)


def test_enabled_targets_and_device_enabled():
    targets = dict(tvm.testing.enabled_targets())
    assert targets.get("llvm") == tvm.cpu(0)
    assert tvm.testing.device_enabled("llvm")
    assert not tvm.testing.device_enabled("opencl")


size = tvm.testing.parameter(1, 7, 64)


@tvm.testing.fixture
def vector(size):
    return np.arange(size, dtype="float32")


def test_parameter_and_fixture(size, vector):
    assert vector.shape == (size,)


def test_version_and_ir_node_names():
    assert isinstance(tvm.__version__, str)
    n = te.var("n")
    assert isinstance(n + 1, tvm.tir.PrimExpr)
    stmt = tvm.tir.IfThenElse(n > 0, tvm.tir.Evaluate(n), None)
    assert stmt.else_case is None
    same = tvm.tir.IfThenElse(n > 0, tvm.tir.Evaluate(n), None)
    assert tvm.ir.structural_equal(stmt, same)
    assert not tvm.ir.structural_equal(stmt, tvm.tir.IfThenElse(n > 1, tvm.tir.Evaluate(n)))
