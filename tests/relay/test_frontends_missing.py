"""TVM's importers that kiln does not implement exist with TVM's signatures: without their
framework's package each raises an ImportError naming the package to install; with it, a
NotImplementedError saying kiln has no converter and how to go through ONNX instead.
from_pytorch without torch names torch."""

import inspect
import sys
import types

import pytest

from kiln import relay

#: importer -> (the package it imports, TVM's parameters)
FRONTENDS = {
    relay.frontend.from_mxnet: ("mxnet", ["symbol", "shape", "dtype", "arg_params",
                                          "aux_params"]),
    relay.frontend.from_keras: ("keras", ["model", "shape", "layout"]),
    relay.frontend.from_tflite: ("tflite", ["model", "shape_dict", "dtype_dict",
                                            "op_converter"]),
    relay.frontend.from_tensorflow: ("tensorflow", ["graph", "layout", "shape", "outputs",
                                                    "convert_config"]),
    relay.frontend.from_darknet: ("cffi", ["net", "shape", "dtype"]),
    relay.frontend.from_caffe2: ("caffe2", ["init_net", "predict_net", "shape", "dtype"]),
    relay.frontend.from_coreml: ("coremltools", ["model", "shape"]),
    relay.frontend.from_paddle: ("paddle", ["program_or_layer", "shape_dict", "scope"]),
}


def _call(fn):
    required = [p for p in inspect.signature(fn).parameters.values()
                if p.default is inspect.Parameter.empty]
    return fn(*[object()] * len(required))


@pytest.mark.parametrize("fn", FRONTENDS, ids=lambda fn: fn.__name__)
def test_signature_is_tvms(fn):
    assert list(inspect.signature(fn).parameters) == FRONTENDS[fn][1]


@pytest.mark.parametrize("fn", FRONTENDS, ids=lambda fn: fn.__name__)
def test_without_the_package_an_import_error_names_it(fn, monkeypatch):
    package = FRONTENDS[fn][0]
    monkeypatch.setitem(sys.modules, package, None)  # `import package` raises ImportError
    with pytest.raises(ImportError, match=rf"relay\.frontend\.{fn.__name__} needs the "
                                          rf"{package} package \(.+\)"):
        _call(fn)


@pytest.mark.parametrize("fn", FRONTENDS, ids=lambda fn: fn.__name__)
def test_with_the_package_not_implemented_says_what_to_do(fn, monkeypatch):
    package = FRONTENDS[fn][0]
    monkeypatch.setitem(sys.modules, package, types.ModuleType(package))
    with pytest.raises(NotImplementedError, match=r"kiln has no converter for .* models "
                                                  r"\(only from_onnx and from_pytorch"):
        _call(fn)


def test_from_pytorch_without_torch_names_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "torch", None)
    with pytest.raises(ImportError, match=r"from_pytorch needs PyTorch \(pip install torch\)"):
        relay.frontend.from_pytorch(object(), [("x", (1,))])
