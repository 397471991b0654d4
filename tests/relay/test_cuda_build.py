"""``relay.build(mod, target="cuda")``: the op strategy's GPU ladder (topi.cuda's schedules and
computes looked up by name, one thread per output where topi.cuda has nothing), fused groups
compiled as one kernel each by NVRTC, and whole models run through the graph executor with
their kernels on the CPU emulator of tests/codegen/cuda_emulator.py (host memory standing in
for cuda(0)'s), against onnxruntime; on ``cuda(0)`` where there is a GPU (``gpu`` marker)."""

from __future__ import annotations

import ctypes
import logging

import numpy as np
import pytest

pytest.importorskip("onnx")

import kiln  # noqa: E402
from kiln import relay, topi  # noqa: E402
from kiln.errors import TVMError  # noqa: E402
from kiln.relay import strategy, testing  # noqa: E402
from kiln.relay.build_module import optimize_and_fuse  # noqa: E402
from kiln.runtime import ndarray  # noqa: E402
from kiln.runtime.device import CUDA  # noqa: E402
from kiln.runtime.graph_executor import GraphExecutorFactoryModule, GraphModule  # noqa: E402
from kiln.target import Target  # noqa: E402

from ..codegen import cuda_emulator  # noqa: E402
from ..codegen.cuda_workloads import NVRTC_MISSING, have_nvrtc  # noqa: E402
from . import models  # noqa: E402

needs_nvrtc = pytest.mark.skipif(not have_nvrtc(), reason=NVRTC_MISSING)
needs_emulator = pytest.mark.skipif(not cuda_emulator.available(),
                                    reason="g++ is needed to emulate kernels")


def _build(model, target="cuda"):
    mod, params = relay.frontend.from_onnx(model)
    with relay.build_config(opt_level=3):
        return relay.build(mod, target, params=params)


def _groups(model):
    mod, params = relay.frontend.from_onnx(model)
    with relay.build_config(opt_level=3):
        return optimize_and_fuse(mod, params, Target("cuda"))[1]


def _feed(model) -> dict[str, np.ndarray]:
    name, x = testing.random_input(model)
    return {name: x}


def _onnxruntime(model, feed) -> np.ndarray:
    ort = pytest.importorskip("onnxruntime")
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feed)[0]


class _HostMemory:
    """A device allocator for cuda(0) that hands out host memory, which the emulator's kernels
    read and write: the graph executor's GPU path (parameters and planned storages allocated
    on the device, inputs copied in, outputs out) without a GPU."""

    def __init__(self) -> None:
        self.buffers: dict[int, np.ndarray] = {}

    def alloc(self, nbytes: int, device) -> int:
        buf = np.zeros(nbytes + 256, np.uint8)
        ptr = buf.ctypes.data + (-buf.ctypes.data) % 256
        self.buffers[ptr] = buf
        return ptr

    def free(self, ptr: int, device) -> None:
        self.buffers.pop(ptr, None)

    def copy_from_host(self, dst: int, src: np.ndarray, device) -> None:
        src = np.ascontiguousarray(src)
        ctypes.memmove(dst, src.ctypes.data, src.nbytes)

    def copy_to_host(self, dst: np.ndarray, src: int, device) -> None:
        ctypes.memmove(dst.ctypes.data, src, dst.nbytes)

    def sync(self, device) -> None:
        pass


class _EmulatedLibrary:
    """A CUDA library whose functions run their kernels on the CPU emulator."""

    def __init__(self, lib) -> None:
        self.lib = lib

    def get_function(self, name: str):
        return cuda_emulator.Emulated(self.lib, name).host


def _run_emulated(factory, feed, monkeypatch) -> np.ndarray:
    """The graph of a cuda ``factory`` run by the graph executor on cuda(0), the device's
    memory being host memory (:class:`_HostMemory`) and the kernels emulated."""
    monkeypatch.setitem(ndarray._ALLOCATORS, CUDA, _HostMemory())
    emulated = GraphExecutorFactoryModule(factory.plan, _EmulatedLibrary(factory.lib),
                                          factory.consts)
    gm = GraphModule(emulated["default"](kiln.cuda(0)))
    gm.set_input(**feed)
    gm.run()
    y = gm.get_output(0)
    assert y.device == kiln.cuda(0)
    return y.numpy()


