"""Model importers: ``relay.frontend.from_onnx`` and ``from_pytorch`` (each returns
``(mod, params)``); TVM's other importers (``from_tensorflow``, ``from_keras``, ...) exist with
their signatures and raise an ``ImportError`` or ``NotImplementedError`` saying what is
missing (:mod:`.missing`)."""

from .missing import (
    from_caffe2,
    from_coreml,
    from_darknet,
    from_keras,
    from_mxnet,
    from_paddle,
    from_tensorflow,
    from_tflite,
)
from .onnx import OnnxImportError, from_onnx
from .pytorch import from_pytorch

__all__ = ["from_onnx", "OnnxImportError", "from_pytorch", "from_mxnet", "from_keras",
           "from_tflite", "from_tensorflow", "from_darknet", "from_caffe2", "from_coreml",
           "from_paddle"]
