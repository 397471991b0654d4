"""Post-training quantization (``relay.quantize.quantize`` under ``qconfig``,
kiln/relay/ptq.py): a float CNN calibrated on a few samples builds int8 kernels whose
output stays close to the float model's, and bad configurations are refused."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("onnx")

import kiln  # noqa: E402
from kiln import relay  # noqa: E402
from kiln.contrib import graph_executor  # noqa: E402
from kiln.errors import TVMError  # noqa: E402
from kiln.relay import testing  # noqa: E402


def _run(lib, feed) -> np.ndarray:
    gm = graph_executor.GraphModule(lib["default"](kiln.cpu(0)))
    gm.set_input(**feed)
    gm.run()
    return gm.get_output(0).numpy()


@pytest.fixture(scope="module")
def model():
    onnx_model = testing.residual_block(c=16, hw=12)
    mod, params = relay.frontend.from_onnx(onnx_model)
    name, x = testing.random_input(onnx_model)
    rng = np.random.default_rng(0)
    data = [{name: rng.standard_normal(x.shape).astype("float32")} for _ in range(3)]
    return mod, params, data, _run(relay.build(mod, "llvm", params=params), data[0])


@pytest.mark.parametrize("mode", ["max", "percentile"])
def test_calibrated_model_is_int8_and_close_to_float(model, mode):
    mod, params, data, ref = model
    with relay.quantize.qconfig(calibrate_mode=mode, skip_conv_layers=None):
        qmod = relay.quantize.quantize(mod, params, data)
    assert sum(n.op == "qnn.quantize" for n in qmod["main"].nodes) == 4  # 2 convs: in, out
    lib = relay.build(qmod, "llvm")
    assert lib.summary.count("qnn.conv2d") == 2
    out = _run(lib, data[0])
    assert np.abs(out - ref).max() <= 0.05 * np.abs(ref).max()


def test_first_convolution_stays_float_by_default(model):
    mod, params, data, _ = model
    with relay.quantize.qconfig(calibrate_mode="max"):
        qmod = relay.quantize.quantize(mod, params, data)
    assert relay.build(qmod, "llvm").summary.count("qnn.conv2d") == 1


def test_bad_configurations_are_refused(model):
    mod, params, _, _ = model
    with pytest.raises(ValueError, match="calibrate_mode"):
        with relay.quantize.qconfig(calibrate_mode="kl"):
            pass
    with pytest.raises(NotImplementedError, match="weight_scale"):
        with relay.quantize.qconfig(weight_scale="power2"):
            pass
    with relay.quantize.qconfig(calibrate_mode="max", skip_conv_layers=None), \
            pytest.raises(TVMError, match="needs a dataset"):
        relay.quantize.quantize(mod, params, [])