# ---------------------------------------------------------------------------------------
# the op strategy on a GPU target
# ---------------------------------------------------------------------------------------
def test_gpu_graph_keeps_nchw_and_fuses_epilogues():
    groups = _groups(models.residual_block())
    assert [g.describe() for g in groups] == [
        "conv2d + bias_add + relu  [complex-out-fusable]",
        "conv2d + bias_add + add + relu  [complex-out-fusable]"]


def test_topi_cuda_schedule_and_compute_are_looked_up_by_name(monkeypatch):
    calls = []

    def conv2d_nchw(*args):
        calls.append("compute")
        return topi.nn.conv2d_nchw(*args)

    def schedule_conv2d_nchw(outs):
        calls.append("schedule")
        return topi.cuda.schedule_per_thread(outs)

    monkeypatch.setattr(topi.cuda, "conv2d_nchw", conv2d_nchw, raising=False)
    monkeypatch.setattr(topi.cuda, "schedule_conv2d_nchw", schedule_conv2d_nchw)
    group = _groups(models.conv_bias_relu())[0]
    with Target("cuda"):
        impl = strategy.select_implementation(group, "k", Target("cuda"))
    assert impl.schedule_name == "topi.cuda" and calls == ["compute", "schedule"]


def test_missing_topi_cuda_names_fall_back_to_topi_nn_one_thread_per_output(monkeypatch):
    monkeypatch.setitem(strategy.CUDA_COMPUTES, "conv2d", {
        "conv2d_nchw": "conv2d_nchw", "depthwise_conv2d_nchw": "depthwise_conv2d_nchw"})
    for name in ("schedule_conv2d_nchw", "conv2d_nchw", "depthwise_conv2d_nchw"):
        monkeypatch.delattr(topi.cuda, name, raising=False)
    group = _groups(models.conv_bias_relu())[0]
    assert strategy.cuda_schedule(group) is topi.cuda.schedule_per_thread
    assert "conv2d" not in strategy.cuda_computes()


def test_topi_cuda_schedule_that_does_not_apply_is_replaced(monkeypatch, caplog):
    def schedule_conv2d_nchw(outs):
        raise NotImplementedError("no tiles for this shape")

    monkeypatch.setattr(topi.cuda, "schedule_conv2d_nchw", schedule_conv2d_nchw)
    group = _groups(models.conv_bias_relu())[0]
    with caplog.at_level(logging.WARNING, logger="kiln.relay.strategy"), Target("cuda"):
        impl = strategy.select_implementation(group, "k", Target("cuda"))
    assert impl.schedule_name == "per_thread"
    assert "topi.cuda schedule failed for conv2d + relu" in caplog.text
    assert "no tiles for this shape" in caplog.text


def test_per_thread_errors_propagate(monkeypatch):
    def broken(outs):
        raise TVMError("per thread")

    monkeypatch.setattr(topi.cuda, "schedule_conv2d_nchw", broken)
    monkeypatch.setattr(topi.cuda, "schedule_per_thread", broken)
    with pytest.raises(TVMError, match="per thread"):
        strategy.select_implementation(_groups(models.conv_bias_relu())[0], "k", Target("cuda"))


# ---------------------------------------------------------------------------------------
# relay.build for cuda: NVRTC, the emulator, the graph executor
# ---------------------------------------------------------------------------------------
@needs_nvrtc
def test_each_fused_group_is_one_kernel():
    lib = _build(models.residual_block())
    funcs = [step["func"] for step in lib.plan["steps"]]
    assert len(funcs) == 2 and lib.plan["device"] == "cuda"
    assert [len(lib.lib.get_function(f).split.kernels) for f in funcs] == [1, 1]
    assert "__global__" in lib.lib.imported_modules[0].get_source()


@needs_nvrtc
def test_graph_built_for_cuda_refuses_a_cpu_device():
    lib = _build(models.conv_bias_relu())
    with pytest.raises(TVMError, match="built for cuda"):
        GraphModule(lib["default"](kiln.cpu(0)))


@pytest.mark.slow  # g++ builds the emulated kernels
@needs_nvrtc
@needs_emulator
def test_exported_cuda_graph_loads_and_runs(tmp_path, monkeypatch):
    model = models.residual_block()
    feed = _feed(model)
    _build(model).export_library(tmp_path / "model.tar")
    loaded = relay.load_module(str(tmp_path / "model.tar"))
    assert loaded.plan["device"] == "cuda"
    y = _run_emulated(loaded, feed, monkeypatch)
    np.testing.assert_allclose(y, _onnxruntime(model, feed), rtol=1e-4, atol=1e-5)


