"""TVM's other model importers, which kiln does not implement: ``from_mxnet``, ``from_keras``,
``from_tflite``, ``from_tensorflow``, ``from_darknet``, ``from_caffe2``, ``from_coreml`` and
``from_paddle``, with TVM's signatures so that classic code reaches a clear error.

Guarantees: each raises ``ImportError`` naming the package to install when its framework's
package does not import (as TVM's importer does), and otherwise ``NotImplementedError``
saying that kiln has no converter for that framework's operators and how to get the model
to ``from_onnx`` or ``from_pytorch`` instead. None of them returns.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import NoReturn

__all__ = ["from_mxnet", "from_keras", "from_tflite", "from_tensorflow", "from_darknet",
           "from_caffe2", "from_coreml", "from_paddle"]


@dataclass(frozen=True)
class _Framework:
    """What one of TVM's importers needs, and the way around it with kiln."""

    name: str  # the framework, as users call it
    module: str  # the Python package TVM's importer imports
    install: str  # what to install for it
    instead: str  # how to bring such a model to kiln


_FRAMEWORKS = {
    "from_mxnet": _Framework("MXNet", "mxnet", "pip install mxnet",
                             "export it with mxnet.onnx.export_model and use from_onnx"),
    "from_keras": _Framework("Keras", "keras", "pip install keras",
                             "convert it with tf2onnx.convert.from_keras and use from_onnx"),
    "from_tflite": _Framework("TensorFlow Lite", "tflite", "pip install tflite",
                              "convert it with tf2onnx (--tflite) and use from_onnx"),
    "from_tensorflow": _Framework("TensorFlow", "tensorflow", "pip install tensorflow",
                                  "convert it with tf2onnx and use from_onnx"),
    "from_darknet": _Framework("Darknet", "cffi",
                               "pip install cffi, and darknet's shared library to load the "
                               "network", "rebuild it in PyTorch and use from_pytorch"),
    "from_caffe2": _Framework("Caffe2", "caffe2", "a PyTorch build with Caffe2",
                              "export it with caffe2.python.onnx and use from_onnx"),
    "from_coreml": _Framework("Core ML", "coremltools", "pip install coremltools",
                              "convert it with onnxmltools and use from_onnx"),
    "from_paddle": _Framework("PaddlePaddle", "paddle", "pip install paddlepaddle",
                              "export it with paddle.onnx.export and use from_onnx"),
}


def _unavailable(frontend: str) -> NoReturn:
    fw = _FRAMEWORKS[frontend]
    try:
        importlib.import_module(fw.module)
    except ImportError as e:
        raise ImportError(f"relay.frontend.{frontend} needs the {fw.module} package "
                          f"({fw.install})") from e
    raise NotImplementedError(f"relay.frontend.{frontend}: kiln has no converter for "
                              f"{fw.name} models (only from_onnx and from_pytorch are "
                              f"implemented); {fw.instead}")


def from_mxnet(symbol, shape=None, dtype="float32", arg_params=None, aux_params=None):
    """TVM's MXNet importer (not implemented in kiln)."""
    _unavailable("from_mxnet")


def from_keras(model, shape=None, layout="NCHW"):
    """TVM's Keras importer (not implemented in kiln)."""
    _unavailable("from_keras")


def from_tflite(model, shape_dict=None, dtype_dict=None, op_converter=None):
    """TVM's TensorFlow Lite importer (not implemented in kiln)."""
    _unavailable("from_tflite")


def from_tensorflow(graph, layout="NHWC", shape=None, outputs=None, convert_config=None):
    """TVM's TensorFlow importer (not implemented in kiln)."""
    _unavailable("from_tensorflow")


def from_darknet(net, shape=None, dtype="float32"):
    """TVM's Darknet importer (not implemented in kiln)."""
    _unavailable("from_darknet")


def from_caffe2(init_net, predict_net, shape=None, dtype="float32"):
    """TVM's Caffe2 importer (not implemented in kiln)."""
    _unavailable("from_caffe2")


def from_coreml(model, shape=None):
    """TVM's Core ML importer (not implemented in kiln)."""
    _unavailable("from_coreml")


def from_paddle(program_or_layer, shape_dict=None, scope=None):
    """TVM's PaddlePaddle importer (not implemented in kiln)."""
    _unavailable("from_paddle")
