"""The relay tests' ONNX models: :mod:`kiln.relay.testing`'s builders, with the two networks
at a small default size (10 classes; ResNet-18 at 32x32 input, the size the other relay tests
build it at, so a session compiles its kernels once; MobileNetV2 at 64x64 and width 0.5) to
keep the tests fast."""

from __future__ import annotations

import pytest

pytest.importorskip("onnx")

from kiln.relay import testing as _testing  # noqa: E402
from kiln.relay.testing import (  # noqa: E402, F401
    conv_bias_relu,
    depthwise,
    exported_flatten_pattern,
    gemm_classifier,
    maxpool_relu,
    pooling,
    reshape_matmul_concat,
    residual_block,
    two_branches,
)


def resnet18(hw=32, classes=10, **kw):
    return _testing.resnet18(hw=hw, classes=classes, **kw)


def mobilenet_v2(hw=64, width=0.5, classes=10, **kw):
    return _testing.mobilenet_v2(hw=hw, width=width, classes=classes, **kw)


def build_and_run(model, feed: dict):
    """Compile ONNX ``model`` at opt_level 3, run it on ``feed`` and return ``(library,
    first output)``."""
    import kiln
    from kiln import relay
    from kiln.contrib import graph_executor

    mod, params = relay.frontend.from_onnx(model)
    with relay.build_config(opt_level=3):
        lib = relay.build(mod, "llvm", params=params)
    gm = graph_executor.GraphModule(lib["default"](kiln.cpu(0)))
    gm.set_input(**feed)
    gm.run()
    return lib, gm.get_output(0).numpy()
