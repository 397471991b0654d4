"""The models suite's reference engines and model choice, on a tiny model (no timing
assertions): an engine that is not installed is a note, not an error; both onnxruntime
settings give the fp32 reference; an unknown model is refused by name."""

from __future__ import annotations

import sys

import numpy as np
import pytest

pytest.importorskip("onnxruntime")
testing = pytest.importorskip("kiln.relay.testing")

from benchmarks import models, references  # noqa: E402


def _tiny():
    model = testing.conv_bias_relu()
    name, x = testing.random_input(model)
    return model, {name: x}


@pytest.mark.parametrize("module, engine", [("openvino", "openvino"),
                                            ("iree.compiler", "iree")])
def test_missing_engine_is_reported_not_installed(monkeypatch, module, engine):
    monkeypatch.setitem(sys.modules, module, None)  # as if it were not installed
    model, feed = _tiny()
    ref = (references.openvino(model, feed, 1, "f32") if engine == "openvino"
           else references.iree(model, feed, 1))
    assert ref.run is None and ref.output is None
    assert ref.note == f"{module.split('.')[0]} not installed"


def test_onnxruntime_settings_agree():
    model, feed = _tiny()
    default = references.onnxruntime_defaults(model, feed, 1)
    nospin = references.onnxruntime_kiln_settings(model, feed, 1)
    assert "defaults" in default.label and "no spinning" in nospin.label
    np.testing.assert_array_equal(default.output, nospin.output)
    np.testing.assert_array_equal(default.run()[0], default.output)


def test_unknown_model_is_refused():
    with pytest.raises(ValueError, match="unknown model.*known: resnet18"):
        models.run(models=["vgg"], verbose=False)
    with pytest.raises(SystemExit):
        models.main(["--models", "resnet18,vgg"])
