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


def _tvm_kl_threshold(arr, num_bins, num_quantized_bins=255):
    """TVM's ``kl_divergence_scale`` as it reads (loops, scipy's entropy written out)."""
    def smooth(p, eps=0.0001):
        zeros, nonzeros = (p == 0), (p != 0)
        eps1 = eps * zeros.sum() / nonzeros.sum()
        return p + eps * zeros - eps1 * nonzeros

    th = np.abs(arr).max()
    hist, edges = np.histogram(arr, bins=num_bins, range=(-th, th))
    zero, half = num_bins // 2, num_quantized_bins // 2
    best, best_th = np.inf, None
    for i in range(half, zero + 1):
        start, stop = zero - i, zero + i + 1
        sliced = hist[start:stop]
        p = sliced.astype(np.float64)
        p[0] += hist[:start].sum()
        p[-1] += hist[stop:].sum()
        nz = (p != 0).astype(np.int64)
        merged = sliced.size // num_quantized_bins
        qb = [sliced[j * merged:(j + 1) * merged].sum() for j in range(num_quantized_bins)]
        qb[-1] += sliced[num_quantized_bins * merged:].sum()
        q = np.zeros(sliced.size)
        for j in range(num_quantized_bins):
            lo = j * merged
            hi = sliced.size if j == num_quantized_bins - 1 else lo + merged
            if nz[lo:hi].sum():
                q[lo:hi] = qb[j] / nz[lo:hi].sum()
        q[p == 0] = 0
        p, q = smooth(p), smooth(q)
        p, q = p / p.sum(), q / q.sum()
        d = np.sum(p * np.log(p / q))
        if d < best:
            best, best_th = d, edges[stop]
    return best_th


@pytest.mark.parametrize("kind", ["normal", "relu_with_outlier"])
def test_kl_divergence_threshold_matches_tvms_algorithm(kind):
    rng = np.random.default_rng(3)
    x = rng.standard_normal(20000)
    if kind == "relu_with_outlier":
        x = np.append(np.maximum(x, 0), 40.0)
    got = relay.quantize.kl_divergence_scale(x, num_bins=801)
    assert got == pytest.approx(_tvm_kl_threshold(x, 801), rel=1e-12)
    assert got < np.abs(x).max()  # clips the tail (the outlier)


@pytest.mark.slow
def test_kl_divergence_calibration_of_a_small_cnn(model):
    mod, params, data, ref = model
    with relay.quantize.qconfig(calibrate_mode="kl_divergence", skip_conv_layers=None):
        qmod = relay.quantize.quantize(mod, params, data)
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