@needs_nvrtc
def test_graph_module_on_cuda_checks_kernel_arguments_once(monkeypatch):
    monkeypatch.setitem(ndarray._ALLOCATORS, CUDA, _HostMemory())
    lib = _build(models.residual_block())
    launched, checked = [], []

    class Kernel:
        def __init__(self, name):
            self.name = name

        def launch(self, grid, block, args, shared_bytes=0):
            launched.append(self.name)

    monkeypatch.setattr(lib.lib.imported_modules[0], "kernel", lambda name, dev: Kernel(name))
    for name in lib.lib.functions:
        host = lib.lib.get_function(name)
        monkeypatch.setattr(host, "_check", lambda args, check=host._check: (
            checked.append(len(args)), check(args))[1])
    gm = GraphModule(lib["default"](kiln.cuda(0)))
    gm.run()
    gm.run()
    assert len(checked) == 2 and len(launched) == 4, (checked, launched)


def test_graph_time_evaluator_times_run():
    lib = _build(models.conv_bias_relu(), "llvm")
    gm = GraphModule(lib["default"](kiln.cpu(0)))
    result = gm.module.time_evaluator("run", kiln.cpu(0), number=2, repeat=3)()
    assert len(result.results) == 3 and result.mean > 0
    with pytest.raises(AttributeError, match="times 'run'"):
        gm.module.time_evaluator("set_input")


@pytest.mark.slow  # g++ builds the emulated kernels: about 2 s a model
@needs_nvrtc
@needs_emulator
@pytest.mark.parametrize("name", ["residual_block", "depthwise", "gemm_classifier", "pooling"])
def test_model_on_the_emulator_matches_onnxruntime(name, monkeypatch):
    model = getattr(models, name)()
    feed = _feed(model)
    y = _run_emulated(_build(model, "cuda -max_num_threads=64"), feed, monkeypatch)
    np.testing.assert_allclose(y, _onnxruntime(model, feed), rtol=1e-4, atol=1e-5)


def _strided_pointwise_model():
    """A 1x1 stride-2 convolution with bias, then relu: relay's CUDA strategy computes it as
    an implicit GEMM (two kernels and a workspace)."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((16, 8, 1, 1)).astype("float32"), "w")
    b = numpy_helper.from_array(rng.standard_normal(16).astype("float32"), "b")
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], strides=[2, 2]),
             helper.make_node("Relu", ["c"], ["y"])]
    graph = helper.make_graph(
        nodes, "strided_pointwise",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8, 10, 10])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 16, 5, 5])], [w, b])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


@pytest.mark.slow  # g++ builds the emulated kernels
@needs_nvrtc
@needs_emulator
def test_implicit_gemm_convolution_on_the_emulator_matches_onnxruntime(monkeypatch):
    model = _strided_pointwise_model()
    lib = _build(model)
    (step,) = lib.plan["steps"]
    assert len(lib.lib.get_function(step["func"]).split.kernels) == 2
    feed = {"x": np.random.default_rng(1).standard_normal((2, 8, 10, 10)).astype("float32")}
    y = _run_emulated(lib, feed, monkeypatch)
    np.testing.assert_allclose(y, _onnxruntime(model, feed), rtol=1e-4, atol=1e-5)


@pytest.mark.gpu
@pytest.mark.slow  # NVRTC compiles a network's kernels in about 10-20 s
@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2"])
def test_network_on_cuda_matches_onnxruntime(name):
    """ResNet-18 (all its layers at 112x112) and MobileNetV2 on cuda(0), against onnxruntime
    on the CPU; ``time_evaluator`` (CUDA events) times the whole graph."""
    if not have_nvrtc():
        pytest.skip(NVRTC_MISSING)
    if not kiln.cuda(0).exist:
        pytest.skip("no CUDA GPU")
    model = getattr(testing, name)(hw=112, batch=2)
    feed = _feed(model)
    lib = _build(model)
    gm = GraphModule(lib["default"](kiln.cuda(0)))
    gm.set_input(**feed)
    gm.run()
    y = gm.get_output(0)
    assert y.device == kiln.cuda(0)
    ref = _onnxruntime(model, feed)
    assert np.abs(y.numpy() - ref).max() <= 1e-4 * np.abs(ref).max()
    # the graph's own timer runs on the device: one result per repeat (its values are not tested)
    assert len(gm.module.time_evaluator("run", kiln.cuda(0), number=2, repeat=2)().results) == 2
